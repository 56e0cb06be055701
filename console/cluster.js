// Cluster: durin has no cluster API yet, so there are no nodes, shards,
// owners, epochs or lag to show. This page says so and shows what this
// one node answers; it invents nothing. Once a cluster route exists, this
// page lists its nodes and shards (shards without an owner in red).
import { h, replace } from './dom.js';

export function mount(main) {
  const health = h('dd', { id: 'health' }, '…');
  replace(main,
    h('div', { class: 'page-head' }, h('h1', {}, 'Cluster')),
    h('div', { class: 'banner info', id: 'single-node' },
      h('strong', {}, 'This is a single node.'),
      h('p', {}, 'It owns every run in its own store. There are no shards, owners or ',
        'epochs to show: the node serves no cluster route.')),
    h('div', { class: 'facts' }, h('dl', {},
      h('dt', {}, 'Node'), h('dd', { class: 'mono' }, location.host),
      h('dt', {}, 'Health'), health)));
  fetch('/healthz', { cache: 'no-store' })
    .then((r) => r.json())
    .then((body) => { health.textContent = body.status ?? 'unknown'; })
    .catch((e) => { health.textContent = `no answer: ${e.message}`; });
  return { unmount() {} };
}
