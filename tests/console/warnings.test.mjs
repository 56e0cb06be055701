// The console's warning rules (console/warnings.js) on API answers shaped
// like the node's. The browser tests see the retrying warning on a real
// run; a real blocked run needs changed flow code, so its warning is
// checked here on the answer GET /v1/runs?status=blocked gives.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  blockedWarnings, latestError, queueSummaries, stepsOf, taskWarnings,
} from '../../console/warnings.js';

const now = 1_800_000_000_000;

test('a blocked run is an error naming the divergence', () => {
  const reason = 'replay divergence at call 2: the history recorded step "charge", the code asks for step "refund"';
  const [warning] = blockedWarnings([
    { id: 'run_A', flow: 'acme.pay', status: 'blocked', blockedReason: reason },
    { id: 'run_B', flow: 'acme.pay', status: 'waiting' },
  ]);
  assert.equal(warning.kind, 'blocked');
  assert.equal(warning.severity, 'error');
  assert.equal(warning.runId, 'run_A');
  assert.equal(warning.detail, reason);
  assert.equal(latestError({ status: 'blocked', blockedReason: reason }, []).message, reason);
});

test('a queue whose oldest attempt waited 30 s is one nobody polls', () => {
  const answer = {
    queues: ['payments', 'mail'],
    tasks: [
      { runId: 'r1', stepName: 'charge', attempt: 1, taskQueue: 'payments', state: 'queued', scheduledAtMs: now - 31_000 },
      { runId: 'r2', stepName: 'send', attempt: 1, taskQueue: 'mail', state: 'queued', scheduledAtMs: now - 2_000 },
    ],
  };
  const queues = queueSummaries(answer, now);
  assert.deepEqual(queues.map((q) => [q.name, q.waiting, q.nobodyPolls]),
    [['mail', 1, false], ['payments', 1, true]]);
  const kinds = taskWarnings(answer, [], now).map((w) => w.kind);
  assert.deepEqual(kinds, ['unpolled']);
});

test('a lease without a heartbeat for a minute is stuck; attempt 3 is retrying', () => {
  const answer = {
    queues: ['payments'],
    tasks: [
      { runId: 'r1', stepName: 'charge', attempt: 1, taskQueue: 'payments', state: 'running',
        leaseOwner: 'w1', scheduledAtMs: now - 70_000, startedAtMs: now - 65_000 },
      { runId: 'r2', stepName: 'charge', attempt: 3, taskQueue: 'payments', state: 'queued',
        scheduledAtMs: now - 1_000 },
      { runId: 'r3', stepName: 'charge', attempt: 2, taskQueue: 'payments', state: 'running',
        leaseOwner: 'w2', scheduledAtMs: now - 5_000, startedAtMs: now - 4_000, lastHeartbeatAtMs: now - 1_000 },
    ],
  };
  const warnings = taskWarnings(answer, [], now);
  assert.deepEqual(warnings.map((w) => [w.kind, w.runId]), [['stuck', 'r1'], ['retrying', 'r2']]);
});

test('steps join the recorded history with the transport, refusals included', () => {
  const events = [
    { sequence: 1, kind: 'run-started' },
    { sequence: 2, kind: 'step-attempt-failed', stepId: 'r/1', name: 'charge', attempt: 1,
      error: { code: 'timeout-start-to-close', message: 'attempt 1 timed out' } },
    { sequence: 3, kind: 'step-completed', stepId: 'r/1', name: 'charge', attempt: 2, value: 1 },
  ];
  const transport = {
    attempts: [
      { stepId: 'r/1', stepName: 'charge', attempt: 1, state: 'expired' },
      { stepId: 'r/1', stepName: 'charge', attempt: 2, state: 'completed' },
    ],
    refusedReports: [{ stepId: 'r/1', attemptId: 'a1', reason: 'stale_attempt', report: 'complete' }],
  };
  const [step] = stepsOf(events, transport);
  assert.equal(step.outcome, 'completed');
  assert.equal(step.recorded.length, 2);
  assert.equal(step.attempts.length, 2);
  assert.equal(step.refused[0].reason, 'stale_attempt');
  assert.equal(latestError({ status: 'completed' }, events).code, 'timeout-start-to-close');
});
