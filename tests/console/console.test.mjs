// The console in real headless Chromium against a real `durin serve`: each
// test creates its runs through the API, then drives the page as an
// operator would and asserts what the page shows. One server and one
// browser for the file; each test opens its own tab (its own
// sessionStorage, so its own login).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  api, launchBrowser, logIn, newPage, shot, shotsDir, startRun, startServer, startWorker, until,
} from './harness.mjs';

let server;
let browser;
const pages = [];

// The run once it has ended (a waited start answers as soon as it waits,
// for a retry too).
function finished(id) {
  return until(async () => {
    const run = await api(server, server.adminKey, 'GET', `/v1/runs/${id}`);
    return ['completed', 'failed', 'cancelled'].includes(run.body.status) ? run.body : null;
  }, 20_000, `run ${id} to end`);
}

async function tab(options) {
  const page = await newPage(browser, options);
  pages.push(page);
  return page;
}

before(async () => {
  // A short start-to-close for acme.pay's charge step, so that a claimed
  // attempt nobody reports expires (and is redelivered) within the test.
  server = await startServer({ DURIN_CHARGE_TIMEOUT_MS: '400' });
  browser = await launchBrowser();
});

after(async () => {
  for (const page of pages) await page.context().close().catch(() => {});
  await browser?.close();
  await server?.stop();
  console.log(`# screenshots in ${shotsDir}`);
});

describe('without a key', () => {
  test('shows nothing but the login', async () => {
    await startRun(server, server.adminKey, 'acme.review-order', { orderId: 'NOKEY-1' });
    const page = await tab();
    await page.goto(`${server.base}/console/#/runs`);
    await page.getByLabel('API key').waitFor();
    assert.equal(await page.locator('header.top nav').count(), 0);
    assert.equal(await page.locator('table').count(), 0);
    const text = await page.locator('body').innerText();
    assert.doesNotMatch(text, /run_[0-9A-Z]{10}/, 'no run id on the login page');
    assert.doesNotMatch(text, /acme\./);
    // Every page route is the login while there is no key.
    for (const hash of ['#/tasks', '#/hooks?token=order:x', '#/cluster']) {
      await page.goto(`${server.base}/console/${hash}`);
      await page.getByLabel('API key').waitFor();
      assert.equal(await page.locator('header.top nav').count(), 0, hash);
    }
    // A wrong key is refused and stays out of storage.
    await page.getByLabel('API key').fill('dk_key_not_a_real_key');
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.getByText('That key is not valid.').waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem('durin.apiKey')), null);
    assert.equal(await page.evaluate(() => document.cookie), '');
    assert.deepEqual(page.errors, []);
  });

  test('the console files are served from the binary, and nothing else is', async () => {
    const redirect = await fetch(`${server.base}/console`, { redirect: 'manual' });
    assert.equal(redirect.status, 308);
    assert.equal(redirect.headers.get('location'), '/console/');
    const index = await fetch(`${server.base}/console/`);
    assert.equal(index.status, 200);
    assert.match(index.headers.get('content-type'), /^text\/html/);
    assert.match(index.headers.get('cache-control'), /no-cache/);
    assert.match(await index.text(), /<script type="module" src="app.js">/);
    const script = await fetch(`${server.base}/console/app.js`);
    assert.match(script.headers.get('content-type'), /^text\/javascript/);
    const etag = script.headers.get('etag');
    const again = await fetch(`${server.base}/console/app.js`, { headers: { 'If-None-Match': etag } });
    assert.equal(again.status, 304);
    const style = await fetch(`${server.base}/console/style.css`);
    assert.match(style.headers.get('content-type'), /^text\/css/);
    assert.equal((await fetch(`${server.base}/console/missing.js`)).status, 404);
    assert.equal((await fetch(`${server.base}/console/%2e%2e/admin.key`)).status, 404);
    assert.equal((await fetch(`${server.base}/console/sub/app.js`)).status, 404);
    assert.equal((await fetch(`${server.base}/console/app.js`, { method: 'POST' })).status, 405);
  });
});

