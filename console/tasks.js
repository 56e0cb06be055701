// Tasks: the node's live attempts and queues, counters, and the warnings
// an operator acts on (warnings.js): blocked runs with their divergence,
// runs retrying, stuck leases, queues nobody polls. Live while shown.
import { api } from './api.js';
import { h, keepSelected, rawView, replace } from './dom.js';
import { duration, relative, time } from './format.js';
import { poller } from './live.js';
import { isRetrying, isStuck, queueSummaries, taskWarnings } from './warnings.js';

export function mount(main) {
  const liveNote = h('span', { class: 'live-note', role: 'status' });
  const warnings = h('section', { id: 'warnings' });
  const stats = h('div', { class: 'stats', id: 'task-stats' });
  const queues = h('section', { id: 'queues' });
  const tasks = h('section', { id: 'live-tasks' });
  const raw = h('section');
  const problem = h('p', { class: 'error', role: 'alert' });
  replace(main,
    h('div', { class: 'page-head' }, h('h1', {}, 'Tasks'), liveNote),
    problem, warnings, stats, queues, tasks, raw);

  function draw(answer, blocked) {
    const now = Date.now();
    const list = taskWarnings(answer, blocked, now);
    replace(warnings,
      h('h2', {}, 'Warnings'),
      list.length === 0
        ? h('p', { class: 'empty' }, 'Nothing needs attention.')
        : h('ul', { class: 'warnings' }, list.map((w) => h('li', {
          class: `banner ${w.severity}`, 'data-warning': w.kind,
        },
        h('strong', {}, w.title),
        h('p', {}, w.detail),
        w.runId ? h('a', { href: `#/runs/${encodeURIComponent(w.runId)}` }, 'open the run') : null))));
    const s = answer.stats ?? {};
    const stat = (label, value, hint, bad) => h('div', { class: `stat${bad ? ' bad' : ''}` },
      h('b', {}, String(value ?? 0)), h('span', {}, label), hint ? h('small', {}, hint) : null);
    replace(stats,
      stat('queued', s.queued),
      stat('running', s.running),
      stat('stuck leases', s.stuckLeases, 'no heartbeat for 1 min', s.stuckLeases > 0),
      stat('queued, unpolled', s.queuedUnpolled, 'no poll for 30 s', s.queuedUnpolled > 0),
      stat('redeliveries', s.redeliveries, 'attempts ended by a timeout'),
      stat('refused reports', s.refusedReports, 'late or fenced'),
      stat('outcomes', s.completed));
    const summaries = queueSummaries(answer, now);
    replace(queues,
      h('h2', {}, 'Queues'),
      summaries.length === 0 ? h('p', { class: 'empty' }, 'No queue has been used on this node yet.')
        : h('div', { class: 'table-wrap' }, h('table', { class: 'list' },
          h('thead', {}, h('tr', {}, h('th', {}, 'Queue'), h('th', {}, 'Waiting'),
            h('th', {}, 'Running'), h('th', {}, 'Oldest waiting'), h('th', {}, ''))),
          h('tbody', {}, summaries.map((q) => h('tr', { 'data-queue': q.name },
            h('td', { class: 'mono' }, q.name),
            h('td', {}, String(q.waiting)),
            h('td', {}, String(q.running)),
            h('td', {}, q.waiting ? duration(q.oldestWaitingMs) : '—'),
            h('td', {}, q.nobodyPolls ? h('span', { class: 'badge status-failed' }, 'nobody polls') : '')))))));
    const live = answer.tasks ?? [];
    keepSelected(tasks, 'attempt', () => replace(tasks,
      h('h2', {}, `Live attempts (${live.length})`),
      live.length === 0 ? h('p', { class: 'empty' }, 'No attempt is queued or running.')
        : h('div', { class: 'table-wrap' }, h('table', { class: 'list' },
          h('thead', {}, h('tr', {},
            h('th', {}, 'Run'), h('th', {}, 'Step'), h('th', {}, '#'), h('th', { class: 'wide' }, 'Queue'),
            h('th', {}, 'State'), h('th', {}, 'Lease owner'), h('th', {}, 'Lease expiry'),
            h('th', { class: 'wide' }, 'Scheduled'), h('th', {}, ''))),
          h('tbody', {}, live.map((t) => h('tr', { 'data-row': true, 'data-attempt': t.attemptId },
            h('td', { class: 'mono' }, h('a', { href: `#/runs/${encodeURIComponent(t.runId)}` }, t.runId)),
            h('td', {}, t.stepName),
            h('td', {}, String(t.attempt)),
            h('td', { class: 'mono wide' }, t.taskQueue || 'node'),
            h('td', {}, h('span', { class: `badge state-${t.state}` }, t.state)),
            h('td', { class: 'mono' }, t.leaseOwner || '—'),
            h('td', {}, t.leaseExpiresAtMs ? relative(t.leaseExpiresAtMs, now) : '—'),
            h('td', { class: 'wide' }, time(t.scheduledAtMs)),
            h('td', {},
              isStuck(t, now) ? h('span', { class: 'badge status-failed' }, 'stuck') : null,
              isRetrying(t, now) ? h('span', { class: 'badge status-waiting' }, 'retrying') : null))))))));
    replace(raw, rawView('GET /v1/tasks', answer));
  }

  const live = poller(async () => {
    try {
      const [answer, blocked] = await Promise.all([
        api.tasks(),
        api.listRuns({ status: 'blocked', limit: 100 }).then((p) => p.runs).catch(() => []),
      ]);
      problem.textContent = '';
      draw(answer, blocked);
    } catch (e) {
      problem.textContent = `Cannot read the tasks: ${e.message}`;
    }
  }, 2000, (s) => {
    liveNote.textContent = s === 'paused' ? 'paused while the tab is hidden' : 'live';
  });
  return { unmount: () => live.stop() };
}
