// Compiled (never run) by `npm run typecheck`: the README's uses of the
// client type-check against src/index.d.ts under --strict, and misuses fail
// (each @ts-expect-error must hold an error).
import {
  ConflictError,
  Durin,
  DurinApiError,
  HookConflictError,
  IdempotencyKeyInFlightError,
  RetryableError,
  type Run,
  type StepMeta,
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
}

void uses;
