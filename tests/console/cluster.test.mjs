// The Cluster page in real headless Chromium against a real cluster: one
// etcd (/usr/bin/etcd) and one `durin serve --etcd` node `a`, started by the
// harness and stopped by their pids at the end. Cluster `console` has 4
// shards placed on `a`, so the page must list node `a` and 4 shards it owns.
// Cluster `half` in the same etcd places 8 shards over `a` and `b`, and only
// its `a` is started: the shards placed on `b` have no owner, and the page
// must mark them unavailable. (The single-node page is tested in
// console.test.mjs.)
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  api, launchBrowser, logIn, newPage, runDurin, shot, startClusterNode, startEtcd, until,
} from './harness.mjs';

let etcd;
const nodes = [];
let browser;
const pages = [];

async function tab(options) {
  const page = await newPage(browser, options);
  pages.push(page);
  return page;
}

// GET /v1/cluster on `node` once every shard placed on an id in `started`
// is owned by it (a node acquires its shards just after it listens).
function settled(node, started) {
  return until(async () => {
    const view = await api(node, node.adminKey, 'GET', '/v1/cluster');
    if (view.status !== 200) return null;
    const ready = view.body.shards.every((s) =>
      !started.includes(s.placedOn) || (s.owner === s.placedOn && s.state === 'active'));
    return ready ? view.body : null;
  }, 20_000, 'the shards to be acquired');
}

before(async () => {
  etcd = await startEtcd();
  await runDurin(['cluster', 'init', '--etcd', etcd.url, '--cluster', 'console',
    '--shards', '4', '--nodes', 'a']);
  await runDurin(['cluster', 'init', '--etcd', etcd.url, '--cluster', 'half',
    '--shards', '8', '--nodes', 'a,b']);
  nodes.push(await startClusterNode(etcd, 'console', 'a'));
  nodes.push(await startClusterNode(etcd, 'half', 'a'));
  browser = await launchBrowser();
});

after(async () => {
  for (const page of pages) await page.context().close().catch(() => {});
  await browser?.close();
  for (const node of nodes) await node.stop();
  await etcd?.stop();
});

describe('the Cluster page of a cluster node', () => {
  test('lists the node and its 4 shards, and refreshes in place', async () => {
    const [node] = nodes;
    const view = await settled(node, ['a']);
    assert.equal(view.shards.length, 4);
    const page = await tab();
    await logIn(page, node, node.adminKey);
    await page.goto(`${node.base}/console/#/cluster`);
    await page.locator('#cluster-shards tbody tr').nth(3).waitFor();
    assert.equal(await page.locator('#single-node').count(), 0);
    assert.equal(await page.locator('#cluster-summary').innerText(), '1 node, 4 shards, 0 unavailable');
    // The node it talks to, and its lease.
    assert.equal(await page.locator('#cluster-self-id').innerText(), 'a');
    assert.match(await page.locator('#cluster-self-lease').innerText(), /^\d+(\.\d)? s$|^\d+ ms$/);
    assert.match(await page.locator('#cluster-self').innerText(), /Shards it serves\s+4 of 4/);
    // The nodes table: id, HTTP address, peer address, lease left.
    const nodeRow = page.locator('#cluster-nodes tr[data-node="a"]');
    const cells = await nodeRow.locator('td').allInnerTexts();
    assert.match(cells[0], /^a\s+this node$/);
    assert.equal(cells[1], new URL(node.base).host);
    assert.match(cells[2], /^127\.0\.0\.1:\d+$/);
    assert.match(cells[3], /\d s$/);
    assert.equal(await page.locator('#cluster-nodes tbody tr').count(), 1);
    // The shards table: every shard owned by a, placed on a, active.
    for (let id = 0; id < 4; ++id) {
      const row = page.locator(`#cluster-shards tr[data-shard="${id}"]`);
      const [shard, owner, placedOn, epoch, state] = await row.locator('td').allInnerTexts();
      assert.deepEqual([shard, owner, placedOn, state], [String(id), 'a', 'a', 'active']);
      assert.ok(Number(epoch) >= 1, `shard ${id} epoch ${epoch}`);
    }
    assert.equal(await page.locator('#unavailable-shards').isVisible(), false);
    await shot(page, 'cluster-nodes-light');
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot(page, 'cluster-nodes-dark');
    await page.emulateMedia({ colorScheme: 'light' });

    // A refresh (every 3 s) reads the cluster again and changes the rows in
    // place: the tables, and an open raw view, stay the same elements.
    let reads = 0;
    page.on('request', (r) => { if (r.url().endsWith('/v1/cluster')) reads += 1; });
    await page.locator('details.raw summary', { hasText: 'GET /v1/cluster' }).click();
    await page.evaluate(() => { document.querySelector('#cluster-shards').dataset.kept = 'yes'; });
    await until(async () => reads >= 2, 10_000, 'two refreshes');
    assert.equal(await page.locator('#cluster-shards').getAttribute('data-kept'), 'yes');
    assert.equal(await page.locator('details.raw').getAttribute('open'), '');
    assert.match(await page.locator('details.raw pre').innerText(), /"self": "a"/);
    assert.equal(await page.locator('.live-note').innerText(), 'live');
    assert.deepEqual(page.errors, []);

    const phone = await tab({ viewport: { width: 390, height: 844 } });
    await logIn(phone, node, node.adminKey);
    await phone.goto(`${node.base}/console/#/cluster`);
    await phone.locator('#cluster-shards tbody tr').nth(3).waitFor();
    const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - innerWidth);
    assert.ok(overflow <= 1, `the cluster page is ${overflow} px wider than a phone`);
    await shot(phone, 'cluster-nodes-phone', { fullPage: true });
  });

  test('marks the shards no node holds as unavailable, with no owner', async () => {
    const node = nodes[1];
    const view = await settled(node, ['a']);
    const orphans = view.shards.filter((s) => s.placedOn === 'b').map((s) => s.id);
    assert.ok(orphans.length > 0 && orphans.length < 8, `shards placed on b: ${orphans}`);
    const page = await tab({ colorScheme: 'dark' });
    await logIn(page, node, node.adminKey);
    await page.goto(`${node.base}/console/#/cluster`);
    await page.locator('#cluster-shards tbody tr').nth(7).waitFor();
    assert.equal(await page.locator('#cluster-summary').innerText(),
      `1 node, 8 shards, ${orphans.length} unavailable`);
    for (const id of orphans) {
      const row = page.locator(`#cluster-shards tr[data-shard="${id}"]`);
      const [, owner, placedOn, , state] = await row.locator('td').allInnerTexts();
      assert.deepEqual([owner, placedOn, state], ['no owner', 'b', 'unavailable'], `shard ${id}`);
      assert.equal(await row.locator('.badge.status-failed').count(), 2);
    }
    const warning = page.locator('#unavailable-shards');
    assert.equal(await warning.isVisible(), true);
    assert.match(await warning.innerText(), /have no owner|has no owner/);
    assert.match(await warning.innerText(), /503 shard-unavailable/);
    assert.match(await page.locator('#cluster-self').innerText(),
      new RegExp(`Shards it serves\\s+${8 - orphans.length} of 8`));
    await shot(page, 'cluster-unavailable-dark');
    assert.deepEqual(page.errors, []);
  });
});
