// Schedules against a real `durin serve`: create (and its replay), get,
// list, pause and unpause, trigger and backfill (each firing a run that
// runs.list finds by scheduleId), delete. The schedules here fire
// acme.review-order on a yearly cron that never comes due during the test,
// so every run they start is one the test asked for. One server for the
// file; each test uses its own schedule ids.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  BadRequestError,
  ConflictError,
  Durin,
  NotFoundError,
  ScheduleExistsError,
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

const yearly = (scheduleId, extra = {}) => ({
  scheduleId,
  spec: { cron: "0 0 1 1 *", timezone: "UTC" },
  action: { flow: "acme.review-order", input: { orderId: scheduleId } },
  ...extra,
});

// Every run the schedule started, newest first.
async function runsOf(scheduleId) {
  const runs = [];
  for await (const run of durin.runs.list({ scheduleId, limit: 2 })) {
    runs.push(run);
  }
  return runs;
}

describe("schedules", () => {
  test("create answers the new schedule; the same body again answers it; another body is ScheduleExistsError", async () => {
    const made = await durin.schedules.create(yearly("sched-create", { overlap: "allow_all", note: "first" }));
    assert.equal(made.created, true);
    assert.equal(made.scheduleId, "sched-create");
    assert.equal(made.spec.cron, "0 0 1 1 *");
    assert.equal(made.spec.timezone, "UTC");
    assert.deepEqual(made.action, { flow: "acme.review-order", input: { orderId: "sched-create" } });
    assert.equal(made.overlap, "allow_all");
    assert.equal(made.catchupWindow, 60_000);
    assert.equal(made.paused, false);
    assert.equal(made.note, "first");
    assert.match(made.nextOccurrence, /^\d{4}-01-01T00:00:00\.000Z$/);
    assert.equal(made.info.fired, 0);
    const replay = await durin.schedules.create(yearly("sched-create", { overlap: "allow_all", note: "first" }));
    assert.equal(replay.created, false);
    assert.equal(replay.scheduleId, "sched-create");
    const other = await refusal(durin.schedules.create(yearly("sched-create", { overlap: "skip" })));
    assert.ok(ScheduleExistsError.is(other), String(other));
    assert.ok(!ConflictError.is(other));
    assert.equal(other.status, 409);
    assert.equal(other.code, "schedule-exists");
    const got = await durin.schedules.get("sched-create");
    assert.equal(got.scheduleId, "sched-create");
    assert.equal(got.created, undefined);
  });

  test("a keyed create repeated gets the first answer; bad definitions are BadRequestError", async () => {
    const first = await durin.schedules.create({ ...yearly("sched-keyed"), idempotencyKey: "create-sched-keyed" });
    const again = await durin.schedules.create({ ...yearly("sched-keyed"), idempotencyKey: "create-sched-keyed" });
    assert.deepEqual(again, first);
    const cron = await refusal(durin.schedules.create({ ...yearly("sched-bad"), spec: { cron: "every day" } }));
    assert.ok(BadRequestError.is(cron));
    assert.equal(cron.code, "invalid-argument");
    const overlap = await refusal(durin.schedules.create(yearly("sched-bad", { overlap: "sometimes" })));
    assert.match(overlap.message, /overlap/);
    assert.throws(() => durin.schedules.create({ spec: {}, action: { flow: "f" } }), TypeError);
  });

  test("trigger fires a run at once, listed by scheduleId with its occurrence; a keyed trigger repeated fires once", async () => {
    await durin.schedules.create(yearly("sched-trigger", { overlap: "allow_all" }));
    assert.deepEqual(await runsOf("sched-trigger"), []);
    const fired = await durin.schedules.trigger("sched-trigger", { idempotencyKey: "trigger-1" });
    assert.equal(fired.scheduleId, "sched-trigger");
    assert.match(fired.occurrence, /^\d{4}-\d\d-\d\dT/);
    const [run] = await eventually(async () => {
      const runs = await runsOf("sched-trigger");
      return runs.length === 1 && runs[0].status === "completed" ? runs : undefined;
    });
    assert.equal(run.flow, "acme.review-order");
    assert.equal(run.scheduleId, "sched-trigger");
    assert.equal(run.occurrence, fired.occurrence);
    assert.deepEqual(run.input, { orderId: "sched-trigger" });
    const replay = await durin.schedules.trigger("sched-trigger", { idempotencyKey: "trigger-1" });
    assert.deepEqual(replay, fired);
    // Occurrences fire in the order queued: once the next trigger's run is
    // there, a run of the replay would be too.
    const next = await durin.schedules.trigger("sched-trigger");
    const both = await eventually(async () => {
      const runs = await runsOf("sched-trigger");
      return runs.some((each) => each.occurrence === next.occurrence) ? runs : undefined;
    });
    assert.equal(both.length, 2);
    const schedule = await eventually(async () => {
      const got = await durin.schedules.get("sched-trigger");
      return got.info.fired === 2 ? got : undefined;
    });
    assert.equal(schedule.info.recent.length, 2);
    assert.ok(schedule.info.recent.some((firing) => firing.runId === run.id));
    // Another schedule's runs are not listed under this one.
    const unrelated = await durin.runs.list({ scheduleId: "sched-none" });
    assert.deepEqual(unrelated.runs, []);
  });

  test("pause stops the next occurrence, unpause brings it back; a paused schedule still fires when triggered", async () => {
    await durin.schedules.create(yearly("sched-pause"));
    const paused = await durin.schedules.pause("sched-pause", { note: "maintenance" });
    assert.equal(paused.paused, true);
    assert.equal(paused.note, "maintenance");
    assert.equal(paused.nextOccurrence, null);
    assert.equal((await durin.schedules.get("sched-pause")).paused, true);
    await durin.schedules.trigger("sched-pause");
    const [run] = await eventually(async () => {
      const runs = await runsOf("sched-pause");
      return runs.length === 1 ? runs : undefined;
    });
    assert.equal(run.scheduleId, "sched-pause");
    const unpaused = await durin.schedules.unpause("sched-pause", { idempotencyKey: "unpause-1" });
    assert.equal(unpaused.paused, false);
    assert.match(unpaused.nextOccurrence, /-01-01T00:00:00\.000Z$/);
  });

  test("backfill fires every occurrence in the range, in order, as runs listed by scheduleId", async () => {
    await durin.schedules.create(yearly("sched-backfill", { overlap: "allow_all" }));
    const filled = await durin.schedules.backfill("sched-backfill", {
      startAt: new Date("2020-01-01T00:00:00Z"),
      endAt: "2022-06-01T00:00:00Z",
    });
    assert.equal(filled.scheduleId, "sched-backfill");
    assert.deepEqual(filled.occurrences, [
      "2020-01-01T00:00:00.000Z",
      "2021-01-01T00:00:00.000Z",
      "2022-01-01T00:00:00.000Z",
    ]);
    const runs = await eventually(async () => {
      const all = await runsOf("sched-backfill");
      return all.length === 3 ? all : undefined;
    });
    assert.deepEqual(runs.map((run) => run.occurrence).sort(), filled.occurrences);
    const missing = await refusal(durin.schedules.backfill("sched-backfill", { startAt: "yesterday", endAt: "today" }));
    assert.ok(BadRequestError.is(missing));
    assert.throws(() => durin.schedules.backfill("sched-backfill", { startAt: "2020-01-01T00:00:00Z" }), TypeError);
  });

  test("list pages by id; awaited it is the first page, iterated every schedule", async () => {
    for (const id of ["list-a", "list-b", "list-c"]) {
      await durin.schedules.create(yearly(id));
    }
    const first = await durin.schedules.list({ limit: 2 });
    assert.equal(first.schedules.length, 2);
    assert.equal(typeof first.nextCursor, "string");
    const ids = [];
    for await (const schedule of durin.schedules.list({ limit: 2 })) {
      ids.push(schedule.scheduleId);
    }
    assert.deepEqual(ids, [...ids].sort(), "by id");
    for (const id of ["list-a", "list-b", "list-c"]) {
      assert.ok(ids.includes(id), `${id} in ${ids}`);
    }
    assert.deepEqual(ids.slice(0, 2), first.schedules.map((schedule) => schedule.scheduleId));
    let pages = 0;
    for await (const page of durin.schedules.list({ limit: 2 }).pages()) {
      ++pages;
      assert.ok(page.schedules.length <= 2);
    }
    assert.equal(pages, Math.ceil(ids.length / 2));
  });

  test("delete removes the schedule, its runs stay; an unknown schedule is NotFoundError schedule-not-found", async () => {
    await durin.schedules.create(yearly("sched-delete"));
    await durin.schedules.trigger("sched-delete");
    await eventually(async () => (await runsOf("sched-delete")).length === 1);
    const deleted = await durin.schedules.delete("sched-delete", { idempotencyKey: "delete-1" });
    assert.deepEqual(deleted, { scheduleId: "sched-delete", deleted: true });
    assert.deepEqual(await durin.schedules.delete("sched-delete", { idempotencyKey: "delete-1" }), deleted);
    for (const call of [
      () => durin.schedules.get("sched-delete"),
      () => durin.schedules.delete("sched-delete"),
      () => durin.schedules.pause("sched-delete"),
      () => durin.schedules.trigger("sched-delete"),
    ]) {
      const error = await refusal(call());
      assert.ok(NotFoundError.is(error), String(error));
      assert.equal(error.code, "schedule-not-found");
    }
    assert.equal((await runsOf("sched-delete")).length, 1);
  });
});