describe('the API routes the console adds', () => {
  test('history pages: after, limit, nextAfter, lastSequence', async () => {
    const run = await startRun(server, server.adminKey, 'acme.review-order', { orderId: 'PAGE-1' });
    const all = await api(server, server.adminKey, 'GET', `/v1/runs/${run.id}/history`);
    assert.equal(all.status, 200);
    const count = all.body.events.length;
    assert.ok(count >= 4);
    assert.equal(all.body.lastSequence, count);
    assert.equal('nextAfter' in all.body, false, 'unpaged answers are as before');
    const first = await api(server, server.adminKey, 'GET', `/v1/runs/${run.id}/history?limit=2`);
    assert.deepEqual(first.body.events.map((e) => e.sequence), [1, 2]);
    assert.equal(first.body.nextAfter, 2);
    const rest = await api(server, server.adminKey, 'GET', `/v1/runs/${run.id}/history?after=2`);
    assert.deepEqual(rest.body.events.map((e) => e.sequence),
      Array.from({ length: count - 2 }, (_, i) => i + 3));
    assert.equal(rest.body.nextAfter, null);
    const beyond = await api(server, server.adminKey, 'GET', `/v1/runs/${run.id}/history?after=${count + 5}`);
    assert.deepEqual(beyond.body.events, []);
    assert.equal(beyond.body.nextAfter, null);
    for (const bad of ['limit=0', 'limit=1001', 'after=-1', 'after=x', 'since=1']) {
      const refused = await api(server, server.adminKey, 'GET', `/v1/runs/${run.id}/history?${bad}`);
      assert.equal(refused.status, 400, bad);
      assert.equal(refused.body.code, 'invalid-argument', bad);
    }
  });

  test('run counts are the caller\'s, by status and flow', async () => {
    const made = await api(server, server.adminKey, 'POST', '/v1/tenants', { name: 'counting' });
    const key = made.body.apiKey.secret;
    await startRun(server, key, 'acme.review-order', { orderId: 'COUNT-1' });
    await startRun(server, key, 'acme.review-order', { orderId: 'COUNT-2' });
    const held = await startRun(server, key, 'acme.sleep', { ms: 600_000 }, { wait: false });
    await until(async () => (await api(server, key, 'GET', `/v1/runs/${held.id}`)).body.status === 'waiting');
    const counts = await api(server, key, 'GET', '/v1/run-counts');
    assert.equal(counts.status, 200);
    assert.equal(counts.body.total, 3);
    assert.equal(counts.body.complete, true);
    assert.equal(counts.body.counts.completed, 2);
    assert.equal(counts.body.counts.waiting, 1);
    assert.equal(counts.body.counts.blocked, 0);
    const sleeps = await api(server, key, 'GET', '/v1/run-counts?flow=acme.sleep');
    assert.equal(sleeps.body.total, 1);
    assert.equal((await api(server, key, 'GET', '/v1/run-counts?status=failed')).status, 400);
    assert.equal((await api(server, key, 'POST', '/v1/run-counts', {})).status, 405);
    assert.equal((await api(server, 'dk_key_wrong', 'GET', '/v1/run-counts')).status, 401);
    await api(server, key, 'POST', `/v1/runs/${held.id}/cancel`, {});
  });
});

