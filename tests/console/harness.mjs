// The console tests' real parts: a `durin serve` process on 127.0.0.1 port
// 0 with its own data dir, `durin worker` processes, and Debian's headless
// Chromium driven by playwright-core (never a browser download). Every
// process started here is stopped by its pid.
//
// Environment: DURIN_BIN (the durin executable; default ../../build/bin/durin),
// CHROMIUM_PATH (default /usr/bin/chromium), DURIN_CONSOLE_SHOTS (where
// screenshots go; default a temporary directory).
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
export const durinBin = resolve(process.env.DURIN_BIN ?? join(here, '../../build/bin/durin'));
export const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
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
export async function startServer(env = {}) {
  if (!existsSync(durinBin)) throw new Error(`no durin executable at ${durinBin} (set DURIN_BIN)`);
  const dataDir = mkdtempSync(join(tmpdir(), 'durin-console-data-'));
  const child = spawn(durinBin, ['serve', '--data-dir', dataDir, '--listen', '127.0.0.1:0'], {
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
  const base = await listening;
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
