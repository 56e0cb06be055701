// Runs: newest first, filtered by status and flow, paged by the server's
// cursor, with the tenant's status counts. The search box finds a run by
// its id, or the active run of an instance id (Enter), and narrows the
// rows shown as you type. The first page follows new runs live.
import { api, ApiError } from './api.js';
import { h, keepSelected, replace } from './dom.js';
import { between, duration, runStatuses, statusBadge, time } from './format.js';
import { poller } from './live.js';

const pageSize = 50;

export function mount(main, params, shell) {
  const state = {
    status: params.get('status') ?? '',
    flow: params.get('flow') ?? '',
    cursors: [''],  // cursors of the pages seen; the last is the current one
    runs: [],
    next: null,
    counts: null,
  };

  const hashFor = (status, flow) => {
    const search = new URLSearchParams();
    if (status) search.set('status', status);
    if (flow) search.set('flow', flow);
    const text = search.toString();
    return `#/runs${text ? `?${text}` : ''}`;
  };

  const statusSelect = h('select', {
    id: 'status-filter', 'aria-label': 'status',
    onchange: () => shell.navigate(hashFor(statusSelect.value, state.flow)),
  }, h('option', { value: '' }, 'any status'),
  runStatuses.map((s) => h('option', { value: s, selected: s === state.status }, s)));

  const flowInput = h('input', {
    id: 'flow-filter', type: 'text', value: state.flow, placeholder: 'flow, e.g. acme.flaky',
    'aria-label': 'flow', list: 'known-flows',
  });
  const flows = h('datalist', { id: 'known-flows' });
  const flowForm = h('form', {
    class: 'inline',
    onsubmit: (event) => {
      event.preventDefault();
      shell.navigate(hashFor(state.status, flowInput.value.trim()));
    },
  }, flowInput, flows, h('button', { type: 'submit' }, 'Filter'));

  const search = h('input', {
    id: 'run-search', type: 'search', 'data-search': true,
    placeholder: 'run id or instance id  ( / )', 'aria-label': 'search runs',
    value: params.get('q') ?? '',
    oninput: () => renderRows(),
  });
  const searchMessage = h('p', { class: 'hint', role: 'status' });
  const searchForm = h('form', {
    class: 'inline search',
    onsubmit: async (event) => {
      event.preventDefault();
      const text = search.value.trim();
      if (!text) return;
      searchMessage.textContent = `Looking for ${text}…`;
      try {
        const run = await api.getRun(text);
        shell.navigate(`#/runs/${encodeURIComponent(run.id)}`);
        return;
      } catch (e) {
        if (!(e instanceof ApiError) || e.status !== 404) {
          searchMessage.textContent = e.message;
          return;
        }
      }
      try {
        const run = await api.getInstance(text);
        shell.navigate(`#/runs/${encodeURIComponent(run.id)}`);
      } catch (e) {
        searchMessage.textContent = e instanceof ApiError && e.status === 404
          ? `No run ${text}, and no active run holds instance id ${text}.`
          : e.message;
      }
    },
  }, search, h('button', { type: 'submit' }, 'Find'));

  const countsBar = h('div', { class: 'counts', 'aria-label': 'runs by status' });
  const tbody = h('tbody');
  const table = h('table', { class: 'list runs' },
    h('thead', {}, h('tr', {},
      h('th', {}, 'Run'), h('th', {}, 'Flow'), h('th', {}, 'Status'),
      h('th', { class: 'wide' }, 'Instance'), h('th', {}, 'Created'),
      h('th', {}, 'Duration'))),
    tbody);
  const problem = h('p', { class: 'error', role: 'alert' });
  const pager = h('div', { class: 'pager' });
  const liveNote = h('span', { class: 'live-note', role: 'status' });

  replace(main,
    h('div', { class: 'page-head' },
      h('h1', {}, 'Runs'), liveNote),
    countsBar,
    h('div', { class: 'filters' }, statusSelect, flowForm, searchForm),
    searchMessage,
    problem,
    h('div', { class: 'table-wrap' }, table),
    pager,
    h('p', { class: 'hint' }, 'Keys: / search, j and k move, Enter opens.'));

  function renderCounts() {
    if (!state.counts) return;
    const { counts, total, complete } = state.counts;
    const chip = (status, label, n) => h('a', {
      class: `chip${state.status === status ? ' active' : ''}`,
      href: hashFor(status, state.flow),
      'data-status': status || 'all',
    }, label, h('b', {}, String(n)));
    replace(countsBar,
      chip('', 'all', complete ? total : `${total}+`),
      runStatuses.map((s) => chip(s, s, counts[s] ?? 0)));
  }

  function renderRows() {
    const needle = search.value.trim().toLowerCase();
    const rows = state.runs.filter((run) => !needle ||
      run.id.toLowerCase().includes(needle) ||
      (run.instanceId ?? '').toLowerCase().includes(needle));
    if (rows.length === 0) {
      replace(tbody, h('tr', {}, h('td', { colspan: 6, class: 'empty' },
        state.runs.length === 0 ? 'No runs match.' : 'No run on this page matches the search.')));
    } else {
      keepSelected(tbody, 'run', () => replace(tbody, rows.map((run) => {
        const href = `#/runs/${encodeURIComponent(run.id)}`;
        return h('tr', { 'data-row': true, 'data-run': run.id },
          h('td', { class: 'mono' }, h('a', { href }, run.id)),
          h('td', {}, run.flow),
          h('td', {}, statusBadge(run.status)),
          h('td', { class: 'mono wide' }, run.instanceId === run.id ? '—' : run.instanceId),
          h('td', {}, time(run.createdAt)),
          h('td', {}, duration(between(run.startedAt ?? run.createdAt, run.completedAt))));
      })));
    }
    const page = state.cursors.length;
    replace(pager,
      h('button', {
        type: 'button', disabled: page === 1,
        onclick: () => { state.cursors.pop(); load(); },
      }, '← Newer'),
      h('span', {}, `page ${page}`),
      h('button', {
        type: 'button', id: 'next-page', disabled: !state.next,
        onclick: () => { state.cursors.push(state.next); load(); },
      }, 'Older →'));
    const seen = new Set(state.runs.map((run) => run.flow));
    replace(flows, [...seen].sort().map((f) => h('option', { value: f })));
  }

  async function load() {
    const cursor = state.cursors[state.cursors.length - 1];
    try {
      const [page, counts] = await Promise.all([
        api.listRuns({
          status: state.status, flow: state.flow, limit: pageSize, cursor,
        }),
        api.runCounts(state.flow).catch(() => null),
      ]);
      state.runs = page.runs;
      state.next = page.nextCursor;
      state.counts = counts;
      problem.textContent = '';
    } catch (e) {
      problem.textContent = `Cannot list runs: ${e.message}`;
    }
    renderCounts();
    renderRows();
  }

  // Only the first page changes under the user's eyes: older pages stay put.
  const live = poller(async () => {
    if (state.cursors.length === 1) await load();
  }, 3000, (s) => {
    liveNote.textContent = s === 'paused' ? 'paused while the tab is hidden' : 'live';
  });

  return { unmount: () => live.stop() };
}
