// Talking to running flows against a real `durin serve`: messages (by run and
// by instance id, with idempotency keys and message-with-start), updates,
// queries and terminate, with the example flows acme.inbox (reads messages
// "note" until one has done: true) and acme.counter (update "add" {by},
// query "value", message "stop"). One server for the file; each test uses
// its own runs, instance ids and keys.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  BadRequestError,
  ConflictError,
  Durin,
  DurinApiError,
  HandlerNotFoundError,
  NotFoundError,
  RunFinishedError,
  UnprocessableError,
  UpdateRejectedError,
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

// The payloads of the run's recorded messages named `name`, in order.
async function recordedMessages(runId, name) {
  const history = await durin.runs.history(runId);
  return history.events
    .filter((event) => event.kind === "message-received" && event.name === name)
    .map((event) => event.value.payload);
}

const counter = (value) => durin.runs.start({ flow: "acme.counter", input: { value } });

describe("messages to a run", () => {
  test("a message is recorded once durable; a repeated key records nothing and answers as the first", async () => {
    const run = await durin.runs.start({ flow: "acme.inbox", wait: false });
    const first = await durin.runs.sendMessage(run.id, "note", { n: 1 }, { idempotencyKey: "note-1" });
    assert.equal(first.runId, run.id);
    assert.equal(first.started, false);
    assert.equal(typeof first.sequence, "number");
    const repeat = await durin.runs.sendMessage(run.id, "note", { n: 1 }, { idempotencyKey: "note-1" });
    assert.deepEqual(repeat, first);
    // The key names the message: another payload under it is not recorded either.
    const changed = await durin.runs.sendMessage(run.id, "note", { n: 99 }, { idempotencyKey: "note-1" });
    assert.deepEqual(changed, first);
    const second = await durin.runs.sendMessage(run.id, "note", { n: 2 });
    assert.ok(second.sequence > first.sequence);
    await durin.runs.sendMessage(run.id, "note", { done: true }, { idempotencyKey: "note-done" });
    const done = await durin.runs.wait(run.id);
    assert.equal(done.status, "completed");
    assert.deepEqual(done.output.notes, [{ n: 1 }, { n: 2 }, { done: true }]);
    assert.deepEqual(await recordedMessages(run.id, "note"), [{ n: 1 }, { n: 2 }, { done: true }]);
    // After the run ended, a repeated key still gets the first answer; a new
    // message is RunFinishedError.
    assert.deepEqual(await durin.runs.sendMessage(run.id, "note", { n: 1 }, { idempotencyKey: "note-1" }), first);
    const late = await refusal(durin.runs.sendMessage(run.id, "note", { n: 3 }));
    assert.ok(RunFinishedError.is(late), String(late));
    assert.ok(!ConflictError.is(late));
    assert.equal(late.status, 409);
    assert.equal(late.code, "run-finished");
  });

  test("keys are per message name: the same key under another name is another message", async () => {
    const run = await durin.runs.start({ flow: "acme.inbox", wait: false });
    const note = await durin.runs.sendMessage(run.id, "note", "a", { idempotencyKey: "shared" });
    const other = await durin.runs.sendMessage(run.id, "other", "b", { idempotencyKey: "shared" });
    assert.notEqual(other.sequence, note.sequence);
    assert.deepEqual(await recordedMessages(run.id, "note"), ["a"]);
    assert.deepEqual(await recordedMessages(run.id, "other"), ["b"]);
    await durin.runs.terminate(run.id);
  });

  test("a message with no payload records null; a bad name is BadRequestError; an unknown run NotFoundError", async () => {
    const run = await durin.runs.start({ flow: "acme.inbox", wait: false });
    await durin.runs.sendMessage(run.id, "note");
    assert.deepEqual(await recordedMessages(run.id, "note"), [null]);
    const bad = await refusal(durin.runs.sendMessage(run.id, "bad name", {}));
    assert.ok(BadRequestError.is(bad));
    assert.equal(bad.code, "invalid-argument");
    const missing = await refusal(durin.runs.sendMessage("run_nope", "note", {}));
    assert.ok(NotFoundError.is(missing));
    assert.equal(missing.code, "run-not-found");
    assert.throws(() => durin.runs.sendMessage(run.id, "", {}), TypeError);
    await durin.runs.terminate(run.id);
  });
});

