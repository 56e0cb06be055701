// What `npm pack` makes is a package that works as installed, with no build:
// its files, its types, and an import by name from a fresh project that
// talks to a real server. The error brand works across the two copies (the
// packed one and this checkout's).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";

import { NotFoundError, DurinApiError } from "../src/index.js";
import { startServer } from "./support/server.js";

const run = promisify(execFile);
const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
let server;
let project;
let installed;

before(async () => {
  server = await startServer();
  project = mkdtempSync(join(tmpdir(), "durin-ts-pack-"));
  const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", project], { cwd: root });
  const [packed] = JSON.parse(stdout);
  installed = join(project, "node_modules", "@durin", "client");
  mkdirSync(installed, { recursive: true });
  await run("tar", ["-xzf", join(project, packed.filename), "-C", installed, "--strip-components=1"]);
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "app", type: "module", private: true }));
  installed = { dir: installed, files: packed.files.map((file) => file.path) };
});

after(async () => {
  await server?.stop();
  if (project) {
    rmSync(project, { recursive: true, force: true });
  }
});

test("the tarball holds the sources, types and README, and no tests", () => {
  for (const file of ["package.json", "README.md", "src/index.js", "src/index.d.ts", "src/client.js", "src/errors.js", "src/http.js", "src/worker.js"]) {
    assert.ok(installed.files.includes(file), `${file} in ${installed.files}`);
  }
  assert.ok(!installed.files.some((file) => file.startsWith("test/")));
  const manifest = JSON.parse(readFileSync(join(installed.dir, "package.json"), "utf8"));
  assert.equal(manifest.name, "@durin/client");
  assert.equal(manifest.type, "module");
  assert.equal(manifest.exports["."].types, "./src/index.d.ts");
  assert.deepEqual(manifest.dependencies ?? {}, {});
  assert.ok(existsSync(join(installed.dir, manifest.exports["."].types)));
});

test("an app imports it by name and uses it against the server", async () => {
  writeFileSync(
    join(project, "app.js"),
    `import { Durin, NotFoundError } from "@durin/client";
const durin = new Durin();
const run = await durin.runs.start({ flow: "acme.review-order", input: { orderId: "P-1" }, idempotencyKey: "pack-P-1" });
let missing = "";
try { await durin.runs.get("run_missing"); } catch (err) { if (NotFoundError.is(err)) missing = err.code; }
console.log(run.status, missing);
`,
  );
  const { stdout } = await run(process.execPath, ["app.js"], {
    cwd: project,
    env: { ...process.env, DURIN_SERVER: server.url, DURIN_API_KEY: server.apiKey },
  });
  assert.equal(stdout, "completed run-not-found\n");
});

test("is() recognises an error of the other copy of the package, where instanceof cannot", async () => {
  const other = await import(pathToFileURL(join(installed.dir, "src", "index.js")).href);
  assert.notEqual(other.NotFoundError, NotFoundError);
  const durin = new other.Durin({ server: server.url, apiKey: server.apiKey });
  let error;
  try {
    await durin.runs.get("run_missing");
  } catch (caught) {
    error = caught;
  }
  assert.ok(!(error instanceof NotFoundError));
  assert.ok(NotFoundError.is(error));
  assert.ok(DurinApiError.is(error));
  assert.ok(other.NotFoundError.is(new NotFoundError(404, { code: "run-not-found", message: "m" })));
  assert.ok(!other.ConflictError.is(error));
});
