// What the console warns operators about, from what the API reports. Pure
// functions of plain API answers (no DOM), so tests can check the rules
// directly. The rules:
//
// - blocked: a run the API reports as `blocked`; its blockedReason names the
//   recorded call and the new one (replay divergence). It writes nothing
//   until a node runs code that matches again; it can still be cancelled.
// - retrying: a live attempt numbered `retryingAttempt` or higher, or a
//   retry (attempt 2 or more) waiting longer than `longMs`.
// - stuck lease: a running attempt with no heartbeat (and no start) for
//   `stuckMs`, as the node's durin_task_leases_stuck counts.
// - nobody polls: a queue whose oldest waiting attempt has waited for
//   `unpolledMs`: no worker polls that queue, or all of its workers are
//   busy.

export const limits = {
  retryingAttempt: 3,
  longMs: 60_000,
  stuckMs: 60_000,
  unpolledMs: 30_000,
};

// [{kind, severity, runId, title, detail}] for blocked runs.
export function blockedWarnings(runs) {
  return runs
    .filter((run) => run.status === 'blocked')
    .map((run) => ({
      kind: 'blocked',
      severity: 'error',
      runId: run.id,
      title: `Run ${run.id} (${run.flow}) is blocked: replay divergence`,
      detail: run.blockedReason || 'the history no longer matches the code',
    }));
}

// Per queue: {name, waiting, running, oldestWaitingMs, nobodyPolls}.
export function queueSummaries(tasksAnswer, now = Date.now()) {
  const byName = new Map();
  for (const name of tasksAnswer.queues ?? []) {
    byName.set(name, { name, waiting: 0, running: 0, oldestWaitingMs: 0 });
  }
  for (const task of tasksAnswer.tasks ?? []) {
    const name = task.taskQueue || '(in node)';
    if (!byName.has(name)) {
      byName.set(name, { name, waiting: 0, running: 0, oldestWaitingMs: 0 });
    }
    const queue = byName.get(name);
    if (task.state === 'queued') {
      queue.waiting += 1;
      queue.oldestWaitingMs = Math.max(queue.oldestWaitingMs, now - task.scheduledAtMs);
    } else if (task.state === 'running') {
      queue.running += 1;
    }
  }
  return [...byName.values()]
    .map((queue) => ({
      ...queue,
      nobodyPolls: queue.waiting > 0 && queue.oldestWaitingMs >= limits.unpolledMs,
    }))
    .sort((a, b) => a.name.localeCompare(b.name));
}

export function isStuck(task, now = Date.now()) {
  if (task.state !== 'running') return false;
  const since = Math.max(task.startedAtMs ?? 0, task.lastHeartbeatAtMs ?? 0);
  return since > 0 && now - since > limits.stuckMs;
}

export function isRetrying(task, now = Date.now()) {
  if (task.state !== 'queued' && task.state !== 'running') return false;
  if (task.attempt >= limits.retryingAttempt) return true;
  return task.attempt >= 2 && now - task.scheduledAtMs >= limits.longMs;
}

// Every warning the Tasks page shows: blocked runs, runs retrying, stuck
// leases, queues nobody polls. `tasksAnswer` is GET /v1/tasks.
export function taskWarnings(tasksAnswer, blockedRuns = [], now = Date.now()) {
  const out = blockedWarnings(blockedRuns);
  for (const task of tasksAnswer.tasks ?? []) {
    if (isRetrying(task, now)) {
      out.push({
        kind: 'retrying',
        severity: 'warning',
        runId: task.runId,
        title: `Run ${task.runId} is retrying step ${task.stepName}: attempt ${task.attempt}`,
        detail: `attempt ${task.attempt} is ${task.state} on ${task.taskQueue || 'the node'}` +
          ` since ${Math.round((now - task.scheduledAtMs) / 1000)} s`,
      });
    }
    if (isStuck(task, now)) {
      out.push({
        kind: 'stuck',
        severity: 'warning',
        runId: task.runId,
        title: `Stuck lease: ${task.stepName} attempt ${task.attempt} held by ${task.leaseOwner}`,
        detail: 'no heartbeat for over a minute; the lease decides what happens next',
      });
    }
  }
  for (const queue of queueSummaries(tasksAnswer, now)) {
    if (queue.nobodyPolls) {
      out.push({
        kind: 'unpolled',
        severity: 'warning',
        runId: null,
        title: `Queue ${queue.name}: ${queue.waiting} waiting, nobody takes them`,
        detail: `the oldest has waited ${Math.round(queue.oldestWaitingMs / 1000)} s: ` +
          'no worker polls this queue, or its workers are all busy',
      });
    }
  }
  return out;
}

// For the Run page: one entry per step id, joining what the history
// recorded with what the transport saw. `events` are history events,
// `transport` is GET /v1/tasks?runId=.
export function stepsOf(events, transport = {}) {
  const steps = new Map();
  const stepOf = (id, name) => {
    if (!steps.has(id)) {
      steps.set(id, {
        stepId: id, name, recorded: [], attempts: [], refused: [], outcome: null,
      });
    }
    return steps.get(id);
  };
  for (const event of events) {
    if (!event.stepId) continue;
    const step = stepOf(event.stepId, event.name);
    step.recorded.push(event);
    if (event.kind === 'step-completed') step.outcome = 'completed';
    if (event.kind === 'step-failed') step.outcome = 'failed';
  }
  for (const attempt of transport.attempts ?? []) {
    stepOf(attempt.stepId, attempt.stepName).attempts.push(attempt);
  }
  for (const report of transport.refusedReports ?? []) {
    stepOf(report.stepId, undefined).refused.push(report);
  }
  return [...steps.values()];
}

// The latest error of a run, in plain sight: its own error, the divergence
// that blocks it, or the last failed attempt recorded in its history.
export function latestError(run, events) {
  if (run.status === 'blocked' && run.blockedReason) {
    return { source: 'blocked', code: 'replay-divergence', message: run.blockedReason };
  }
  if (run.error) {
    return { source: 'run', code: run.error.code, message: run.error.message };
  }
  for (let i = events.length - 1; i >= 0; --i) {
    const event = events[i];
    if (event.error && (event.kind === 'step-attempt-failed' || event.kind === 'step-failed')) {
      return {
        source: 'step',
        code: event.error.code,
        message: event.error.message,
        stepId: event.stepId,
        attempt: event.attempt,
        sequence: event.sequence,
      };
    }
  }
  return null;
}
