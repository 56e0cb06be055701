// Cluster: what GET /v1/cluster answers on the node this console talks to
// (an admin key only): which node that is and how long its lease lasts,
// every node of the cluster with its addresses and lease, and every shard
// with its owner (the node holding its lease; none while no node does, and
// then the shard is unavailable), where it is placed, its epoch and state.
// Live while shown: the same elements are refreshed in place every few
// seconds, so nothing flickers and an open raw view stays open.
//
// A node started without --etcd answers 404 not-a-cluster: the page says it
// runs alone. A weaker key is answered 403: the page says it needs the admin
// key. Neither changes without a restart or a new login, so both stop the
// polling. Any other error is shown as {code, message} above the last view.
import { api, ApiError } from './api.js';
import { h, replace } from './dom.js';
import { duration } from './format.js';
import { poller } from './live.js';

const refreshMs = 3000;

export function mount(main) {
  const liveNote = h('span', { class: 'live-note', role: 'status' });
  const problem = h('p', { class: 'error', role: 'alert' });
  const content = h('section', { id: 'cluster' });
  replace(main,
    h('div', { class: 'page-head' }, h('h1', {}, 'Cluster'), liveNote),
    problem, content);

  let view = null;  // the cluster view's elements, made on the first answer

  const live = poller(async () => {
    try {
      const answer = await api.cluster();
      problem.textContent = '';
      view ??= clusterView(content);
      view.update(answer);
      return undefined;
    } catch (e) {
      if (e instanceof ApiError && e.status === 404 && e.code === 'not-a-cluster') {
        problem.textContent = '';
        singleNode(content);
        return 'stop';
      }
      if (e instanceof ApiError && e.status === 403) {
        problem.textContent = '';
        needsAdmin(content, e.message);
        return 'stop';
      }
      problem.textContent = `Cannot read the cluster: ${e.code ? `${e.code}: ` : ''}${e.message}`;
      return undefined;
    }
  }, refreshMs, (s) => {
    liveNote.hidden = s === 'stopped';
    liveNote.textContent = s === 'paused' ? 'paused while the tab is hidden' : 'live';
    liveNote.dataset.state = s;
  });
  return { unmount: () => live.stop() };
}

// A node that runs alone: no nodes, shards, owners or epochs to show.
function singleNode(content) {
  const health = h('dd', { id: 'health' }, '…');
  replace(content,
    h('div', { class: 'banner info', id: 'single-node' },
      h('strong', {}, 'This node runs alone.'),
      h('p', {}, 'It was started as ', h('code', {}, 'durin serve'), ' without ',
        h('code', {}, '--etcd'), ', so it is not part of a cluster: it serves every shard of ',
        'its own data directory, and there are no other nodes, shard owners or epochs to show.')),
    h('div', { class: 'facts' }, h('dl', {},
      h('dt', {}, 'Node'), h('dd', { class: 'mono' }, location.host),
      h('dt', {}, 'Health'), health)));
  fetch('/healthz', { cache: 'no-store' })
    .then((r) => r.json())
    .then((body) => { health.textContent = body.status ?? 'unknown'; })
    .catch((e) => { health.textContent = `no answer: ${e.message}`; });
}

// A key whose role may not read the cluster.
function needsAdmin(content, message) {
  replace(content,
    h('div', { class: 'banner error', id: 'needs-admin' },
      h('strong', {}, 'The Cluster page needs an admin key.'),
      h('p', {}, 'The cluster\'s nodes and shards are shown only to a key of role ',
        h('code', {}, 'admin'), ', such as the node\'s ', h('code', {}, 'DATA_DIR/admin.key'),
        '. Log out and log in with one to see them.'),
      h('p', { class: 'hint' }, `The node answered: forbidden: ${message}`)));
}

// "2.0 s", or a red "lapsed" once nothing is left.
function leaseLeft(ms) {
  return ms > 0 ? duration(ms) : h('span', { class: 'badge status-failed' }, 'lapsed');
}

function plural(count, one) {
  return `${count} ${one}${count === 1 ? '' : 's'}`;
}

const stateClass = {
  active: 'state-active',
  moving: 'status-waiting',
  unavailable: 'status-failed',
};

