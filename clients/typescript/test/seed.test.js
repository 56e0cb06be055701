// The seed's "Retry a start safely", rewritten for durin
// (examples/retry-a-start.js), run as a user would against a real server:
// it must print exactly what the seed prints.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { startServer } from "./support/server.js";

const example = resolve(dirname(fileURLToPath(import.meta.url)), "../examples/retry-a-start.js");
let server;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

test("the retried start is the same run, the changed body a conflict with the server's message", async () => {
  const { stdout } = await promisify(execFile)(process.execPath, [example], {
    env: { ...process.env, DURIN_SERVER: server.url, DURIN_API_KEY: server.apiKey },
  });
  assert.equal(
    stdout,
    "true completed\n" +
      "conflict Idempotency-Key was reused with a different request body. Use a fresh key or the original body.\n",
  );
});

test("the README's Clients section shows this very example", () => {
  const readme = readFileSync(resolve(dirname(example), "../../../README.md"), "utf8");
  const code = readFileSync(example, "utf8");
  const shown = code.slice(code.indexOf("import "));
  assert.ok(readme.includes("```ts\n" + shown + "```"), "README.md's Clients example differs from " + example);
});
