// The console tests' real parts: a `durin serve` process on 127.0.0.1 port
// 0 with its own data dir, `durin worker` processes, a single-member etcd
// with cluster nodes (`durin serve --etcd`), and Debian's headless Chromium
// driven by playwright-core (never a browser download). Every process
// started here is stopped by its pid.
//
// Environment: DURIN_BIN (the durin executable; default ../../build/bin/durin),
// CHROMIUM_PATH (default /usr/bin/chromium), ETCD_PATH (default
// /usr/bin/etcd), DURIN_CONSOLE_SHOTS (where screenshots go; default a
// temporary directory).
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
export const durinBin = resolve(process.env.DURIN_BIN ?? join(here, '../../build/bin/durin'));
export const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const etcdPath = process.env.ETCD_PATH ?? '/usr/bin/etcd';
export const shotsDir = process.env.DURIN_CONSOLE_SHOTS ??
  mkdtempSync(join(tmpdir(), 'durin-console-shots-'));

// Waits until `exited` resolves or `ms` pass; true when it exited.
async function exitedWithin(exited, ms) {
  let timer;
  const late = new Promise((done) => { timer = setTimeout(() => done(false), ms); });
  const answer = await Promise.race([exited.then(() => true), late]);
  clearTimeout(timer);
  return answer;
}

// Stops the child by its pid: SIGTERM, then SIGKILL after 10 s.
async function stopChild(child, exited) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  process.kill(child.pid, 'SIGTERM');
  if (!(await exitedWithin(exited, 10_000))) {
    process.kill(child.pid, 'SIGKILL');
    await exited;
  }
}

// A running `durin serve`: { base, adminKey, dataDir, pid, stop() }.
export function startServer(env = {}) {
  return serve([], env);
}

// `durin serve` with `flags` after its data dir and listen address; answers
// once it listens and its admin key is written.
async function serve(flags, env = {}) {
  if (!existsSync(durinBin)) throw new Error(`no durin executable at ${durinBin} (set DURIN_BIN)`);
  const dataDir = mkdtempSync(join(tmpdir(), 'durin-console-data-'));
  const child = spawn(durinBin,
    ['serve', '--data-dir', dataDir, '--listen', '127.0.0.1:0', ...flags], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  const exited = new Promise((done) => child.once('exit', done));
  let output = '';
  const listening = new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`durin serve did not listen:\n${output}`)), 20_000);
    const read = (chunk) => {
      output += chunk;
      const match = /listening on ([0-9.]+):(\d+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        done(`http://${match[1]}:${match[2]}`);
      }
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    exited.then((code) => {
      clearTimeout(timer);
      fail(new Error(`durin serve exited (${code}):\n${output}`));
    });
  });
  let base;
  try {
    base = await listening;
  } catch (e) {
    await stopChild(child, exited);
    rmSync(dataDir, { recursive: true, force: true });
    throw e;
  }
  const adminKey = readFileSync(join(dataDir, 'admin.key'), 'utf8').trim();
  return {
    base,
    adminKey,
    dataDir,
    pid: child.pid,
    output: () => output,
    async stop() {
      await stopChild(child, exited);
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

// A port nothing listens on now: bound to 0 on 127.0.0.1, read back, freed.
function freePort() {
  return new Promise((done, fail) => {
    const probe = createServer();
    probe.once('error', fail);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => done(port));
    });
  });
}

// Asks etcd at `url` whether it has a leader (it answers before it has
// elected itself, and writes need one).
async function etcdHasLeader(url) {
  try {
    const response = await fetch(`${url}/v3/maintenance/status`, {
      method: 'POST', body: '{}', signal: AbortSignal.timeout(500),
    });
    if (!response.ok) return false;
    const leader = (await response.json()).leader;
    return typeof leader === 'string' && leader !== '0';
  } catch {
    return false;
  }
}

