// Run: what the run is (status, input, output or error, times, instance
// id, start token), its history as a timeline, and each step's attempts as
// the transport saw them beside what the history recorded. While the run
// is active the page polls: the run, the history after the last sequence
// seen (a cursor, so a 10,000-event history is read once), and the
// transport's view. It stops once the run is completed, failed or
// cancelled, after one last read.
import { api, ApiError, newIdempotencyKey } from './api.js';
import { h, jsonBlock, keepSelected, rawView, replace } from './dom.js';
import { between, duration, isTerminal, preview, relative, statusBadge, time } from './format.js';
import { poller } from './live.js';
import { latestError, stepsOf } from './warnings.js';

const historyPage = 1000;
const rowHeight = 30;

// The operator guidance, next to what the transport saw.
const transportNote = [
  'Workers get each attempt at least once; the history records each outcome once per step id. ',
  'A second delivery after a lease expired is expected: the durable result is what the history shows.',
];
const refusedNote =
  'A refused late report does not prove that the effect did not happen: the worker may have ' +
  'done the work after it lost its lease. Steps pass their step id as an idempotency key for ' +
  'that reason. Before running an external effect again, look for missing workers, stuck ' +
  'leases and repeated retries.';

export function mount(main, params) {
  const id = params.get('id');
  const state = {
    run: null, events: [], lastSequence: 0, transport: { attempts: [], refusedReports: [] },
    filter: 'all', selected: null, cancelKey: null,
  };

  const liveNote = h('span', { class: 'live-note', role: 'status', id: 'live-note' });
  const head = h('div', { class: 'page-head' });
  const errorBox = h('div', { id: 'latest-error' });
  const facts = h('div', { class: 'facts' });
  const steps = h('section', { id: 'steps' });
  const timeline = h('section', { id: 'history' });
  const raw = h('section', { id: 'raw' });
  const problem = h('p', { class: 'error', role: 'alert' });
  replace(main, head, problem, errorBox, facts, steps, timeline, raw, cancelDialog());

  // ---- the timeline, virtualised: only the rows in view exist.
  const filterSelect = h('select', {
    id: 'history-filter', 'aria-label': 'events shown',
    onchange: () => { state.filter = filterSelect.value; drawTimeline(true); },
  },
  h('option', { value: 'all' }, 'all events'),
  h('option', { value: 'steps' }, 'steps'),
  h('option', { value: 'failures' }, 'failures only'),
  h('option', { value: 'hooks' }, 'hooks, timers, run'));
  const viewport = h('div', { class: 'timeline', tabindex: '0', 'aria-label': 'history events' });
  const spacer = h('div', { class: 'spacer' });
  viewport.append(spacer);
  const eventDetail = h('div', { class: 'event-detail', id: 'event-detail' },
    h('p', { class: 'hint' }, 'Select an event to see all of it.'));
  const historyCount = h('span', { class: 'hint', id: 'history-count' });
  replace(timeline,
    h('div', { class: 'section-head' }, h('h2', {}, 'History'), historyCount, filterSelect),
    h('div', { class: 'timeline-wrap' },
      h('div', { class: 'timeline-head' },
        h('span', { class: 'seq' }, '#'), h('span', { class: 'at' }, 'time'),
        h('span', { class: 'kind' }, 'kind'), h('span', { class: 'step' }, 'step'),
        h('span', { class: 'value' }, 'value')),
      viewport),
    eventDetail);
  let shown = [];
  let frame = 0;
  viewport.addEventListener('scroll', () => {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; drawRows(); });
  });

  function keep(event) {
    switch (state.filter) {
      case 'steps': return Boolean(event.stepId);
      case 'failures': return Boolean(event.error) || /failed|cancelled/.test(event.kind);
      case 'hooks': return !event.stepId;
      default: return true;
    }
  }

  function drawTimeline(reset) {
    shown = state.filter === 'all' ? state.events : state.events.filter(keep);
    spacer.style.height = `${shown.length * rowHeight}px`;
    historyCount.textContent = `${state.events.length} events` +
      (shown.length !== state.events.length ? `, ${shown.length} shown` : '');
    if (reset) viewport.scrollTop = 0;
    drawRows();
  }

  function drawRows() {
    const first = Math.max(0, Math.floor(viewport.scrollTop / rowHeight) - 10);
    const count = Math.ceil((viewport.clientHeight || 600) / rowHeight) + 20;
    const rows = [];
    for (let i = first; i < Math.min(shown.length, first + count); ++i) {
      const event = shown[i];
      rows.push(h('div', {
        class: `event${event.error ? ' failed' : ''}${state.selected === event.sequence ? ' selected' : ''}`,
        style: { top: `${i * rowHeight}px` },
        'data-sequence': event.sequence,
        onclick: () => select(event),
      },
      h('span', { class: 'seq' }, String(event.sequence)),
      h('span', { class: 'at' }, time(event.at).slice(11)),
      h('span', { class: `kind kind-${event.kind}` }, event.kind),
      h('span', { class: 'step mono' }, event.stepId
        ? `${event.name ?? ''} ${event.stepId.split('/').pop()}${event.attempt ? ` #${event.attempt}` : ''}`
        : (event.name ?? '')),
      h('span', { class: 'value mono' }, eventValue(event))));
    }
    spacer.replaceChildren(...rows);
  }

  function select(event) {
    state.selected = event.sequence;
    replace(eventDetail,
      h('h3', {}, `#${event.sequence} ${event.kind}`),
      event.stepId ? h('p', {}, 'step id ', h('code', {}, event.stepId)) : null,
      jsonBlock(event));
    drawRows();
  }

  // ---- the rest of the page
  function drawHead() {
    const run = state.run;
    const cancel = isTerminal(run.status) ? null : h('button', {
      type: 'button', id: 'cancel-run', class: 'danger', onclick: openCancel,
    }, 'Cancel run…');
    replace(head,
      h('div', {},
        h('p', { class: 'crumbs' }, h('a', { href: '#/runs' }, 'Runs'), ' / ', run.flow),
        h('h1', { class: 'mono', id: 'run-id' }, run.id)),
      h('div', { class: 'head-side' }, statusBadge(run.status), liveNote, cancel));
  }

  function drawError() {
    const latest = latestError(state.run, state.events);
    if (!latest) {
      replace(errorBox);
      return;
    }
    const where = latest.source === 'step'
      ? `Latest failed attempt: step ${latest.stepId}, attempt ${latest.attempt} (event #${latest.sequence})`
      : latest.source === 'blocked' ? 'Blocked: the history no longer matches the code'
        : `The run ${state.run.status}`;
    replace(errorBox, h('div', {
      class: `banner ${latest.source === 'step' && !isTerminal(state.run.status) ? 'warning' : 'error'}`,
      role: 'alert',
    },
    h('strong', {}, where),
    h('p', {}, h('code', {}, latest.code ?? 'error'), ' ', latest.message ?? '')));
  }

  function drawFacts() {
    const run = state.run;
    const hooks = state.events.filter((e) => e.kind === 'hook-created' && e.name);
    const startToken = run.startToken ?? null;
    const fact = (label, ...value) => [h('dt', {}, label), h('dd', {}, ...value)];
    replace(facts,
      h('dl', {},
        fact('Status', statusBadge(run.status)),
        fact('Flow', run.flow),
        fact('Instance id', h('code', {}, run.instanceId ?? run.id),
          run.instanceId === run.id ? h('span', { class: 'hint' }, ' (its own)') : null),
        fact('Start token', startToken ? h('a', { href: `#/hooks?token=${encodeURIComponent(startToken)}` }, startToken) : '—'),
        fact('Created', time(run.createdAt)),
        fact('Started', time(run.startedAt)),
        fact('Completed', time(run.completedAt)),
        fact('Duration', duration(between(run.startedAt ?? run.createdAt, run.completedAt))),
        hooks.length ? fact('Hooks', hooks.map((e) => h('a', {
          class: 'chip', href: `#/hooks?token=${encodeURIComponent(e.name)}`,
        }, e.name))) : null),
      h('div', { class: 'io' },
        h('div', {}, h('h3', {}, 'Input'), jsonBlock(run.input, { id: 'run-input' })),
        h('div', {},
          h('h3', {}, run.error ? 'Error' : 'Output'),
          jsonBlock(run.error ?? run.output, { id: run.error ? 'run-error' : 'run-output' }))),
      run.blockedReason ? h('div', { class: 'banner error' },
        h('strong', {}, 'Replay divergence'), h('p', {}, run.blockedReason)) : null);
  }

  function drawSteps() {
    const all = stepsOf(state.events, state.transport);
    if (all.length === 0) {
      replace(steps, h('h2', {}, 'Steps'), h('p', { class: 'empty' }, 'No step yet.'));
      return;
    }
    const anyRefused = all.some((s) => s.refused.length > 0);
    keepSelected(steps, 'step', () => replace(steps,
      h('div', { class: 'section-head' }, h('h2', {}, 'Steps'),
        h('span', { class: 'hint' }, `${all.length} step${all.length === 1 ? '' : 's'}`)),
      h('p', { class: 'note' }, ...transportNote),
      anyRefused ? h('div', { class: 'banner warning', id: 'refused-note' }, h('strong', {}, 'Refused late reports'), h('p', {}, refusedNote)) : null,
      all.slice(-200).map(drawStep),
      all.length > 200 ? h('p', { class: 'hint' }, `The last 200 of ${all.length} steps; the history lists all.`) : null));
  }

  function drawStep(step) {
    const failures = step.recorded.filter((e) => e.kind === 'step-attempt-failed');
    const result = step.recorded.find((e) => e.kind === 'step-completed' || e.kind === 'step-failed');
    return h('article', { class: 'step card', 'data-step': step.stepId, 'data-row': true },
      h('header', {},
        h('strong', {}, step.name ?? step.attempts[0]?.stepName ?? 'step'),
        h('code', {}, step.stepId),
        h('span', { class: `badge status-${step.outcome ?? 'running'}` }, step.outcome ?? 'no outcome yet'),
        h('a', { href: '#', onclick: (e) => { e.preventDefault(); if (result ?? failures.at(-1)) select(result ?? failures.at(-1)); } }, 'in history')),
      h('div', { class: 'two' },
        h('div', {},
          h('h4', {}, 'Recorded in the history (durable)'),
          h('ul', { class: 'recorded' },
            failures.map((e) => h('li', { class: 'failed' },
              `attempt ${e.attempt} failed: `, h('code', {}, e.error?.code ?? ''), ` ${e.error?.message ?? ''}`)),
            result ? h('li', { class: result.kind === 'step-failed' ? 'failed' : 'ok' },
              result.kind === 'step-completed'
                ? [`attempt ${result.attempt} completed: `, h('code', {}, preview(result.value, 80))]
                : [`failed for good: `, h('code', {}, result.error?.code ?? ''), ` ${result.error?.message ?? ''}`])
              : h('li', { class: 'hint' }, 'no outcome recorded yet'))),
        h('div', {},
          h('h4', {}, 'Seen by the transport (at least once)'),
          step.attempts.length === 0
            ? h('p', { class: 'hint' }, 'No leased attempt seen by this node (in-node attempts without timeouts leave no transport log).')
            : h('div', { class: 'table-wrap' }, h('table', { class: 'list attempts' },
              h('thead', {}, h('tr', {},
                h('th', {}, '#'), h('th', {}, 'state'), h('th', {}, 'lease owner'),
                h('th', {}, 'lease expiry'), h('th', {}, 'timeout'), h('th', {}, 'heartbeats'))),
              h('tbody', {}, step.attempts.map((a) => h('tr', { 'data-attempt': a.attemptId },
                h('td', {}, String(a.attempt)),
                h('td', {}, h('span', { class: `badge state-${a.state}` }, a.state)),
                h('td', { class: 'mono' }, a.leaseOwner || '—'),
                h('td', {}, a.leaseExpiresAtMs ? time(a.leaseExpiresAtMs).slice(11) : '—'),
                h('td', {}, a.timeout ? h('code', {}, a.timeout) : '—'),
                h('td', {}, String(a.heartbeats ?? 0)))))))),
        step.refused.length ? h('div', { class: 'refused' },
          h('h4', {}, 'Refused reports'),
          h('ul', {}, step.refused.map((r) => h('li', { class: 'refused-report' },
            `${r.report} from `, h('code', {}, r.owner || '?'), ` for attempt `,
            h('code', {}, r.attemptId), ` refused: `, h('code', {}, r.reason), ` at ${time(r.atMs).slice(11)}`))),
          h('p', { class: 'note' }, 'Refused does not mean it did not happen: the effect may have run.')) : null));
  }

  function drawRaw() {
    replace(raw,
      h('h2', {}, 'Raw JSON'),
      rawView('GET /v1/runs/' + id, state.run),
      rawView(`GET /v1/tasks?runId=${id}`, state.transport),
      h('details', { class: 'raw' }, h('summary', {}, `History (${state.events.length} events; the last 200)`),
        jsonBlock(state.events.slice(-200))));
  }

  function draw() {
    drawHead();
    drawError();
    drawFacts();
    drawSteps();
    drawTimeline(false);
    drawRaw();
  }

  // ---- reading
  async function readHistory() {
    for (;;) {
      const page = await api.history(id, state.lastSequence, historyPage);
      if (page.events.length) {
        state.events.push(...page.events);
        state.lastSequence = page.events[page.events.length - 1].sequence;
        drawTimeline(false);
      }
      if (!page.nextAfter) return;
    }
  }

  async function refresh() {
    const run = await api.getRun(id);
    state.run = run;
    await readHistory();
    state.transport = await api.runTasks(id).catch(() => state.transport);
    problem.textContent = '';
    draw();
    return isTerminal(run.status) ? 'stop' : undefined;
  }

  const live = poller(async () => {
    try {
      return await refresh();
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        replace(main, h('h1', {}, 'Run not found'),
          h('p', { class: 'empty', id: 'not-found' }, `No run ${id} in this tenant.`),
          h('a', { href: '#/runs' }, '← Runs'));
        return 'stop';
      }
      problem.textContent = `Cannot read the run: ${e.message}`;
      return undefined;
    }
  }, 1000, (s) => {
    liveNote.textContent = s === 'live' ? 'live'
      : s === 'paused' ? 'paused while the tab is hidden' : 'final';
    liveNote.dataset.state = s;
  });

  // ---- cancel, confirmed, with one idempotency key per confirmation
  function cancelDialog() {
    const reason = h('input', { id: 'cancel-reason', type: 'text', placeholder: 'reason (optional)', 'aria-label': 'reason' });
    const message = h('p', { class: 'error', role: 'alert' });
    const dialog = h('dialog', { id: 'cancel-dialog' },
      h('form', {
        method: 'dialog',
        onsubmit: async (event) => {
          event.preventDefault();
          if (event.submitter?.value !== 'confirm') {
            dialog.close();
            return;
          }
          try {
            state.run = await api.cancelRun(id, reason.value.trim(), state.cancelKey);
            dialog.close();
            state.cancelKey = null;
            await refresh().catch(() => {});
          } catch (e) {
            // The same key again on a retry: the node answers the first
            // cancel's result instead of cancelling twice.
            message.textContent = `${e.code ? `${e.code}: ` : ''}${e.message}`;
          }
        },
      },
      h('h2', {}, 'Cancel this run?'),
      h('p', {}, 'The run ends as cancelled; its pending steps and timers are ignored. ',
        'A step already running may still finish its external effect.'),
      reason, message,
      h('div', { class: 'actions' },
        h('button', { type: 'submit', value: 'keep' }, 'Keep running'),
        h('button', { type: 'submit', value: 'confirm', class: 'danger', id: 'confirm-cancel' }, 'Cancel run'))));
    return dialog;
  }

  function openCancel() {
    state.cancelKey = state.cancelKey ?? newIdempotencyKey('cancel');
    const dialog = main.querySelector('#cancel-dialog');
    dialog.querySelector('.error').textContent = '';
    dialog.showModal();
  }

  return {
    unmount: () => {
      live.stop();
      if (frame) cancelAnimationFrame(frame);
    },
  };
}

function eventValue(event) {
  if (event.error) return `${event.error.code}: ${event.error.message}`;
  if ('value' in event) return preview(event.value);
  if ('output' in event) return preview(event.output);
  if (event.dueAtMs) return `due ${relative(event.dueAtMs)}`;
  const { sequence, kind, at, stepId, name, call, attempt, attemptId, ...rest } = event;
  return Object.keys(rest).length ? preview(rest) : '';
}