describe('with the admin key', () => {
  test('finds a run by id, opens it, sees its steps and a failed attempt\'s error', async () => {
    const flaky = await startRun(server, server.adminKey, 'acme.flaky', { failures: 2 });
    await finished(flaky.id);
    const page = await tab();
    await logIn(page, server, server.adminKey);
    await page.locator(`tr[data-run="${flaky.id}"]`).waitFor();
    // The status counts include it.
    const completed = Number(await page.locator('.chip[data-status="completed"] b').innerText());
    assert.ok(completed >= 1);
    // Search by id: `/` focuses the search, Enter finds the run.
    await page.keyboard.press('/');
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'run-search');
    await page.keyboard.type(flaky.id);
    await page.keyboard.press('Enter');
    await page.waitForURL(`**/console/#/runs/${flaky.id}`);
    await page.locator('#run-id', { hasText: flaky.id }).waitFor();
    assert.equal(await page.locator('.head-side .badge').innerText(), 'completed');
    const step = page.locator('article.step', { hasText: 'flaky-step' });
    await step.waitFor();
    assert.match(await step.innerText(), /attempt 1 failed: attempt-failed failing on purpose, attempt 1/);
    assert.match(await step.innerText(), /attempt 2 failed: attempt-failed failing on purpose, attempt 2/);
    assert.match(await step.innerText(), /attempt 3 completed/);
    assert.match(await step.innerText(), new RegExp(`${flaky.id}/1`));
    // The latest error in plain sight.
    assert.match(await page.locator('#latest-error').innerText(), /failing on purpose, attempt 2/);
    // The timeline: kind, sequence, step id.
    const timeline = page.locator('.timeline');
    assert.match(await timeline.innerText(), /step-attempt-failed/);
    assert.match(await timeline.innerText(), /run-completed/);
    await page.locator('.event[data-sequence="2"]').click();
    assert.match(await page.locator('#event-detail').innerText(), /"code": "attempt-failed"/);
    assert.equal(await page.locator('#live-note').innerText(), 'final');
    // Raw JSON views.
    await page.locator('details.raw summary', { hasText: `GET /v1/runs/${flaky.id}` }).click();
    assert.match(await page.locator('#raw').innerText(), /"flow": "acme.flaky"/);
    assert.deepEqual(page.errors, []);
  });

  test('finds a run by instance id and moves through the list with j, k and Enter', async () => {
    const held = await startRun(server, server.adminKey, 'acme.sleep', { ms: 600_000 },
      { instanceId: 'console-instance-7', wait: false });
    const page = await tab();
    await logIn(page, server, server.adminKey);
    await page.locator('#run-search').fill('console-instance-7');
    await page.locator('#run-search').press('Enter');
    await page.waitForURL(`**/#/runs/${held.id}`);
    await page.locator('.facts', { hasText: 'console-instance-7' }).waitFor();
    await page.goto(`${server.base}/console/#/runs`);
    await page.locator('tr[data-row]').first().waitFor();
    await page.locator('body').click({ position: { x: 5, y: 400 } });
    await page.keyboard.press('j');
    await page.keyboard.press('j');
    await page.keyboard.press('k');
    const selected = await page.locator('tr.selected').getAttribute('data-run');
    assert.equal(selected, await page.locator('tr[data-row]').first().getAttribute('data-run'));
    // A live refresh of the list (every 3 s) keeps the selection.
    await page.waitForTimeout(3500);
    assert.equal(await page.locator('tr.selected').getAttribute('data-run'), selected);
    await page.keyboard.press('Enter');
    await page.waitForURL(`**/#/runs/${selected}`);
    await api(server, server.adminKey, 'POST', `/v1/runs/${held.id}/cancel`, {});
  });

  test('resumes a hook of acme.order-notes and the open run page sees it complete', async () => {
    const order = `C-${Date.now()}`;
    const run = await startRun(server, server.adminKey, 'acme.order-notes', { orderId: order, note: 'first' });
    assert.equal(run.status, 'waiting');
    const watcher = await tab();
    await logIn(watcher, server, server.adminKey);
    await watcher.goto(`${server.base}/console/#/runs/${run.id}`);
    await watcher.locator('.head-side .badge', { hasText: 'waiting' }).waitFor();
    assert.equal(await watcher.locator('#live-note').innerText(), 'live');
    // The run page links the hook its history created.
    const hookLink = watcher.locator('.facts a.chip', { hasText: `order:${order}` });
    await hookLink.waitFor();

    const operator = await tab();
    await logIn(operator, server, server.adminKey);
    await operator.goto(`${server.base}/console/#/hooks?token=${encodeURIComponent(`order:${order}`)}`);
    await operator.locator('#hook-owner', { hasText: run.id }).waitFor();
    assert.match(await operator.locator('.facts').innerText(), /active/);
    const sent = operator.waitForRequest((r) => r.url().endsWith('/resume'));
    await operator.locator('#resume-payload').fill('{"note": "closed from the console", "done": true}');
    await operator.locator('#resume-button').click();
    const request = await sent;
    assert.match(request.headers()['idempotency-key'], /^console-resume-[0-9a-f]{24}$/);
    assert.equal(request.headers().authorization, `Bearer ${server.adminKey}`);
    await operator.locator('#resume-result', { hasText: 'Delivered' }).waitFor();
    await shot(operator, 'hooks-resumed-light');

    // The watcher was not reloaded: its poll sees the run end.
    await watcher.locator('.head-side .badge', { hasText: 'completed' }).waitFor({ timeout: 10_000 });
    await watcher.locator('#live-note', { hasText: 'final' }).waitFor();
    assert.match(await watcher.locator('#run-output').innerText(), /closed from the console/);
    assert.match(await watcher.locator('.timeline').innerText(), /run-completed/);
    assert.deepEqual([...watcher.errors, ...operator.errors], []);
  });

  test('cancels a run after confirming, with an idempotency key', async () => {
    const run = await startRun(server, server.adminKey, 'acme.sleep', { ms: 600_000 }, { wait: false });
    const page = await tab();
    await logIn(page, server, server.adminKey);
    await page.goto(`${server.base}/console/#/runs/${run.id}`);
    await page.locator('#cancel-run').waitFor();
    // Asked first; "Keep running" changes nothing.
    await page.locator('#cancel-run').click();
    await page.locator('#cancel-dialog[open]').waitFor();
    await page.getByRole('button', { name: 'Keep running' }).click();
    assert.equal((await api(server, server.adminKey, 'GET', `/v1/runs/${run.id}`)).body.status, 'waiting');
    await page.locator('#cancel-run').click();
    await page.locator('#cancel-reason').fill('stopped from the console test');
    const sent = page.waitForRequest((r) => r.url().endsWith('/cancel'));
    await page.locator('#confirm-cancel').click();
    const request = await sent;
    assert.match(request.headers()['idempotency-key'], /^console-cancel-[0-9a-f]{24}$/);
    await page.locator('.head-side .badge', { hasText: 'cancelled' }).waitFor();
    assert.match(await page.locator('#latest-error').innerText(), /stopped from the console test/);
    assert.equal(await page.locator('#cancel-run').count(), 0);
    const stored = await api(server, server.adminKey, 'GET', `/v1/runs/${run.id}`);
    assert.equal(stored.body.status, 'cancelled');
    assert.deepEqual(page.errors, []);
  });

  test('shows redelivered attempts, a refused late report and the retrying warning', async () => {
    const run = await startRun(server, server.adminKey, 'acme.pay', { orderId: 'LATE-1' }, { wait: false });
    // Be a worker that claims the charge three times and never reports in
    // time: each lease lapses (start-to-close 400 ms), the attempt is
    // delivered again.
    const claimed = [];
    for (let i = 0; i < 3; ++i) {
      const poll = await api(server, server.adminKey, 'POST', '/v1/task-queues/payments/poll',
        { workerId: 'slow-worker', waitMs: 5000 });
      assert.equal(poll.status, 200);
      assert.ok(poll.body.task, `claim ${i + 1}`);
      claimed.push(poll.body.task);
    }
    await until(async () => {
      const tasks = await api(server, server.adminKey, 'GET', `/v1/tasks?runId=${run.id}`);
      return tasks.body.attempts.some((a) => a.attempt === 4 && a.state === 'queued');
    }, 10_000, 'attempt 4 queued');
    // The first attempt reports, late: refused, and yet its charge may have happened.
    const late = await api(server, server.adminKey, 'POST', `/v1/tasks/${claimed[0].attemptId}/complete`,
      { workerId: 'slow-worker', result: { charged: true } });
    assert.equal(late.body.recorded, false);

    const page = await tab();
    await logIn(page, server, server.adminKey);
    await page.goto(`${server.base}/console/#/tasks`);
    const warning = page.locator(`[data-warning="retrying"]`, { hasText: run.id });
    await warning.waitFor();
    assert.match(await warning.innerText(), /retrying step charge: attempt 4/);
    assert.match(await page.locator('tr[data-queue="payments"]').innerText(), /payments\s+1\s+0/);
    assert.ok(Number(await page.locator('#task-stats .stat', { hasText: 'redeliveries' }).locator('b').innerText()) >= 3);
    await shot(page, 'tasks-warning-light');
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot(page, 'tasks-warning-dark');
    await page.emulateMedia({ colorScheme: 'light' });

    await warning.getByRole('link', { name: 'open the run' }).click();
    await page.waitForURL(`**/#/runs/${run.id}`);
    const step = page.locator('article.step', { hasText: 'charge' });
    await step.locator('tr[data-attempt]').nth(3).waitFor();
    const attempts = await step.locator('table.attempts').innerText();
    assert.match(attempts, /expired/);
    assert.match(attempts, /start-to-close/);
    assert.match(attempts, /slow-worker/);
    assert.match(await step.locator('.refused').innerText(),
      new RegExp(`complete from slow-worker for attempt ${claimed[0].attemptId} refused: stale_attempt`));
    assert.match(await page.locator('#refused-note').innerText(),
      /does not prove that the effect did not happen/);
    assert.match(await step.innerText(), /attempt 1 failed: timeout-start-to-close/);
    assert.match(await page.locator('#latest-error').innerText(), /timed out \(start-to-close\)/);
    await shot(page, 'run-transport-light', { fullPage: true });
    await api(server, server.adminKey, 'POST', `/v1/runs/${run.id}/cancel`, {});
    assert.deepEqual(page.errors, []);
  });

  test('renders a history of 10,000 events without building 10,000 rows', async () => {
    const worker = startWorker(server, 'workers');
    let run;
    try {
      run = await startRun(server, server.adminKey, 'acme.remote-echo', { count: 9_998, value: 'x' });
      run = await until(async () => {
        const now = await api(server, server.adminKey, 'GET', `/v1/runs/${run.id}`);
        return now.body.status === 'completed' ? now.body : null;
      }, 120_000, 'the 9,998-step run');
    } finally {
      await worker.stop();
    }
    const page = await tab();
    await logIn(page, server, server.adminKey);
    const began = Date.now();
    await page.goto(`${server.base}/console/#/runs/${run.id}`);
    await page.locator('#history-count', { hasText: '10000 events' }).waitFor({ timeout: 30_000 });
    const loadedMs = Date.now() - began;
    assert.ok(loadedMs < 20_000, `loaded in ${loadedMs} ms`);
    const rows = await page.locator('.timeline .event').count();
    assert.ok(rows > 10 && rows < 200, `${rows} rows in the DOM`);
    // The page answers at once while it shows them: a click is handled
    // within a frame or two, and the last event is one scroll away.
    const answerMs = await page.evaluate(() => new Promise((done) => {
      const t0 = performance.now();
      requestAnimationFrame(() => done(performance.now() - t0));
    }));
    assert.ok(answerMs < 500, `a frame took ${answerMs} ms`);
    await page.locator('.timeline').evaluate((e) => { e.scrollTop = e.scrollHeight; });
    await page.locator('.event[data-sequence="10000"]', { hasText: 'run-completed' }).waitFor();
    await page.locator('#history-filter').selectOption('hooks');
    await page.locator('#history-count', { hasText: '2 shown' }).waitFor();
    assert.deepEqual(page.errors, []);
  });
});

