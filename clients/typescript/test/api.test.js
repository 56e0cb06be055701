// Every route of the client against a real `durin serve`, and every error
// class the server can produce: what each call answers, and which class,
// status and code each refusal has. One server for the file; each test uses
// its own ids and keys.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  BadRequestError,
  ConflictError,
  Durin,
  DurinApiError,
  DurinError,
  ForbiddenError,
  HookConflictError,
  IdempotencyKeyInFlightError,
  NotFoundError,
  ReplayWithheldError,
  TimeoutError,
  UnauthorizedError,
} from "../src/index.js";
import { eventually, refusal, startServer } from "./support/server.js";

let server;
let durin;

before(async () => {
  server = await startServer();
  durin = new Durin({ server: server.url, apiKey: server.apiKey });
});

after(async () => {
  await server?.stop();
});

// The error `promise` rejects with; fails when it resolves.
describe("runs", () => {
  test("a waited start answers the completed run; get and history show it", async () => {
    const run = await durin.runs.start({ flow: "acme.review-order", input: { orderId: "R-1" } });
    assert.equal(run.status, "completed");
    assert.equal(run.flow, "acme.review-order");
    assert.deepEqual(run.input, { orderId: "R-1" });
    assert.equal(run.output.orderId, "R-1");
    assert.match(run.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const got = await durin.runs.get(run.id);
    assert.deepEqual(got, run);
    const history = await durin.runs.history(run.id);
    assert.equal(history.runId, run.id);
    assert.ok(history.events.length >= 3, JSON.stringify(history));
    assert.deepEqual(
      history.events.map((event) => event.sequence),
      history.events.map((_, i) => history.events[0].sequence + i),
    );
  });

  test("a start without wait answers at once; runs.wait follows it to the end", async () => {
    const run = await durin.runs.start({ flow: "acme.sleep", input: { ms: 300 }, wait: false });
    assert.notEqual(run.status, "completed");
    const done = await durin.runs.wait(run.id, { timeoutMs: 10_000 });
    assert.equal(done.id, run.id);
    assert.equal(done.status, "completed");
  });

  test("runs.wait gives up with TimeoutError carrying the run as last seen", async () => {
    const run = await durin.runs.start({ flow: "acme.sleep", input: { ms: 60_000 }, wait: false });
    const began = Date.now();
    const error = await refusal(durin.runs.wait(run.id, { timeoutMs: 300 }));
    assert.ok(TimeoutError.is(error), String(error));
    assert.ok(!DurinApiError.is(error));
    assert.equal(error.run.id, run.id);
    assert.ok(Date.now() - began < 3_000);
    await durin.runs.cancel(run.id);
  });

  test("list pages by cursor; awaited it is the first page, iterated every run", async () => {
    const ids = [];
    for (let i = 0; i < 5; ++i) {
      ids.push((await durin.runs.start({ flow: "acme.flaky", input: { failures: 0 } })).id);
    }
    const first = await durin.runs.list({ flow: "acme.flaky", limit: 2 });
    assert.equal(first.runs.length, 2);
    assert.equal(typeof first.nextCursor, "string");
    const seen = [];
    for await (const run of durin.runs.list({ flow: "acme.flaky", limit: 2 })) {
      assert.equal(run.flow, "acme.flaky");
      seen.push(run.id);
    }
    assert.deepEqual([...seen].sort(), [...ids].sort());
    assert.deepEqual(seen.slice(0, 2), first.runs.map((run) => run.id), "newest first, the first page first");
    let pages = 0;
    for await (const page of durin.runs.list({ flow: "acme.flaky", limit: 2 }).pages()) {
      ++pages;
      assert.ok(page.runs.length <= 2);
    }
    assert.equal(pages, 3);
    const completed = await durin.runs.list({ flow: "acme.flaky", status: "completed", limit: 1000 });
    assert.equal(completed.runs.length, 5);
    assert.equal(completed.nextCursor, null);
  });

  test("a start's memo and search attributes come back; a query finds them, a bad one is refused", async () => {
    const run = await durin.runs.start({
      flow: "acme.tagged", wait: false, memo: { note: "ts" },
      searchAttributes: { tsTeam: "blue", tsSize: 3 },
    });
    const got = await durin.runs.get(run.id);
    assert.deepEqual(got.memo, { note: "ts" });
    assert.deepEqual(got.searchAttributes.tsSize, { type: "int", value: 3 });
    await durin.runs.start({ flow: "acme.tagged", wait: false, searchAttributes: { tsTeam: "red" } });
    const seen = [];
    for await (const found of durin.runs.list({ query: "tsTeam = 'blue' AND tsSize > 2", limit: 1 })) {
      seen.push(found.id);
    }
    assert.deepEqual(seen, [run.id]);
    const refused = await refusal(durin.runs.list({ query: "tsSize = 'big'" }));
    assert.equal(refused.status, 400);
    assert.equal(refused.code, "invalid-argument");
  });

  test("cancel answers the cancelled run; a repeated commandId answers it again, a plain repeat is run-finished", async () => {
    const run = await durin.runs.start({ flow: "acme.sleep", input: { ms: 60_000 }, wait: false });
    const cancelled = await durin.runs.cancel(run.id, { reason: "test", commandId: "cancel-1" });
    assert.equal(cancelled.status, "cancelled");
    const again = await durin.runs.cancel(run.id, { reason: "test", commandId: "cancel-1" });
    assert.equal(again.status, "cancelled");
    const error = await refusal(durin.runs.cancel(run.id));
    assert.ok(DurinApiError.is(error));
    assert.ok(!ConflictError.is(error), "run-finished is not an idempotency conflict");
    assert.equal(error.status, 409);
    assert.equal(error.error.code, "run-finished");
  });

  test("a keyed cancel repeated gets the first answer", async () => {
    const run = await durin.runs.start({ flow: "acme.sleep", input: { ms: 60_000 }, wait: false });
    const first = await durin.runs.cancel(run.id, { idempotencyKey: "cancel-" + run.id });
    const retry = await durin.runs.cancel(run.id, { idempotencyKey: "cancel-" + run.id });
    assert.deepEqual(retry, first);
  });
});

describe("idempotency keys", () => {
  test("the same start twice is one run; another body with the key is ConflictError with the server's message", async () => {
    const start = (orderId) =>
      durin.runs.start({ flow: "acme.review-order", input: { orderId }, idempotencyKey: "review-K-1" });
    const first = await start("K-1");
    const retry = await start("K-1");
    assert.equal(retry.id, first.id);
    assert.equal(retry.createdAt, first.createdAt);
    const error = await refusal(start("K-2"));
    assert.ok(ConflictError.is(error));
    assert.ok(error instanceof ConflictError);
    assert.equal(error.status, 409);
    assert.equal(error.code, "conflict");
    assert.equal(
      error.message,
      "Idempotency-Key was reused with a different request body. Use a fresh key or the original body.",
    );
    assert.equal(error.name, "ConflictError");
  });

  test("a repeat while the first runs is IdempotencyKeyInFlightError with retryAfter, never retried; after the answer, the same run", async () => {
    // The step of acme.remote-echo waits on queue `workers`, which nobody
    // polls yet: the waited start holds its key until a worker comes.
    const retrying = new Durin({ server: server.url, apiKey: server.apiKey, retry: { attempts: 5 } });
    const body = { flow: "acme.remote-echo", input: { value: "in-flight" }, idempotencyKey: "echo-in-flight" };
    const first = retrying.runs.start(body);
    await eventually(async () => (await durin.runs.list({ flow: "acme.remote-echo" })).runs.length === 1);
    const began = Date.now();
    const error = await refusal(retrying.runs.start(body));
    assert.ok(Date.now() - began < 2_000, "an in-flight key is not retried by the client");
    assert.ok(IdempotencyKeyInFlightError.is(error), String(error));
    assert.ok(!ConflictError.is(error));
    assert.equal(error.status, 409);
    assert.equal(error.error.code, "idempotency-key-in-flight");
    assert.equal(error.retryAfter, 5);
    // The same key with another body is a conflict, also while in flight.
    const changed = await refusal(retrying.runs.start({ ...body, input: { value: "other" } }));
    assert.ok(ConflictError.is(changed));

    const worker = durin.worker({ queue: "workers", steps: { "remote-echo": (args) => args[0] } });
    try {
      const answered = await first;
      assert.equal(answered.status, "completed");
      assert.deepEqual(answered.output, { count: 1, value: "in-flight" });
      const again = await retrying.runs.start(body);
      assert.equal(again.id, answered.id);
    } finally {
      await worker.stop();
    }
  });

  test("a refused start is not kept: its repeat is refused the same way", async () => {
    const start = () => durin.runs.start({ flow: "acme.no-such-flow", idempotencyKey: "missing-flow" });
    for (let i = 0; i < 2; ++i) {
      const error = await refusal(start());
      assert.ok(NotFoundError.is(error));
      assert.equal(error.status, 404);
      assert.equal(error.code, "flow-not-found");
    }
  });

  test("an API key's creation replayed is ReplayWithheldError: the secret is never sent again", async () => {
    const made = await durin.apiKeys.create({ name: "replayed", idempotencyKey: "key-replayed" });
    assert.match(made.secret, /.+/);
    const error = await refusal(durin.apiKeys.create({ name: "replayed", idempotencyKey: "key-replayed" }));
    assert.ok(ReplayWithheldError.is(error), String(error));
    assert.equal(error.status, 409);
    assert.equal(error.code, "idempotency-key-replay-withheld");
    assert.ok(!error.message.includes(made.secret));
    const named = (await durin.apiKeys.list()).filter((key) => key.name === "replayed");
    assert.equal(named.length, 1, "nothing was made twice");
  });

  test("a tenant's creation replayed is withheld too", async () => {
    await durin.tenants.create({ name: "replay-tenant", idempotencyKey: "tenant-replayed" });
    const error = await refusal(durin.tenants.create({ name: "replay-tenant", idempotencyKey: "tenant-replayed" }));
    assert.ok(ReplayWithheldError.is(error));
  });
});

describe("hooks and instances", () => {
  test("a run waiting on its hook: hooks.get shows the owner, hooks.resume delivers, the run completes", async () => {
    const run = await durin.runs.start({ flow: "acme.order-notes", input: { orderId: "H-1", note: "first" } });
    assert.equal(run.status, "waiting");
    const hook = await durin.hooks.get("order:H-1");
    assert.equal(hook.token, "order:H-1");
    assert.equal(hook.runId, run.id);
    const resumed = await durin.hooks.resume("order:H-1", { note: "last", done: true }, { idempotencyKey: "resume-H-1" });
    assert.deepEqual(resumed, { runId: run.id });
    const replay = await durin.hooks.resume("order:H-1", { note: "last", done: true }, { idempotencyKey: "resume-H-1" });
    assert.deepEqual(replay, resumed);
    const done = await durin.runs.wait(run.id);
    assert.equal(done.status, "completed");
    assert.equal(done.output.notes.length, 2, JSON.stringify(done.output));
  });

  test("an unknown hook is NotFoundError hook-not-found", async () => {
    const error = await refusal(durin.hooks.get("order:nobody"));
    assert.ok(NotFoundError.is(error));
    assert.equal(error.code, "hook-not-found");
    const resume = await refusal(durin.hooks.resume("order:nobody", {}));
    assert.equal(resume.code, "hook-not-found");
  });

  test("an instance id: instances.get finds the active run; a duplicate is HookConflictError naming it", async () => {
    const run = await durin.runs.start({
      flow: "acme.order-notes",
      input: { orderId: "I-1", note: "n" },
      instanceId: "order-I-1",
    });
    assert.equal(run.instanceId, "order-I-1");
    const found = await durin.instances.get("order-I-1");
    assert.equal(found.id, run.id);
    const error = await refusal(
      durin.runs.start({ flow: "acme.order-notes", input: { orderId: "I-1b", note: "n" }, instanceId: "order-I-1" }),
    );
    assert.ok(HookConflictError.is(error), String(error));
    assert.equal(error.status, 409);
    assert.equal(error.code, "hook-conflict");
    assert.equal(error.conflictingRunId, run.id);
    const existing = await durin.runs.start({
      flow: "acme.order-notes",
      input: { orderId: "I-1b", note: "n" },
      instanceId: "order-I-1",
      onDuplicate: "return-existing-active",
    });
    assert.equal(existing.id, run.id);
    await durin.runs.cancel(run.id);
    const gone = await refusal(durin.instances.get("order-I-1"));
    assert.ok(NotFoundError.is(gone));
  });

  test("a start hook token held by another run is HookConflictError", async () => {
    const hook = { token: "start:S-1", minRetention: "1 hour" };
    const run = await durin.runs.start({ flow: "acme.review-order", input: { orderId: "S-1" }, hook });
    assert.equal(run.status, "completed");
    const error = await refusal(durin.runs.start({ flow: "acme.review-order", input: { orderId: "S-1" }, hook }));
    assert.ok(HookConflictError.is(error));
    assert.equal(error.conflictingRunId, run.id);
    const held = await durin.hooks.get("start:S-1");
    assert.equal(held.state, "retained");
  });
});

describe("API keys, tenants, authentication", () => {
  test("a created key works until revoked, then every call is UnauthorizedError", async () => {
    const made = await durin.apiKeys.create({ name: "short-lived" });
    assert.equal(made.name, "short-lived");
    const listed = await durin.apiKeys.list();
    const entry = listed.find((key) => key.id === made.id);
    assert.equal(entry.admin, false);
    assert.equal(entry.secret, undefined);
    const user = new Durin({ server: server.url, apiKey: made.secret });
    await user.runs.list({ limit: 1 });
    const revoked = await durin.apiKeys.revoke(made.id, { idempotencyKey: "revoke-" + made.id });
    assert.deepEqual(revoked, { id: made.id, revoked: true });
    const error = await refusal(user.runs.list({ limit: 1 }));
    assert.ok(UnauthorizedError.is(error), String(error));
    assert.equal(error.status, 401);
    assert.equal(error.code, "unauthorized");
    // Revoking again converges (a cluster sends the revocation everywhere
    // again): the same answer, and the key stays refused.
    assert.deepEqual(await durin.apiKeys.revoke(made.id), { id: made.id, revoked: true });
    assert.ok(UnauthorizedError.is(await refusal(user.runs.list({ limit: 1 }))));
    const unknown = await refusal(durin.apiKeys.revoke("key_0000000000000000"));
    assert.ok(NotFoundError.is(unknown));
    assert.equal(unknown.code, "api-key-not-found");
  });

  test("no key and a wrong key are UnauthorizedError", async () => {
    for (const apiKey of [undefined, "not-a-key"]) {
      const error = await refusal(new Durin({ server: server.url, apiKey }).runs.list());
      assert.ok(UnauthorizedError.is(error));
      assert.equal(error.status, 401);
    }
  });

  test("another tenant's run, hook and keys answer as not found; it may not create tenants", async () => {
    const tenant = await durin.tenants.create({ name: "other" });
    assert.equal(tenant.name, "other");
    const other = new Durin({ server: server.url, apiKey: tenant.apiKey.secret });
    const mine = await durin.runs.start({ flow: "acme.order-notes", input: { orderId: "T-1", note: "n" } });
    const error = await refusal(other.runs.get(mine.id));
    assert.ok(NotFoundError.is(error));
    assert.equal(error.status, 404);
    assert.equal(error.code, "run-not-found");
    assert.equal((await refusal(other.runs.cancel(mine.id))).code, "run-not-found");
    assert.equal((await refusal(other.hooks.get("order:T-1"))).code, "hook-not-found");
    assert.equal((await other.runs.list()).runs.length, 0);
    const keys = await other.apiKeys.list();
    assert.deepEqual(keys.map((key) => key.id), [tenant.apiKey.id]);
    const forbidden = await refusal(other.tenants.create({ name: "nested" }));
    assert.ok(ForbiddenError.is(forbidden));
    assert.equal(forbidden.status, 403);
    assert.equal(forbidden.code, "forbidden");
    await durin.runs.cancel(mine.id);
  });
});

describe("bad input", () => {
  test("the server's refusals of bad input are BadRequestError, naming the field", async () => {
    const wait = await refusal(durin.runs.start({ flow: "acme.review-order", wait: "yes" }));
    assert.ok(BadRequestError.is(wait));
    assert.equal(wait.status, 400);
    assert.equal(wait.code, "invalid-argument");
    assert.match(wait.message, /wait/);
    const limit = await refusal(durin.runs.list({ limit: 0 }));
    assert.ok(BadRequestError.is(limit));
    assert.match(limit.message, /limit/);
    const status = await refusal(durin.runs.list({ status: "sleeping" }));
    assert.equal(status.code, "invalid-argument");
    const tenant = await refusal(durin.tenants.create({}));
    assert.ok(BadRequestError.is(tenant));
    const path = await refusal(durin.runs.get(".."));
    assert.ok(BadRequestError.is(path));
    assert.equal(path.code, "invalid-path");
    const missing = await refusal(durin.runs.get("run_nope"));
    assert.ok(NotFoundError.is(missing));
    assert.equal(missing.code, "run-not-found");
  });

  test("the client refuses what it can tell is wrong before sending", () => {
    assert.throws(() => durin.runs.start({}), TypeError);
    assert.throws(() => durin.runs.get(""), TypeError);
    assert.throws(() => new Durin({ retry: { attempts: 0 } }), RangeError);
  });
});

describe("options", () => {
  test("server and apiKey default to DURIN_SERVER and DURIN_API_KEY", async () => {
    const saved = { server: process.env.DURIN_SERVER, key: process.env.DURIN_API_KEY };
    process.env.DURIN_SERVER = server.url + "/";
    process.env.DURIN_API_KEY = server.apiKey;
    try {
      const fromEnv = new Durin();
      assert.equal(fromEnv.server, server.url);
      await fromEnv.runs.list({ limit: 1 });
    } finally {
      for (const [name, value] of [["DURIN_SERVER", saved.server], ["DURIN_API_KEY", saved.key]]) {
        if (value === undefined) {
          delete process.env[name];
        } else {
          process.env[name] = value;
        }
      }
    }
  });

  test("every error is a DurinError and an Error", async () => {
    const error = await refusal(durin.runs.get("run_nope"));
    assert.ok(DurinError.is(error));
    assert.ok(error instanceof Error);
    assert.ok(!DurinError.is(new Error("plain")));
    assert.ok(!DurinError.is(null));
    assert.ok(!DurinError.is({ name: "NotFoundError" }));
  });
});
