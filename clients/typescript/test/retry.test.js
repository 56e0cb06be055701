// The opt-in retry: what is retried (no answer, a timeout, 503), with the
// same idempotency key and body, after at least Retry-After; what never is
// (4xx, 409 in flight, an unkeyed POST that may have been sent). A real
// durin server does not fail on demand, so these run against a scripted
// HTTP server on 127.0.0.1 in this process, which records every request.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, beforeEach, test } from "node:test";

import {
  ConnectionError,
  Durin,
  IdempotencyKeyInFlightError,
  QueryRefusedError,
  ShardUnavailableError,
  TimeoutError,
  UnavailableError,
  UnprocessableError,
  UpdateRejectedError,
} from "../src/index.js";
import { retryDelayMs, parseRetryAfter } from "../src/http.js";
import { refusal } from "./support/server.js";

// Each entry answers one request, in order: [status, body, headers], or
// "reset" (close the connection unanswered), or "hang" (never answer).
let script = [];
let requests = [];
let stub;
let url;

before(async () => {
  stub = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      requests.push({ method: request.method, url: request.url, headers: request.headers, body, at: Date.now() });
      const step = script.shift() ?? [200, { id: "run_x", status: "completed" }];
      if (step === "reset") {
        request.socket.destroy();
        return;
      }
      if (step === "hang") {
        return;
      }
      const [status, answer, headers = {}] = step;
      response.writeHead(status, { "content-type": "application/json", ...headers });
      response.end(JSON.stringify(answer));
    });
  });
  await new Promise((resolve) => stub.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${stub.address().port}`;
});

after(async () => {
  stub.closeAllConnections();
  await new Promise((resolve) => stub.close(resolve));
});

beforeEach(() => {
  script = [];
  requests = [];
});

const unavailable = (seconds) => [
  503,
  { code: "storage-error", message: "the write may or may not have landed" },
  seconds === undefined ? {} : { "retry-after": String(seconds) },
];

test("without retry a 503 is thrown at once, with its Retry-After", async () => {
  script = [unavailable(2)];
  const durin = new Durin({ server: url, apiKey: "k" });
  const error = await refusal(durin.runs.start({ flow: "f", idempotencyKey: "k-1" }));
  assert.ok(UnavailableError.is(error));
  assert.ok(!ShardUnavailableError.is(error));
  assert.equal(error.status, 503);
  assert.equal(error.code, "storage-error");
  assert.equal(error.retryAfter, 2);
  assert.equal(requests.length, 1);
});

test("with retry a keyed start is sent again with the same key and body, after Retry-After", async () => {
  script = [unavailable(1), [202, { id: "run_1", status: "pending" }]];
  const durin = new Durin({ server: url, apiKey: "k", retry: { attempts: 3, initialDelayMs: 10 } });
  const run = await durin.runs.start({ flow: "f", input: { a: 1 }, wait: false, idempotencyKey: "k-2" });
  assert.equal(run.id, "run_1");
  assert.equal(requests.length, 2);
  assert.equal(requests[0].headers["idempotency-key"], "k-2");
  assert.equal(requests[1].headers["idempotency-key"], "k-2");
  assert.equal(requests[1].body, requests[0].body);
  assert.deepEqual(JSON.parse(requests[0].body), { flow: "f", input: { a: 1 }, wait: false });
  const waitedMs = requests[1].at - requests[0].at;
  assert.ok(waitedMs >= 990, `waited ${waitedMs} ms, Retry-After was 1 s`);
  assert.ok(waitedMs < 3_000, `waited ${waitedMs} ms`);
});

test("retry gives up after `attempts` tries in all and throws the last error", async () => {
  script = [unavailable(0), unavailable(0), [503, { code: "shard-unavailable", message: "no shard" }]];
  const durin = new Durin({ server: url, apiKey: "k", retry: { attempts: 3, initialDelayMs: 10 } });
  const error = await refusal(durin.runs.get("run_1"));
  assert.ok(ShardUnavailableError.is(error));
  assert.ok(UnavailableError.is(error));
  assert.equal(requests.length, 3);
});

test("a connection closed unanswered is retried when keyed, and not when an unkeyed POST", async () => {
  script = ["reset", [200, { id: "run_2", status: "completed" }]];
  const durin = new Durin({ server: url, apiKey: "k", retry: { attempts: 2, initialDelayMs: 10 } });
  const run = await durin.runs.start({ flow: "f", idempotencyKey: "k-3" });
  assert.equal(run.id, "run_2");
  assert.equal(requests.length, 2);
  assert.equal(requests[1].headers["idempotency-key"], "k-3");

  script = ["reset", [200, { id: "run_3", status: "completed" }]];
  requests = [];
  const error = await refusal(durin.runs.start({ flow: "f" }));
  assert.ok(ConnectionError.is(error), String(error));
  assert.equal(error.refused, false);
  assert.equal(requests.length, 1, "an unkeyed POST that may have been sent is not sent twice");
});

test("a message keyed in its body and an update with an updateId are retried; unkeyed ones are not", async () => {
  const durin = new Durin({ server: url, apiKey: "k", retry: { attempts: 3, initialDelayMs: 10 } });
  script = [unavailable(0), [200, { runId: "run_m", sequence: 2, started: false }]];
  const receipt = await durin.runs.sendMessage("run_m", "note", { n: 1 }, { idempotencyKey: "note-1" });
  assert.equal(receipt.sequence, 2);
  assert.equal(requests.length, 2);
  for (const request of requests) {
    assert.equal(request.url, "/v1/runs/run_m/messages/note");
    assert.deepEqual(JSON.parse(request.body), { payload: { n: 1 }, idempotencyKey: "note-1" });
    assert.equal(request.headers["idempotency-key"], undefined, "a message's key travels in its body");
  }

  script = ["reset", [200, { runId: "run_s", sequence: 1, started: true }]];
  requests = [];
  const start = { flow: "acme.inbox", input: {} };
  await durin.instances.sendMessage("inst/1", "note", null, { idempotencyKey: "m-1", start });
  assert.equal(requests.length, 2);
  assert.equal(requests[1].url, "/v1/instances/inst%2F1/messages/note");
  assert.deepEqual(JSON.parse(requests[1].body), { payload: null, idempotencyKey: "m-1", start });

  script = [unavailable(0), [200, { runId: "run_u", updateId: "u-1", sequence: 3, status: "completed", result: 1 }]];
  requests = [];
  await durin.runs.update("run_u", "add", { by: 1 }, { updateId: "u-1", waitFor: "completed" });
  assert.equal(requests.length, 2);
  assert.deepEqual(JSON.parse(requests[1].body), { args: { by: 1 }, updateId: "u-1", waitFor: "completed" });

  for (const call of [
    () => durin.runs.sendMessage("run_m", "note", { n: 2 }),
    () => durin.runs.update("run_u", "add", { by: 1 }),
  ]) {
    script = [unavailable(0), [200, {}]];
    requests = [];
    const error = await refusal(call());
    assert.ok(UnavailableError.is(error));
    assert.equal(requests.length, 1, "an unkeyed message or update is not sent twice");
  }
});

test("a query sends its args as JSON in ?args= and is retried as a GET", async () => {
  script = [unavailable(0), [200, { runId: "run_q", query: "value", result: { value: 1 } }]];
  const durin = new Durin({ server: url, apiKey: "k", retry: { attempts: 2, initialDelayMs: 10 } });
  const answer = await durin.runs.query("run_q", "value", { at: "now", n: [1] });
  assert.deepEqual(answer.result, { value: 1 });
  assert.equal(requests.length, 2);
  const sent = new URL(requests[1].url, url);
  assert.equal(sent.pathname, "/v1/runs/run_q/queries/value");
  assert.deepEqual(JSON.parse(sent.searchParams.get("args")), { at: "now", n: [1] });
  script = [[200, { runId: "run_q", query: "value", result: null }]];
  requests = [];
  await durin.runs.query("run_q", "value");
  assert.equal(requests[0].url, "/v1/runs/run_q/queries/value");
});

test("422 answers are typed by code: update-rejected, query-refused, else UnprocessableError; never retried", async () => {
  const durin = new Durin({ server: url, apiKey: "k", retry: { attempts: 3, initialDelayMs: 10 } });
  script = [[422, { code: "query-refused", message: "query 'value' tried a durable call" }]];
  const refused = await refusal(durin.runs.query("run_q", "value"));
  assert.ok(QueryRefusedError.is(refused), String(refused));
  assert.ok(UnprocessableError.is(refused));
  assert.ok(!UpdateRejectedError.is(refused));
  assert.equal(refused.status, 422);
  assert.equal(refused.code, "query-refused");
  assert.equal(refused.message, "query 'value' tried a durable call");
  assert.equal(requests.length, 1);
  script = [[422, { code: "update-rejected", message: "no" }]];
  const rejected = await refusal(durin.runs.update("run_u", "add", {}, { updateId: "u-2" }));
  assert.ok(UpdateRejectedError.is(rejected));
  script = [[422, { code: "step-failed", message: "failed" }]];
  const other = await refusal(durin.runs.get("run_x"));
  assert.ok(UnprocessableError.is(other));
  assert.ok(!QueryRefusedError.is(other) && !UpdateRejectedError.is(other));
});

test("a timeout is TimeoutError; with retry the request is sent again", async () => {
  script = ["hang"];
  const plain = new Durin({ server: url, apiKey: "k", timeoutMs: 200 });
  const began = Date.now();
  const error = await refusal(plain.runs.get("run_4"));
  assert.ok(TimeoutError.is(error), String(error));
  assert.ok(!ConnectionError.is(error));
  assert.ok(Date.now() - began < 2_000);
  assert.equal(requests.length, 1);

  script = ["hang", [200, { id: "run_4", status: "running" }]];
  requests = [];
  const retrying = new Durin({ server: url, apiKey: "k", timeoutMs: 200, retry: { attempts: 2, initialDelayMs: 10 } });
  const run = await retrying.runs.get("run_4");
  assert.equal(run.id, "run_4");
  assert.equal(requests.length, 2);
});

test("4xx answers are never retried, an in-flight key included", async () => {
  script = [
    [409, { code: "idempotency-key-in-flight", message: "still running" }, { "retry-after": "5" }],
    [200, { id: "run_5" }],
  ];
  const durin = new Durin({ server: url, apiKey: "k", retry: { attempts: 5, initialDelayMs: 10 } });
  const error = await refusal(durin.runs.start({ flow: "f", idempotencyKey: "k-5" }));
  assert.ok(IdempotencyKeyInFlightError.is(error));
  assert.equal(error.retryAfter, 5);
  assert.equal(requests.length, 1);
});

test("a refused connection is ConnectionError(refused), retried even unkeyed: nothing was sent", async () => {
  const closed = createServer();
  await new Promise((resolve) => closed.listen(0, "127.0.0.1", resolve));
  const port = closed.address().port;
  await new Promise((resolve) => closed.close(resolve));
  const durin = new Durin({ server: `http://127.0.0.1:${port}`, apiKey: "k", retry: { attempts: 3, initialDelayMs: 100 } });
  const began = Date.now();
  const error = await refusal(durin.runs.start({ flow: "f" }));
  assert.ok(ConnectionError.is(error));
  assert.equal(error.refused, true);
  assert.ok(Date.now() - began >= 240, "two waits of about 100 and 200 ms: it was tried three times");
});

test("the wait doubles with jitter, and is at least Retry-After, at most 60 s of it", () => {
  const policy = { attempts: 5, initialDelayMs: 500, maxDelayMs: 10_000 };
  assert.equal(retryDelayMs(policy, 1, undefined, () => 0.5), 500);
  assert.equal(retryDelayMs(policy, 2, undefined, () => 0.5), 1_000);
  assert.equal(retryDelayMs(policy, 3, undefined, () => 0), 1_600);
  assert.equal(retryDelayMs(policy, 9, undefined, () => 1), 10_000);
  assert.equal(retryDelayMs(policy, 1, 5, () => 0.5), 5_000);
  assert.equal(retryDelayMs(policy, 1, 3_600, () => 0.5), 60_000);
  assert.equal(parseRetryAfter("5"), 5);
  assert.equal(parseRetryAfter(new Date(Date.now() + 3_000).toUTCString()) >= 2, true);
  assert.equal(parseRetryAfter("soon"), undefined);
  assert.equal(parseRetryAfter(null), undefined);
});
