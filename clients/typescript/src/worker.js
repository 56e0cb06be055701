// A worker: runs the steps of one task queue in this process, the way
// durin::worker (include/durin/worker.hpp) does in C++. One poll claims as
// many tasks as runners are free (maxTasks); finished outcomes go back in
// batches (POST /v1/tasks/report): whatever finished while the previous
// report was on its way goes in the next one. The server fences every
// report by lease owner and attempt: a late one is answered recorded: false
// and changes nothing, and the worker goes on.
//
// Steps run at least once: make their effects idempotent with meta.stepId.

import {
  BadRequestError,
  ConnectionError,
  DurinError,
  FatalError,
  ForbiddenError,
  NotFoundError,
  RetryableError,
  UnauthorizedError,
} from "./errors.js";

const reportsPerRequestMax = 256;
const reportTriesMax = 5;
const messageBytesMax = 4096;

// `text` cut to at most `max` UTF-8 bytes, never inside a character.
function utf8Prefix(text, max) {
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= max) {
    return text;
  }
  let end = max;
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) {
    --end;
  }
  return new TextDecoder().decode(bytes.subarray(0, end));
}

function defaultWorkerId() {
  const pid = globalThis.process?.pid ?? "web";
  return `ts-${pid}-${Math.random().toString(36).slice(2, 10)}`;
}

// Errors that polling again cannot fix: the worker stops.
function fatal(error) {
  return [BadRequestError, UnauthorizedError, ForbiddenError, NotFoundError].some((c) => c.is(error));
}