describe('with a tenant\'s key', () => {
  test('sees only its tenant', async () => {
    const made = await api(server, server.adminKey, 'POST', '/v1/tenants', { name: 'console-tenant' });
    assert.equal(made.status, 201);
    const tenantKey = made.body.apiKey.secret;
    const mine = await startRun(server, tenantKey, 'acme.review-order', { orderId: 'TENANT-1' });
    const theirs = await startRun(server, server.adminKey, 'acme.review-order', { orderId: 'ADMIN-1' });
    const page = await tab();
    await logIn(page, server, tenantKey);
    await page.locator(`tr[data-run="${mine.id}"]`).waitFor();
    assert.equal(await page.locator('tr[data-row]').count(), 1);
    assert.equal(await page.locator(`tr[data-run="${theirs.id}"]`).count(), 0);
    assert.equal(await page.locator('.chip[data-status="all"] b').innerText(), '1');
    // The admin's run, even by its id, is not there.
    await page.locator('#run-search').fill(theirs.id);
    await page.locator('#run-search').press('Enter');
    await page.getByText(`No run ${theirs.id}`).waitFor();
    await page.goto(`${server.base}/console/#/runs/${theirs.id}`);
    await page.locator('#not-found').waitFor();
    assert.doesNotMatch(await page.locator('body').innerText(), /ADMIN-1/);
    // Logging out forgets the key.
    await page.locator('#logout').click();
    await page.getByLabel('API key').waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem('durin.apiKey')), null);
    assert.deepEqual(page.errors, []);
  });
});

