// durin.worker against a real `durin serve`: remote steps of the example
// flows (bin/worker_steps.cpp: acme.remote-echo on queue `workers`,
// acme.pay's `charge` on `payments` with a 600 ms start-to-close timeout)
// run end to end in this process; a lease lost mid-step is refused as late
// and the worker goes on; stop() is graceful; step errors choose retries.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Durin, FatalError, RetryableError, UnauthorizedError } from "../src/index.js";
import { eventually, startServer } from "./support/server.js";

let server;
let durin;
let sent = []; // {path, body} of every request this client sent

before(async () => {
  server = await startServer({ env: { DURIN_CHARGE_TIMEOUT_MS: "600" } });
  const recording = (url, init) => {
    sent.push({ path: new URL(url).pathname, body: init.body === undefined ? undefined : JSON.parse(init.body) });
    return fetch(url, init);
  };
  durin = new Durin({ server: server.url, apiKey: server.apiKey, fetch: recording });
});

after(async () => {
  await server?.stop();
});

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test("remote steps run end to end through batched polls and reports, with meta", async () => {
  sent = [];
  const metas = [];
  const worker = durin.worker({
    pollWaitMs: 500,
    queue: "workers",
    concurrency: 3,
    steps: {
      "remote-echo": async ([value], meta) => {
        metas.push({ ...meta });
        assert.equal(await meta.heartbeat({ message: "echoing", current: 1, total: 1 }), true);
        return { echoed: value.n + 1 };
      },
    },
  });
  try {
    const runs = [];
    for (let i = 0; i < 4; ++i) {
      runs.push(await durin.runs.start({ flow: "acme.remote-echo", input: { count: 1, value: { n: i } }, wait: false }));
    }
    for (const [i, run] of runs.entries()) {
      const done = await durin.runs.wait(run.id, { timeoutMs: 15_000 });
      assert.equal(done.status, "completed");
      assert.deepEqual(done.output, { count: 1, value: { echoed: i + 1 } });
    }
  } finally {
    await worker.stop();
  }
  assert.equal(metas.length, 4);
  for (const meta of metas) {
    assert.equal(meta.stepId, `${meta.runId}/1`);
    assert.match(meta.attemptId, /^att_/);
    assert.equal(meta.attempt, 1);
    assert.equal(meta.stepName, "remote-echo");
    assert.equal(meta.taskQueue, "workers");
    assert.equal(meta.workerId, worker.workerId);
  }
  assert.deepEqual(worker.stats, { tasks: 4, recorded: 4, refused: 0, errors: 0 });
  const polls = sent.filter((request) => request.path === "/v1/task-queues/workers/poll");
  assert.ok(polls.length > 0);
  for (const poll of polls) {
    assert.ok(poll.body.maxTasks >= 1 && poll.body.maxTasks <= 3, JSON.stringify(poll.body));
    assert.equal(poll.body.workerId, worker.workerId);
  }
  const reports = sent.filter((request) => request.path === "/v1/tasks/report");
  assert.equal(reports.reduce((n, report) => n + report.body.reports.length, 0), 4);
  assert.ok(!sent.some((request) => /\/(complete|fail)$/.test(request.path)), "only the batched report route");
});

