// Compiled (never run) by `npm run typecheck`: the README's uses of the
// client type-check against src/index.d.ts under --strict, and misuses fail
// (each @ts-expect-error must hold an error).
import {
  ConflictError,
  Durin,
  DurinApiError,
  HookConflictError,
  IdempotencyKeyInFlightError,
  QueryRefusedError,
  RetryableError,
  RunFinishedError,
  ScheduleExistsError,
  UpdateRejectedError,
  type MessageReceipt,
  type QueryResult,
  type Run,
  type Schedule,
  type StepMeta,
  type UpdateResult,
} from "@durin/client";

const durin = new Durin({ server: "http://127.0.0.1:7070", apiKey: "key", retry: { attempts: 3 } });

async function uses(): Promise<void> {
  const run: Run = await durin.runs.start({
    flow: "acme.review-order",
    input: { orderId: "A-200" },
    idempotencyKey: "review-A-200",
    hook: { token: "order:A-200", minRetention: "30 days" },
    onDuplicate: "return-existing-active",
  });
  const status: "completed" | string = run.status;
  const page = await durin.runs.list({ status: "failed", limit: 10 });
  const next: string | null = page.nextCursor;
  for await (const each of durin.runs.list({ flow: "acme.review-order" })) {
    each.id.toUpperCase();
  }
  const history = await durin.runs.history(run.id);
  history.events[0].kind.toUpperCase();
  await durin.runs.cancel(run.id, { reason: "r", idempotencyKey: "k" });
  await durin.runs.wait(run.id, { timeoutMs: 1000 });
  const hook = await durin.hooks.get("order:A-200");
  const { runId } = await durin.hooks.resume(hook.token, { done: true }, { idempotencyKey: "k", commandId: "c" });
  await durin.instances.get("order-A-200");
  const key = await durin.apiKeys.create({ name: "ci", idempotencyKey: "k" });
  key.secret.toUpperCase();
  (await durin.apiKeys.list()).map((k) => k.admin);
  await durin.apiKeys.revoke(key.id);
  const tenant = await durin.tenants.create({ name: "acme" });
  tenant.apiKey.secret.toUpperCase();
  void [status, next, runId];

  const receipt: MessageReceipt = await durin.runs.sendMessage(run.id, "note", { n: 1 }, { idempotencyKey: "note-1" });
  const started: boolean = receipt.started;
  await durin.runs.sendMessage(run.id, "stop");
  await durin.instances.sendMessage("inbox-1", "note", "hi", {
    idempotencyKey: "m-1",
    start: { flow: "acme.inbox", input: {} },
  });
  const added: UpdateResult<{ value: number }> = await durin.runs.update<{ value: number }>(run.id, "add", { by: 1 }, {
    updateId: "add-1",
    waitFor: "accepted",
  });
  const value: number | undefined = added.result?.value;
  const asked: QueryResult<{ value: number }> = await durin.runs.query<{ value: number }>(run.id, "value");
  asked.result.value.toFixed();
  const stopped: Run = await durin.runs.terminate(run.id, { reason: "r", commandId: "c", idempotencyKey: "k" });
  const ended: boolean = stopped.status === "terminated";
  for await (const fired of durin.runs.list({ scheduleId: "nightly" })) {
    const occurrence: string | undefined = fired.occurrence;
    void occurrence;
  }
  const schedule: Schedule = await durin.schedules.create({
    scheduleId: "nightly",
    spec: { cron: "0 3 * * *", timezone: "Europe/Berlin", jitter: "30s" },
    action: { flow: "acme.review-order", input: { orderId: "N" } },
    overlap: "buffer_one",
    catchupWindow: "10m",
    idempotencyKey: "create-nightly",
  });
  const made: boolean | undefined = schedule.created;
  const nextAt: string | null = (await durin.schedules.get("nightly")).nextOccurrence;
  (await durin.schedules.list({ limit: 10 })).schedules.map((one) => one.info.fired);
  for await (const one of durin.schedules.list()) {
    one.scheduleId.toUpperCase();
  }
  await durin.schedules.pause("nightly", { note: "maintenance" });
  await durin.schedules.unpause("nightly");
  const { occurrence } = await durin.schedules.trigger("nightly", { idempotencyKey: "t-1" });
  const { occurrences } = await durin.schedules.backfill("nightly", { startAt: new Date(0), endAt: "2026-01-01T00:00:00Z" });
  const { deleted } = await durin.schedules.delete("nightly");
  void [started, value, ended, made, nextAt, occurrence, occurrences, deleted];

  try {
    await durin.runs.get("run_1");
  } catch (err) {
    if (HookConflictError.is(err)) {
      const owner: string | undefined = err.conflictingRunId;
      void owner;
    }
    if (IdempotencyKeyInFlightError.is(err)) {
      const seconds: number | undefined = err.retryAfter;
      void seconds;
    }
    if (DurinApiError.is(err)) {
      const code: string = err.error.code;
      const httpStatus: number = err.status;
      void [code, httpStatus];
    }
    if (ConflictError.is(err)) {
      err.message.toUpperCase();
    }
    if (UpdateRejectedError.is(err) || QueryRefusedError.is(err)) {
      const unprocessable: 422 | number = err.status;
      void unprocessable;
    }
    if (RunFinishedError.is(err) || ScheduleExistsError.is(err)) {
      err.code.toUpperCase();
    }
  }

  const worker = durin.worker({
    queue: "payments",
    concurrency: 4,
    steps: {
      charge: async (args, meta: StepMeta) => {
        if (!(await meta.heartbeat({ message: "charging", current: 1, total: 2 }))) {
          throw new RetryableError("stop", { retryAfterMs: 100 });
        }
        return { key: meta.stepId, attempt: meta.attemptId, args };
      },
    },
  });
  await worker.stop();
  worker.stats.recorded.toFixed();

  // @ts-expect-error flow is required
  await durin.runs.start({ input: {} });
  // @ts-expect-error not a run status
  await durin.runs.list({ status: "sleeping" });
  // @ts-expect-error onDuplicate has two values
  await durin.runs.start({ flow: "f", onDuplicate: "replace" });
  // @ts-expect-error waitFor is accepted or completed
  await durin.runs.update(run.id, "add", {}, { waitFor: "started" });
  // @ts-expect-error not an overlap policy
  await durin.schedules.create({ scheduleId: "s", spec: {}, action: { flow: "f" }, overlap: "queue" });
  // @ts-expect-error a schedule needs an action
  await durin.schedules.create({ scheduleId: "s", spec: { interval: "1m" } });
  // @ts-expect-error a backfill needs both ends
  await durin.schedules.backfill("s", { startAt: new Date() });
}

void uses;
