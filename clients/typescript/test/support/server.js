// Starts a real `durin serve` for a test file: a fresh data dir, 127.0.0.1
// port 0, the address read from its "listening on HOST:PORT" line, the admin
// key from DATA_DIR/admin.key. stop() ends it by its pid and removes the dir.
// The binary: $DURIN_BIN, else build/bin/durin of this checkout.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const durinBin = process.env.DURIN_BIN ?? resolve(here, "../../../../build/bin/durin");

export async function startServer({ env = {} } = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), "durin-ts-"));
  const child = spawn(durinBin, ["serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0"], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const address = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`durin serve did not listen within 10 s:\n${output}`)), 10_000);
    const onData = (chunk) => {
      output += chunk;
      const found = /listening on ([0-9.]+):(\d+)/.exec(output);
      if (found) {
        clearTimeout(timer);
        resolve(`http://${found[1]}:${found[2]}`);
      }
    };
    child.stdout.setEncoding("utf8").on("data", onData);
    child.stderr.setEncoding("utf8").on("data", onData);
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`durin serve exited (${code ?? signal}) before listening:\n${output}`));
    });
  });
  const apiKey = readFileSync(join(dataDir, "admin.key"), "utf8").trim();
  return {
    url: address,
    apiKey,
    dataDir,
    pid: child.pid,
    output: () => output,
    async stop() {
      try {
        process.kill(child.pid, "SIGTERM");
      } catch {
        // already gone
      }
      const timer = setTimeout(() => {
        try {
          process.kill(child.pid, "SIGKILL");
        } catch {
          // gone meanwhile
        }
      }, 10_000);
      const ended = await exited;
      clearTimeout(timer);
      rmSync(dataDir, { recursive: true, force: true });
      return ended;
    },
  };
}

// Polls `check` until it returns a truthy value; throws after `timeoutMs`.
export async function eventually(check, { timeoutMs = 10_000, intervalMs = 20 } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error("condition not met within " + timeoutMs + " ms");
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

// The error `promise` is refused with; fails the test when it resolves.
export async function refusal(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  assert.fail("expected the call to be refused");
}