test("a lease lost mid-step: the late report is recorded: false, another attempt's outcome stands, the worker goes on", async () => {
  const outcomes = [];
  const attempts = [];
  const worker = durin.worker({
    pollWaitMs: 500,
    queue: "payments",
    concurrency: 2,
    onOutcome: (outcome) => outcomes.push(outcome),
    steps: {
      charge: async ([orderId, index], meta) => {
        attempts.push({ stepId: meta.stepId, attemptId: meta.attemptId, attempt: meta.attempt });
        if (orderId === "L-1" && meta.attempt === 1) {
          await sleep(1_500); // outlives the 600 ms start-to-close timeout
          const goOn = await meta.heartbeat({ message: "still charging" });
          assert.equal(goOn, false);
          assert.equal(meta.signal.aborted, true);
        }
        return { charged: meta.stepId, attemptId: meta.attemptId, orderId, index };
      },
    },
  });
  try {
    const run = await durin.runs.start({ flow: "acme.pay", input: { orderId: "L-1" }, wait: false });
    const done = await durin.runs.wait(run.id, { timeoutMs: 15_000 });
    assert.equal(done.status, "completed");
    await eventually(() => outcomes.length === 2);
    const [first, second] = attempts;
    assert.equal(first.stepId, second.stepId, "one step, two attempts");
    assert.notEqual(first.attemptId, second.attemptId);
    assert.equal(second.attempt, 2);
    assert.equal(done.output.receipts[0].attemptId, second.attemptId, "the second attempt's outcome stands");
    const late = outcomes.find((outcome) => outcome.attemptId === first.attemptId);
    assert.equal(late.recorded, false);
    assert.equal(late.reason, "stale_attempt");
    assert.equal(outcomes.find((outcome) => outcome.attemptId === second.attemptId).recorded, true);

    // It goes on: the next run's charge is taken by the same worker.
    const next = await durin.runs.start({ flow: "acme.pay", input: { orderId: "L-2", charges: 2 }, wait: false });
    const paid = await durin.runs.wait(next.id, { timeoutMs: 15_000 });
    assert.equal(paid.status, "completed");
    assert.equal(paid.output.receipts.length, 2);
  } finally {
    await worker.stop();
  }
  assert.equal(worker.stats.refused, 1);
  assert.equal(worker.stats.recorded, 3);
});

test("stop() is graceful: the step in hand finishes and is reported before it resolves", async () => {
  let started = false;
  const worker = durin.worker({
    pollWaitMs: 500,
    queue: "workers",
    steps: {
      "remote-echo": async ([value]) => {
        started = true;
        await sleep(700);
        return value;
      },
    },
  });
  const run = await durin.runs.start({ flow: "acme.remote-echo", input: { value: "graceful" }, wait: false });
  await eventually(() => started);
  const began = Date.now();
  await worker.stop();
  assert.ok(Date.now() - began >= 400, "stop waited for the step");
  assert.equal(worker.stats.recorded, 1);
  const done = await durin.runs.wait(run.id, { timeoutMs: 5_000 });
  assert.equal(done.status, "completed");
  assert.equal(done.output.value, "graceful");
  await worker.done;
});

test("RetryableError retries the step after retryAfterMs; FatalError and an unknown step fail it for good", async () => {
  const worker = durin.worker({
    pollWaitMs: 500,
    queue: "workers",
    steps: {
      "remote-echo": ([value], meta) => {
        if (value === "fatal") {
          throw new FatalError("the card was declined");
        }
        if (meta.attempt === 1) {
          throw new RetryableError("busy, try later", { retryAfterMs: 50 });
        }
        return { attempt: meta.attempt };
      },
    },
  });
  try {
    // A retry's backoff is a durable timer: the run is waiting meanwhile,
    // so follow it with runs.wait.
    const started = await durin.runs.start({ flow: "acme.remote-echo", input: { value: "retry" }, wait: false });
    const retried = await durin.runs.wait(started.id, { timeoutMs: 10_000 });
    assert.equal(retried.status, "completed");
    assert.deepEqual(retried.output.value, { attempt: 2 });
    const failed = await durin.runs.start({ flow: "acme.remote-echo", input: { value: "fatal" } });
    assert.equal(failed.status, "failed");
    assert.match(failed.error.message, /the card was declined/);
  } finally {
    await worker.stop();
  }
  const none = durin.worker({ queue: "workers", steps: {}, pollWaitMs: 500 });
  try {
    const failed = await durin.runs.start({ flow: "acme.remote-echo", input: { value: 1 } });
    assert.equal(failed.status, "failed");
    assert.match(failed.error.message, /no step registered as 'remote-echo'/);
  } finally {
    await none.stop();
  }
});

test("a worker whose key is refused stops, and done rejects with UnauthorizedError", async () => {
  const refused = new Durin({ server: server.url, apiKey: "revoked-or-wrong" });
  const worker = refused.worker({ queue: "workers", steps: {} });
  await assert.rejects(worker.done, (error) => UnauthorizedError.is(error) && error.status === 401);
  await worker.stop();
  assert.equal(worker.stats.errors, 1);
});