describe("messages to an instance", () => {
  test("message-with-start starts one run; its retry, also after the run closed, starts nothing", async () => {
    const start = { flow: "acme.inbox", input: {} };
    const none = await refusal(durin.instances.sendMessage("inbox-M-1", "note", { n: 0 }));
    assert.ok(NotFoundError.is(none));
    assert.equal(none.code, "run-not-found");

    const first = await durin.instances.sendMessage("inbox-M-1", "note", { n: 1 }, { idempotencyKey: "m1-first", start });
    assert.equal(first.started, true);
    assert.equal(first.sequence, 1);
    const retry = await durin.instances.sendMessage("inbox-M-1", "note", { n: 1 }, { idempotencyKey: "m1-first", start });
    assert.deepEqual(retry, first);
    const run = await durin.instances.get("inbox-M-1");
    assert.equal(run.id, first.runId);
    assert.equal(run.instanceId, "inbox-M-1");
    // With a run holding the instance, a start is ignored: the message goes to it.
    const joined = await durin.instances.sendMessage("inbox-M-1", "note", { n: 2 }, { idempotencyKey: "m1-second", start });
    assert.equal(joined.started, false);
    assert.equal(joined.runId, first.runId);
    await durin.instances.sendMessage("inbox-M-1", "note", { done: true });
    const done = await durin.runs.wait(first.runId);
    assert.deepEqual(done.output.notes, [{ n: 1 }, { n: 2 }, { done: true }]);

    const again = await durin.instances.sendMessage("inbox-M-1", "note", { n: 1 }, { idempotencyKey: "m1-first", start });
    assert.deepEqual(again, first);
    const runs = (await durin.runs.list({ flow: "acme.inbox", limit: 1000 })).runs.filter(
      (each) => each.instanceId === "inbox-M-1",
    );
    assert.equal(runs.length, 1, "one run for the instance");
  });

  test("a start of an unknown flow is NotFoundError flow-not-found; a start without a flow is refused before sending", async () => {
    const error = await refusal(durin.instances.sendMessage("inbox-M-2", "note", {}, { start: { flow: "acme.nope" } }));
    assert.ok(NotFoundError.is(error));
    assert.equal(error.code, "flow-not-found");
    assert.throws(() => durin.instances.sendMessage("inbox-M-2", "note", {}, { start: {} }), TypeError);
  });
});

describe("updates", () => {
  test("an update answers its result once completed; a repeated updateId answers the first result", async () => {
    const run = await counter(5);
    assert.equal(run.status, "waiting");
    const added = await durin.runs.update(run.id, "add", { by: 2 }, { updateId: "add-2" });
    assert.equal(added.runId, run.id);
    assert.equal(added.updateId, "add-2");
    assert.equal(added.status, "completed");
    assert.deepEqual(added.result, { value: 7 });
    const repeat = await durin.runs.update(run.id, "add", { by: 2 }, { updateId: "add-2" });
    assert.deepEqual(repeat, added);
    const more = await durin.runs.update(run.id, "add", { by: 3 });
    assert.deepEqual(more.result, { value: 10 });
    assert.match(more.updateId, /.+/);
    await durin.runs.sendMessage(run.id, "stop");
    assert.deepEqual((await durin.runs.wait(run.id)).output, { value: 10 });
  });

  test("waitFor accepted answers once accepted; the flow completes it after", async () => {
    const run = await counter(0);
    const accepted = await durin.runs.update(run.id, "add", { by: 4 }, { updateId: "add-4", waitFor: "accepted" });
    assert.equal(accepted.status, "accepted");
    assert.equal(accepted.result, undefined);
    // The flow applies it after the answer: the query sees it soon.
    await eventually(async () => (await durin.runs.query(run.id, "value")).result.value === 4);
    await durin.runs.terminate(run.id);
  });

  test("a rejected update is UpdateRejectedError (422) with the validator's reason, and records nothing", async () => {
    const run = await counter(1);
    const before = (await durin.runs.history(run.id)).events.length;
    const error = await refusal(durin.runs.update(run.id, "add", { by: -1 }, { updateId: "add-negative" }));
    assert.ok(UpdateRejectedError.is(error), String(error));
    assert.ok(UnprocessableError.is(error));
    assert.ok(DurinApiError.is(error));
    assert.equal(error.status, 422);
    assert.equal(error.code, "update-rejected");
    assert.match(error.message, /must not be negative/);
    assert.equal((await durin.runs.history(run.id)).events.length, before);
    assert.deepEqual((await durin.runs.query(run.id, "value")).result, { value: 1 });
    const unknown = await refusal(durin.runs.update(run.id, "subtract", { by: 1 }));
    assert.ok(HandlerNotFoundError.is(unknown), String(unknown));
    assert.ok(NotFoundError.is(unknown));
    assert.equal(unknown.code, "handler-not-found");
    const wrong = await refusal(durin.runs.update(run.id, "add", { by: 1 }, { waitFor: "later" }));
    assert.ok(BadRequestError.is(wrong));
    await durin.runs.terminate(run.id);
  });
});