export class Worker {
  constructor(transport, options) {
    if (typeof options?.queue !== "string" || options.queue === "") {
      throw new TypeError("worker: queue must be a non-empty string");
    }
    if (options.steps === null || typeof options.steps !== "object") {
      throw new TypeError("worker: steps must be an object of step functions by name");
    }
    const concurrency = options.concurrency ?? 1;
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 256) {
      throw new RangeError("worker: concurrency must be an integer from 1 to 256");
    }
    this.transport = transport;
    this.queue = options.queue;
    this.steps = options.steps;
    this.concurrency = concurrency;
    this.workerId = options.workerId ?? defaultWorkerId();
    this.pollWaitMs = options.pollWaitMs ?? 2_000;
    this.retryDelayMs = options.retryDelayMs ?? 200;
    this.onOutcome = options.onOutcome;
    this.onError = options.onError;
    this.stats = { tasks: 0, recorded: 0, refused: 0, errors: 0 };
    this.stopping = false;
    this.inHand = new Set(); // promises of the tasks running now
    this.unreported = []; // {report, tries, task}
    this.reporting = undefined; // the report request on its way
    this.wake = undefined; // resolves the poller's wait for a free runner
    this.done = undefined;
  }

  start() {
    if (this.done !== undefined) {
      return this.done;
    }
    this.done = this.run();
    // `done` rejects on a fatal error; a caller that never looks at it
    // must not get an unhandled rejection.
    this.done.catch(() => {});
    return this.done;
  }

  // Graceful: no new poll starts (the one on its way is answered within
  // pollWaitMs and its tasks run); the tasks in hand finish and are
  // reported. Resolves when that is done.
  async stop() {
    this.stopping = true;
    this.wake?.();
    try {
      await this.start();
    } catch {
      // A fatal error stopped it before: `done` says which.
    }
  }

  async run() {
    let failure;
    try {
      await this.poll();
    } catch (error) {
      failure = error;
    }
    await Promise.all([...this.inHand]);
    await this.flush();
    if (failure !== undefined) {
      throw failure;
    }
  }

  async poll() {
    const path = `/v1/task-queues/${encodeURIComponent(this.queue)}/poll`;
    let polls = 0;
    while (!this.stopping) {
      const free = this.concurrency - this.inHand.size;
      if (free === 0) {
        await new Promise((resolve) => (this.wake = resolve));
        this.wake = undefined;
        continue;
      }
      let answer;
      try {
        // A retried poll keeps its id, so a lost answer's tasks come back
        // instead of more being leased.
        answer = await this.transport.request("POST", path, {
          body: { workerId: this.workerId, pollRequestId: `p${polls}`, waitMs: this.pollWaitMs, maxTasks: free },
          timeoutMs: this.pollWaitMs + 30_000,
          retry: { attempts: 1 },
        });
      } catch (error) {
        this.failed(error);
        if (fatal(error)) {
          throw error;
        }
        await this.pause();
        continue;
      }
      const tasks = Array.isArray(answer.tasks) ? answer.tasks : [];
      if (tasks.length === 0) {
        continue;
      }
      ++polls;
      this.stats.tasks += tasks.length;
      for (const task of tasks) {
        const running = this.runTask(task).then((report) => {
          this.inHand.delete(running);
          this.unreported.push({ report, tries: 0, task });
          this.wake?.();
          this.report();
        });
        this.inHand.add(running);
      }
    }
  }

  failed(error) {
    ++this.stats.errors;
    try {
      this.onError?.(error);
    } catch {
      // The callback's own failure is not the worker's.
    }
  }

  pause() {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, this.retryDelayMs);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  // Runs one task's step; its report item.
  async runTask(task) {
    const controller = new AbortController();
    const heartbeatPath = `/v1/tasks/${encodeURIComponent(task.attemptId)}/heartbeat`;
    const heartbeat = async (progress = {}) => {
      const body = { workerId: this.workerId };
      if (progress.message) {
        body.message = utf8Prefix(String(progress.message), messageBytesMax);
      }
      for (const field of ["current", "total"]) {
        if (progress[field] !== undefined) {
          body[field] = progress[field];
        }
      }
      let answer;
      try {
        answer = await this.transport.request("POST", heartbeatPath, { body, retry: { attempts: 1 } });
      } catch (error) {
        this.failed(error);
        if (ConnectionError.is(error) || !DurinError.is(error) || (error.status ?? 0) >= 500) {
          return true; // unreachable node: go on; the lease decides
        }
        controller.abort(error); // lease-conflict: another worker holds it
        return false;
      }
      if (answer.continue === false) {
        controller.abort(new DurinError(`attempt ${task.attemptId} should stop: ${answer.reason}`));
        return false;
      }
      return true;
    };
    const meta = {
      stepId: task.stepId,
      attemptId: task.attemptId,
      attempt: task.attempt,
      stepName: task.stepName,
      runId: task.runId,
      instanceId: task.instanceId || task.runId,
      taskQueue: task.taskQueue ?? this.queue,
      leaseExpiresAtMs: task.leaseExpiresAtMs,
      workerId: this.workerId,
      signal: controller.signal,
      heartbeat,
    };
    const step = Object.hasOwn(this.steps, task.stepName) ? this.steps[task.stepName] : undefined;
    if (typeof step !== "function") {
      return failure(task, `worker ${this.workerId} has no step registered as '${task.stepName}'`, false);
    }
    try {
      const value = await step(task.args ?? [], meta);
      const result = value === undefined ? null : value;
      JSON.stringify(result); // throws here, not in the batch, when not JSON
      return { attemptId: task.attemptId, outcome: "complete", result };
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (FatalError.is(error)) {
        return failure(task, message, false);
      }
      const report = failure(task, message, true);
      if (RetryableError.is(error) && Number.isInteger(error.retryAfterMs) && error.retryAfterMs >= 0) {
        report.retryAfterMs = error.retryAfterMs;
      }
      return report;
    }
  }

  // Sends what finished, in batches, one request at a time.
  report() {
    if (this.reporting !== undefined || this.unreported.length === 0) {
      return this.reporting;
    }
    this.reporting = this.sendBatch().finally(() => {
      this.reporting = undefined;
      this.report();
    });
    return this.reporting;
  }

  // Resolves once everything finished is reported (or given up).
  async flush() {
    while (this.reporting !== undefined || this.unreported.length > 0) {
      await (this.report() ?? Promise.resolve());
    }
  }

  async sendBatch() {
    const batch = this.unreported.splice(0, reportsPerRequestMax);
    let again = [];
    try {
      const answer = await this.transport.request("POST", "/v1/tasks/report", {
        body: { workerId: this.workerId, reports: batch.map((item) => item.report) },
        retry: { attempts: 1 },
      });
      const results = Array.isArray(answer.results) ? answer.results : [];
      batch.forEach((item, i) => {
        const result = results[i];
        if (result === undefined || typeof result.recorded !== "boolean") {
          again.push(item); // indefinite: a repeat is answered stale if it was recorded
          return;
        }
        ++this.stats[result.recorded ? "recorded" : "refused"];
        try {
          this.onOutcome?.({ ...result, stepId: item.task.stepId, stepName: item.task.stepName });
        } catch {
          // The callback's own failure is not the worker's.
        }
      });
    } catch (error) {
      this.failed(error);
      // A refused request (4xx) is this worker's bug: not sent again.
      if (!DurinError.is(error) || error.status === undefined || error.status >= 500) {
        again = batch;
      }
    }
    // Given up after reportTriesMax: the lease expires and the server
    // delivers the step again.
    const kept = again.filter((item) => ++item.tries < reportTriesMax);
    if (kept.length > 0) {
      this.unreported.unshift(...kept);
      await new Promise((resolve) => setTimeout(resolve, this.retryDelayMs));
    }
  }
}

function failure(task, message, retryable) {
  return {
    attemptId: task.attemptId,
    outcome: "fail",
    message: utf8Prefix(message || "the step failed", messageBytesMax),
    retryable,
  };
}