describe('the Cluster page of a node that runs alone', () => {
  test('says the node runs alone with the admin key, and that it needs one with a weaker key', async () => {
    const page = await tab();
    await logIn(page, server, server.adminKey);
    await page.goto(`${server.base}/console/#/cluster`);
    const alone = page.locator('#single-node');
    await alone.waitFor();
    assert.match(await alone.innerText(), /This node runs alone/);
    assert.match(await alone.innerText(), /durin serve without --etcd/);
    await page.locator('#health', { hasText: 'ok' }).waitFor();
    assert.equal(await page.locator('#cluster-shards').count(), 0);
    assert.equal(await page.locator('.live-note').isVisible(), false, 'nothing to refresh');
    assert.deepEqual(page.errors, []);

    const made = await api(server, server.adminKey, 'POST', '/v1/api-keys',
      { name: 'console-reader', role: 'read-only' });
    assert.equal(made.status, 201);
    const reader = await tab();
    await logIn(reader, server, made.body.secret);
    await reader.goto(`${server.base}/console/#/cluster`);
    const refused = reader.locator('#needs-admin');
    await refused.waitFor();
    assert.match(await refused.innerText(), /needs an admin key/);
    assert.match(await refused.innerText(), /forbidden: a key of role read-only/);
    assert.equal(await reader.locator('#single-node').count(), 0);
    await shot(reader, 'cluster-forbidden-light');
    assert.deepEqual(reader.errors, []);

    // Any other answer is shown as its code and message (a node cannot be
    // made to fail this read on demand, so the browser is given the answer).
    const failing = await tab();
    await logIn(failing, server, server.adminKey);
    await failing.route('**/v1/cluster', (route) => route.fulfill({
      status: 503, contentType: 'application/json',
      body: JSON.stringify({ code: 'storage-error', message: 'storage unavailable: the disk is full' }),
    }));
    await failing.goto(`${server.base}/console/#/cluster`);
    await failing.locator('p.error[role="alert"]', {
      hasText: 'Cannot read the cluster: storage-error: storage unavailable: the disk is full',
    }).waitFor();
    assert.equal(await failing.locator('#single-node').count(), 0);
  });
});

