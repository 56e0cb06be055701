// Durin: the client of one durin server's HTTP API (README.md, "HTTP API").
// Each method is one route; answers are the server's JSON as it sent it.
// Every mutating call takes `idempotencyKey`, sent as Idempotency-Key.

import { TimeoutError } from "./errors.js";
import { Transport } from "./http.js";
import { Worker } from "./worker.js";

const seg = (value) => {
  if (typeof value !== "string" || value === "") {
    throw new TypeError("an id or token must be a non-empty string");
  }
  return encodeURIComponent(value);
};

// Copies the fields of `source` named in `names` that are not undefined.
function pick(source, names) {
  const out = {};
  for (const name of names) {
    if (source[name] !== undefined) {
      out[name] = source[name];
    }
  }
  return out;
}

const finished = new Set(["completed", "failed", "cancelled"]);

// runs.list's answer: awaited, the first page ({runs, nextCursor}); iterated
// with for await, every run of every page, following nextCursor.
class RunList {
  constructor(transport, params) {
    this.transport = transport;
    this.params = params;
    this.first = undefined;
  }

  page(cursor) {
    const { status, flow, limit, signal, timeoutMs } = this.params;
    return this.transport.request("GET", "/v1/runs", {
      query: { status, flow, limit, cursor },
      signal,
      timeoutMs,
    });
  }

  then(onFulfilled, onRejected) {
    this.first ??= this.page(this.params.cursor);
    return this.first.then(onFulfilled, onRejected);
  }

  catch(onRejected) {
    return this.then(undefined, onRejected);
  }

  finally(onFinally) {
    return this.then(undefined, undefined).finally(onFinally);
  }

  async *pages() {
    let cursor = this.params.cursor;
    for (;;) {
      const page = await this.page(cursor);
      yield page;
      if (page.nextCursor === null || page.nextCursor === undefined || page.nextCursor === "") {
        return;
      }
      cursor = page.nextCursor;
    }
  }

  async *[Symbol.asyncIterator]() {
    for await (const page of this.pages()) {
      yield* page.runs;
    }
  }
}

class Runs {
  constructor(transport) {
    this.transport = transport;
  }

  start(params) {
    if (typeof params?.flow !== "string" || params.flow === "") {
      throw new TypeError("runs.start: flow must be a non-empty string");
    }
    const body = pick(params, ["flow", "input", "wait", "hook", "instanceId", "onDuplicate", "commandId"]);
    return this.transport.request("POST", "/v1/runs", { ...requestOptions(params), body });
  }

  get(id, options = {}) {
    return this.transport.request("GET", `/v1/runs/${seg(id)}`, requestOptions(options));
  }

  list(params = {}) {
    return new RunList(this.transport, params);
  }

  history(id, options = {}) {
    return this.transport.request("GET", `/v1/runs/${seg(id)}/history`, requestOptions(options));
  }

  cancel(id, options = {}) {
    const body = pick(options, ["reason", "commandId"]);
    return this.transport.request("POST", `/v1/runs/${seg(id)}/cancel`, { ...requestOptions(options), body });
  }

  // Polls the run until it completed, failed or was cancelled; TimeoutError
  // after `timeoutMs` (default 60 s). The interval grows from 50 ms to 1 s.
  async wait(id, options = {}) {
    const timeoutMs = options.timeoutMs ?? 60_000;
    const deadline = Date.now() + timeoutMs;
    let intervalMs = 50;
    for (;;) {
      const left = deadline - Date.now();
      const run = await this.get(id, { signal: options.signal, timeoutMs: Math.max(1, Math.min(left, 30_000)) });
      if (finished.has(run.status)) {
        return run;
      }
      if (Date.now() + intervalMs > deadline) {
        const error = new TimeoutError(`run ${id} did not finish within ${timeoutMs} ms (it is ${run.status})`);
        error.run = run;
        throw error;
      }
      await new Promise((resolve) => setTimeout(resolve, intervalMs));
      intervalMs = Math.min(1_000, intervalMs * 2);
    }
  }
}

class Hooks {
  constructor(transport) {
    this.transport = transport;
  }

  get(token, options = {}) {
    return this.transport.request("GET", `/v1/hooks/${seg(token)}`, requestOptions(options));
  }

  resume(token, payload, options = {}) {
    const body = { payload: payload === undefined ? null : payload, ...pick(options, ["commandId"]) };
    return this.transport.request("POST", `/v1/hooks/${seg(token)}/resume`, { ...requestOptions(options), body });
  }
}

class Instances {
  constructor(transport) {
    this.transport = transport;
  }

  get(id, options = {}) {
    return this.transport.request("GET", `/v1/instances/${seg(id)}`, requestOptions(options));
  }
}

class ApiKeys {
  constructor(transport) {
    this.transport = transport;
  }

  create(params = {}) {
    const body = pick(params, ["name"]);
    return this.transport.request("POST", "/v1/api-keys", { ...requestOptions(params), body });
  }

  async list(options = {}) {
    const answer = await this.transport.request("GET", "/v1/api-keys", requestOptions(options));
    return answer.apiKeys;
  }

  revoke(id, options = {}) {
    return this.transport.request("DELETE", `/v1/api-keys/${seg(id)}`, requestOptions(options));
  }
}

class Tenants {
  constructor(transport) {
    this.transport = transport;
  }

  create(params) {
    const body = pick(params ?? {}, ["name"]);
    return this.transport.request("POST", "/v1/tenants", { ...requestOptions(params ?? {}), body });
  }
}

function requestOptions(options) {
  return pick(options, ["idempotencyKey", "timeoutMs", "signal", "retry"]);
}

export class Durin {
  constructor(options = {}) {
    this.transport = new Transport(options);
    this.runs = new Runs(this.transport);
    this.hooks = new Hooks(this.transport);
    this.instances = new Instances(this.transport);
    this.apiKeys = new ApiKeys(this.transport);
    this.tenants = new Tenants(this.transport);
  }

  get server() {
    return this.transport.server;
  }

  // Starts a worker on `options.queue` at once; see worker.js.
  worker(options) {
    const worker = new Worker(this.transport, options);
    worker.start();
    return worker;
  }
}