// The cluster's elements, made once; update(answer) refreshes them in place.
function clusterView(content) {
  const summary = h('p', { class: 'note', id: 'cluster-summary' });
  const facts = h('dl', {});
  const warning = h('div', { class: 'banner error', id: 'unavailable-shards', hidden: true });
  const nodeRows = h('tbody', {});
  const shardRows = h('tbody', {});
  const rawJson = h('pre', { class: 'json' });
  const head = (...names) => h('thead', {}, h('tr', {},
    names.map(([name, wide]) => h('th', { class: wide ? 'wide' : null }, name))));
  replace(content,
    summary,
    h('div', { class: 'facts', id: 'cluster-self' }, facts),
    warning,
    h('h2', {}, 'Nodes'),
    h('div', { class: 'table-wrap' }, h('table', { class: 'list', id: 'cluster-nodes' },
      head(['Node'], ['HTTP address'], ['Peer address'], ['Lease left']), nodeRows)),
    h('h2', {}, 'Shards'),
    h('div', { class: 'table-wrap' }, h('table', { class: 'list', id: 'cluster-shards' },
      head(['Shard'], ['Owner'], ['Placed on'], ['Epoch'], ['State'], ['Lease left', true]),
      shardRows)),
    h('details', { class: 'raw' }, h('summary', {}, 'GET /v1/cluster'), rawJson));

  function update(answer) {
    const nodes = answer.nodes ?? [];
    const shards = answer.shards ?? [];
    const unavailable = shards.filter((s) => !s.owner || s.state === 'unavailable');
    replace(summary,
      `${plural(nodes.length, 'node')}, ${plural(shards.length, 'shard')}, `,
      unavailable.length > 0
        ? h('strong', { class: 'error' }, `${unavailable.length} unavailable`)
        : '0 unavailable');

    const fact = (label, ...value) => [h('dt', {}, label), h('dd', {}, ...value)];
    replace(facts,
      fact('This node', h('code', { id: 'cluster-self-id' }, answer.self ?? '?'),
        ' at ', h('span', { class: 'mono' }, location.host)),
      fact('Its lease', h('span', { id: 'cluster-self-lease' }, leaseLeft(answer.selfLeaseLeftMs))),
      fact('Cluster', h('code', {}, answer.cluster ?? '?')),
      fact('Shards it serves', `${answer.selfShardsServed ?? 0} of ${answer.shardCount ?? shards.length}`));

    warning.hidden = unavailable.length === 0;
    replace(warning,
      h('strong', {}, unavailable.length === 1
        ? `Shard ${unavailable[0].id} has no owner.`
        : `Shards ${unavailable.map((s) => s.id).join(', ')} have no owner.`),
      h('p', {}, 'No node holds their lease, so requests for their runs, hooks and keys ',
        'answer 503 shard-unavailable until one does.'));

    replace(nodeRows, nodes.map((n) => h('tr', { 'data-node': n.id },
      h('td', { class: 'mono' }, n.id,
        n.id === answer.self ? [' ', h('span', { class: 'badge state-active' }, 'this node')] : null),
      h('td', { class: 'mono' }, n.http || '—'),
      h('td', { class: 'mono' }, n.peer || '—'),
      h('td', {}, leaseLeft(n.leaseLeftMs)))));
    if (nodes.length === 0) {
      replace(nodeRows, h('tr', {}, h('td', { colspan: 4, class: 'empty' }, 'No node holds a lease.')));
    }

    replace(shardRows, shards.map((s) => h('tr', {
      'data-shard': String(s.id), 'data-state': s.state,
    },
    h('td', {}, String(s.id)),
    h('td', { class: 'mono' }, s.owner ?? h('span', { class: 'badge status-failed' }, 'no owner')),
    h('td', { class: 'mono' }, s.placedOn ?? '—'),
    h('td', {}, String(s.epoch ?? '—')),
    h('td', {}, h('span', { class: `badge ${stateClass[s.state] ?? ''}` }, s.state ?? '?')),
    h('td', { class: 'wide' }, s.owner ? leaseLeft(s.leaseLeftMs) : '—'))));

    rawJson.textContent = JSON.stringify(answer, null, 2);
  }

  return { update };
}