describe('themes and screenshots', () => {
  test('follows the system theme, and the toggle switches and is remembered', async () => {
    const dark = await tab({ colorScheme: 'dark' });
    await logIn(dark, server, server.adminKey);
    assert.equal(await dark.evaluate(() => document.documentElement.dataset.theme), 'dark');
    const background = () => dark.evaluate(() => getComputedStyle(document.body).backgroundColor);
    assert.equal(await background(), 'rgb(17, 20, 24)');
    await dark.locator('#theme-toggle').click();
    assert.equal(await dark.evaluate(() => document.documentElement.dataset.theme), 'light');
    assert.equal(await background(), 'rgb(246, 247, 249)');
    await dark.reload();
    await dark.locator('header.top nav').waitFor();
    assert.equal(await dark.evaluate(() => document.documentElement.dataset.theme), 'light');
    const light = await tab({ colorScheme: 'light' });
    await logIn(light, server, server.adminKey);
    assert.equal(await light.evaluate(() => document.documentElement.dataset.theme), 'light');
  });

  test('every page, light and dark, at 1280x800 and a phone\'s width', async () => {
    const flaky = await startRun(server, server.adminKey, 'acme.flaky', { failures: 1 });
    await finished(flaky.id);
    const notes = await startRun(server, server.adminKey, 'acme.order-notes', { orderId: 'SHOT-1', note: 'hello' });
    const screens = [
      ['runs', '#/runs', 'tr[data-row]'],
      ['run', `#/runs/${flaky.id}`, 'article.step'],
      ['hooks', '#/hooks?token=order:SHOT-1', '#hook-owner'],
      ['tasks', '#/tasks', '#task-stats .stat'],
      ['cluster', '#/cluster', '#single-node'],
    ];
    for (const colorScheme of ['light', 'dark']) {
      const page = await tab({ colorScheme });
      await page.goto(`${server.base}/console/`);
      await page.getByLabel('API key').waitFor();
      await shot(page, `login-${colorScheme}`);
      await logIn(page, server, server.adminKey);
      for (const [name, hash, ready] of screens) {
        await page.goto(`${server.base}/console/${hash}`);
        await page.locator(ready).first().waitFor();
        await shot(page, `${name}-${colorScheme}`);
      }
      assert.deepEqual(page.errors, []);
    }
    const phone = await tab({ viewport: { width: 390, height: 844 } });
    await logIn(phone, server, server.adminKey);
    for (const [name, hash, ready] of screens) {
      await phone.goto(`${server.base}/console/${hash}`);
      await phone.locator(ready).first().waitFor();
      const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - innerWidth);
      assert.ok(overflow <= 1, `${name} is ${overflow} px wider than a phone`);
      await shot(phone, `${name}-phone`);
    }
    assert.ok(notes.id);
  });
});