describe("queries", () => {
  test("a query answers the flow's state now and records nothing; args travel as JSON", async () => {
    const run = await counter(41);
    const before = (await durin.runs.history(run.id)).events.length;
    const answer = await durin.runs.query(run.id, "value");
    assert.deepEqual(answer, { runId: run.id, query: "value", result: { value: 41 } });
    await durin.runs.update(run.id, "add", { by: 1 });
    const withArgs = await durin.runs.query(run.id, "value", { unit: "x", list: [1, 2] });
    assert.deepEqual(withArgs.result, { value: 42 });
    assert.equal((await durin.runs.history(run.id)).events.length, before + 3, "the update's events only");
    const unknown = await refusal(durin.runs.query(run.id, "nope"));
    assert.ok(HandlerNotFoundError.is(unknown));
    assert.equal(unknown.status, 404);
    await durin.runs.terminate(run.id);
    const ended = await refusal(durin.runs.query(run.id, "value"));
    assert.ok(RunFinishedError.is(ended));
    assert.equal(ended.code, "run-finished");
  });
});

describe("terminate", () => {
  test("terminate ends the run as terminated; a repeated commandId answers it again, a plain repeat is run-finished", async () => {
    const run = await counter(3);
    const stopped = await durin.runs.terminate(run.id, { reason: "enough", commandId: "terminate-1" });
    assert.equal(stopped.id, run.id);
    assert.equal(stopped.status, "terminated");
    assert.deepEqual(stopped.error, { code: "terminated", message: "enough" });
    assert.equal((await durin.runs.get(run.id)).status, "terminated");
    assert.equal((await durin.runs.wait(run.id)).status, "terminated", "wait ends on terminated");
    const again = await durin.runs.terminate(run.id, { reason: "enough", commandId: "terminate-1" });
    assert.equal(again.status, "terminated");
    const history = await durin.runs.history(run.id);
    assert.equal(history.events.at(-1).kind, "run-terminated");
    const plain = await refusal(durin.runs.terminate(run.id));
    assert.ok(RunFinishedError.is(plain));
    const terminated = await durin.runs.list({ flow: "acme.counter", status: "terminated", limit: 1000 });
    assert.ok(terminated.runs.some((each) => each.id === run.id));
  });

  test("a keyed terminate repeated gets the first answer; another body with the key is ConflictError", async () => {
    const run = await durin.runs.start({ flow: "acme.sleep", input: { ms: 60_000 }, wait: false });
    const key = "terminate-" + run.id;
    const first = await durin.runs.terminate(run.id, { reason: "r", idempotencyKey: key });
    assert.deepEqual(await durin.runs.terminate(run.id, { reason: "r", idempotencyKey: key }), first);
    const conflict = await refusal(durin.runs.terminate(run.id, { reason: "other", idempotencyKey: key }));
    assert.ok(ConflictError.is(conflict));
  });
});