// A single-member etcd (/usr/bin/etcd, Debian's etcd-server) on two ports
// that were free, with fast elections (heartbeat 100 ms, election timeout
// 1 s, so leases of 2 s work), its data and log in a temporary directory:
// { url, pid, stop() }, once it has a leader. A port taken before etcd
// binds it: new ports, at most 5 times.
export async function startEtcd() {
  if (!existsSync(etcdPath)) {
    throw new Error(`no etcd at ${etcdPath}: scripts/install-deps installs etcd-server`);
  }
  let log = '';
  for (let attempt = 0; attempt < 5; ++attempt) {
    const dir = mkdtempSync(join(tmpdir(), 'durin-console-etcd-'));
    const url = `http://127.0.0.1:${await freePort()}`;
    const peer = `http://127.0.0.1:${await freePort()}`;
    const child = spawn(etcdPath, [
      '--name', 'n1', '--data-dir', join(dir, 'data'),
      '--listen-client-urls', url, '--advertise-client-urls', url,
      '--listen-peer-urls', peer, '--initial-advertise-peer-urls', peer,
      '--initial-cluster', `n1=${peer}`, '--initial-cluster-state', 'new',
      '--initial-cluster-token', 'durin-console-test',
      '--heartbeat-interval', '100', '--election-timeout', '1000',
    ], { stdio: ['ignore', 'ignore', 'pipe'] });
    const exited = new Promise((done) => child.once('exit', done));
    log = '';
    child.stderr.on('data', (chunk) => { log = (log + chunk).slice(-4000); });
    const stop = async () => {
      await stopChild(child, exited);
      rmSync(dir, { recursive: true, force: true });
    };
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline && child.exitCode === null && child.signalCode === null) {
      if (await etcdHasLeader(url)) return { url, pid: child.pid, stop };
      await new Promise((done) => setTimeout(done, 50));
    }
    await stop();
  }
  throw new Error(`etcd did not come up; its log ends:\n${log}`);
}

// Runs `durin ARGS...` to its end; throws unless it exits 0.
export function runDurin(args) {
  return new Promise((done, fail) => {
    execFile(durinBin, args, { timeout: 30_000 }, (error, stdout, stderr) => {
      if (error) {
        fail(new Error(`durin ${args.join(' ')}: ${error.message}\n${stdout}${stderr}`));
      } else {
        done(stdout);
      }
    });
  });
}

// A node of cluster `cluster` in etcd at `etcd.url`: `durin serve --etcd`
// with id `nodeId`, HTTP and peer ports picked by the kernel, and a node
// lease of 2 s. Answers as startServer does (its admin key is the
// cluster's).
export function startClusterNode(etcd, cluster, nodeId) {
  return serve(['--etcd', etcd.url, '--cluster', cluster, '--node-id', nodeId,
    '--peer-listen', '127.0.0.1:0', '--lease-ttl-s', '2']);
}

// A `durin worker` polling `queue` of the server: { pid, stop() }.
export function startWorker(server, queue, key = server.adminKey) {
  const child = spawn(durinBin, ['worker', '--queue', queue, '--server', server.base, '--api-key', key], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise((done) => child.once('exit', done));
  return { pid: child.pid, stop: () => stopChild(child, exited) };
}

// Calls the node's API with `key`; answers { status, body }.
export async function api(server, key, method, path, body, headers = {}) {
  const response = await fetch(`${server.base}${path}`, {
    method,
    headers: {
      Authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

// Starts a run and answers it (throws unless the API admitted it).
export async function startRun(server, key, flow, input, extra = {}) {
  const answer = await api(server, key, 'POST', '/v1/runs', { flow, input, ...extra });
  if (answer.status !== 200 && answer.status !== 202) {
    throw new Error(`start ${flow}: ${answer.status} ${JSON.stringify(answer.body)}`);
  }
  return answer.body;
}

// Polls `check` until it answers something truthy, at most `ms`.
export async function until(check, ms = 15_000, what = 'the condition') {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((done) => setTimeout(done, 50));
  }
}

export async function launchBrowser() {
  if (!existsSync(chromiumPath)) {
    // Fail, never skip: a skipped browser test would pass without testing.
    throw new Error(`no Chromium at ${chromiumPath}: scripts/install-deps installs Debian's chromium`);
  }
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    chromiumSandbox: false,  // root in a container: --no-sandbox
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
}

// A fresh tab (its own sessionStorage) at 1280x800 unless told otherwise.
// Page errors fail the test that reads `page.errors`.
export async function newPage(browser, options = {}) {
  const context = await browser.newContext({
    viewport: options.viewport ?? { width: 1280, height: 800 },
    colorScheme: options.colorScheme ?? 'light',
    deviceScaleFactor: 1,
  });
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (error) => page.errors.push(error.message));
  page.on('console', (message) => {
    if (message.type() === 'error' && !/Failed to load resource/.test(message.text())) {
      page.errors.push(message.text());
    }
  });
  page.setDefaultTimeout(15_000);
  return page;
}

// Logs in through the login form, as a user would.
export async function logIn(page, server, key) {
  await page.goto(`${server.base}/console/`);
  await page.getByLabel('API key').fill(key);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.locator('header.top nav').waitFor();
}

export async function shot(page, name, { fullPage = false } = {}) {
  mkdirSync(shotsDir, { recursive: true });
  const path = join(shotsDir, `${name}.png`);
  await page.screenshot({ path, fullPage });
  return path;
}
