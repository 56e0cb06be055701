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

const finished = new Set(["completed", "failed", "cancelled", "terminated"]);

// A paged list's answer (runs.list, schedules.list): awaited, the first page
// ({<items>, nextCursor}); iterated with for await, every item of every
// page, following nextCursor.
class PagedList {
  constructor(transport, path, items, query, params) {
    this.transport = transport;
    this.path = path;
    this.items = items;
    this.query = query;
    this.params = params;
    this.first = undefined;
  }

  page(cursor) {
    const { signal, timeoutMs, retry } = this.params;
    return this.transport.request("GET", this.path, {
      query: { ...this.query, cursor },
      signal,
      timeoutMs,
      retry,
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
      yield* page[this.items];
    }
  }
}

// POST .../messages/{name}: the message's idempotencyKey travels in the body
// (recorded once per run, or instance, and name), not as Idempotency-Key;
// with it the request is safe to retry.
function sendMessage(transport, path, payload, options, extra) {
  const body = pick({ payload, ...options }, ["payload", "idempotencyKey", ...extra]);
  return transport.request("POST", path, { ...callOptions(options), body, idempotent: body.idempotencyKey !== undefined });
}

class Runs {
  constructor(transport) {
    this.transport = transport;
  }

  start(params) {
    if (typeof params?.flow !== "string" || params.flow === "") {
      throw new TypeError("runs.start: flow must be a non-empty string");
    }
    const body = pick(params, ["flow", "input", "wait", "hook", "instanceId", "onDuplicate", "commandId", "memo", "searchAttributes"]);
    return this.transport.request("POST", "/v1/runs", { ...requestOptions(params), body });
  }

  get(id, options = {}) {
    return this.transport.request("GET", `/v1/runs/${seg(id)}`, requestOptions(options));
  }

  list(params = {}) {
    const { status, flow, scheduleId, query, limit } = params;
    return new PagedList(this.transport, "/v1/runs", "runs", { status, flow, scheduleId, query, limit }, params);
  }

  history(id, options = {}) {
    return this.transport.request("GET", `/v1/runs/${seg(id)}/history`, requestOptions(options));
  }

  cancel(id, options = {}) {
    const body = pick(options, ["reason", "commandId"]);
    return this.transport.request("POST", `/v1/runs/${seg(id)}/cancel`, { ...requestOptions(options), body });
  }

  // A forced stop: the run ends as terminated at once, running none of its
  // code. A repeated commandId answers the terminated run again.
  terminate(id, options = {}) {
    const body = pick(options, ["reason", "commandId"]);
    return this.transport.request("POST", `/v1/runs/${seg(id)}/terminate`, { ...requestOptions(options), body });
  }

  // Records message `name` in the run's history: {runId, sequence, started}
  // once durable. A repeated idempotencyKey records nothing and answers as
  // the first.
  sendMessage(id, name, payload, options = {}) {
    return sendMessage(this.transport, `/v1/runs/${seg(id)}/messages/${seg(name)}`, payload, options, []);
  }

  // An update: validated by the flow (UpdateRejectedError), recorded, then
  // completed by flow code. Answers {runId, updateId, sequence, status,
  // result}: by default once completed (status "completed", or "accepted"
  // after 25 s), with waitFor "accepted" once accepted. A repeated updateId
  // answers the first update's handle or result.
  update(id, name, args, options = {}) {
    const body = pick({ args, ...options }, ["args", "updateId", "waitFor"]);
    return this.transport.request("POST", `/v1/runs/${seg(id)}/updates/${seg(name)}`, {
      ...callOptions(options),
      body,
      idempotent: body.updateId !== undefined,
    });
  }

  // Reads the flow's state now: {runId, query, result}; records nothing.
  // `args` (any JSON) is sent as ?args=JSON.
  query(id, name, args, options = {}) {
    return this.transport.request("GET", `/v1/runs/${seg(id)}/queries/${seg(name)}`, {
      ...callOptions(options),
      query: args === undefined ? undefined : { args: JSON.stringify(args) },
    });
  }

  // Waits until the run completed, failed, was cancelled or terminated, by long polls of
  // the server (GET /v1/runs/{id}?waitMs=, at most 25 s each: it answers as the run ends);
  // TimeoutError after `timeoutMs` (default 60 s).
  async wait(id, options = {}) {
    const timeoutMs = options.timeoutMs ?? 60_000;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const asked = Date.now();
      const waitMs = Math.max(0, Math.min(deadline - asked, 25_000));
      const run = await this.transport.request("GET", `/v1/runs/${seg(id)}`, {
        signal: options.signal,
        timeoutMs: waitMs + 10_000,
        query: { waitMs: String(waitMs) },
      });
      if (finished.has(run.status)) {
        return run;
      }
      if (Date.now() >= deadline) {
        const error = new TimeoutError(`run ${id} did not finish within ${timeoutMs} ms (it is ${run.status})`);
        error.run = run;
        throw error;
      }
      if (Date.now() - asked < 50) {
        await new Promise((resolve) => setTimeout(resolve, 50)); // a node answering at once (draining)
      }
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

  // A message to the active run holding the instance (NotFoundError when
  // none); keys are per instance and name. With `start: {flow, input}`
  // (message-with-start) a run is started for the instance when none holds
  // it, the message its first event (`started: true`).
  sendMessage(id, name, payload, options = {}) {
    if (options.start !== undefined && (typeof options.start?.flow !== "string" || options.start.flow === "")) {
      throw new TypeError("instances.sendMessage: start.flow must be a non-empty string");
    }
    return sendMessage(this.transport, `/v1/instances/${seg(id)}/messages/${seg(name)}`, payload, options, ["start"]);
  }
}

// RFC 3339 text for a backfill's bounds: a Date or a string as given.
function timeText(value, field) {
  if (value instanceof Date) {
    return value.toISOString();
  }
  if (typeof value !== "string" || value === "") {
    throw new TypeError(`schedules.backfill: ${field} must be a Date or an RFC 3339 string`);
  }
  return value;
}

class Schedules {
  constructor(transport) {
    this.transport = transport;
  }

  // 201 with the schedule (`created: true`); the same definition again
  // answers it as it is (`created: false`); another one for the id is
  // ScheduleExistsError.
  create(params) {
    if (typeof params?.scheduleId !== "string" || params.scheduleId === "") {
      throw new TypeError("schedules.create: scheduleId must be a non-empty string");
    }
    const body = pick(params, ["scheduleId", "spec", "action", "overlap", "catchupWindow", "paused", "note"]);
    return this.transport.request("POST", "/v1/schedules", { ...requestOptions(params), body });
  }

  get(id, options = {}) {
    return this.transport.request("GET", `/v1/schedules/${seg(id)}`, requestOptions(options));
  }

  list(params = {}) {
    return new PagedList(this.transport, "/v1/schedules", "schedules", { limit: params.limit }, params);
  }

  // {scheduleId, deleted: true}; the runs it started stay.
  delete(id, options = {}) {
    return this.transport.request("DELETE", `/v1/schedules/${seg(id)}`, requestOptions(options));
  }

  pause(id, options = {}) {
    return this.change(id, "pause", pick(options, ["note"]), options);
  }

  // Goes on from the next occurrence after now (paused ones are not caught up).
  unpause(id, options = {}) {
    return this.change(id, "unpause", pick(options, ["note"]), options);
  }

  // One occurrence at now, fired under the overlap policy (also while
  // paused): {scheduleId, occurrence}.
  trigger(id, options = {}) {
    return this.change(id, "trigger", undefined, options);
  }

  // Every occurrence of the spec in [startAt, endAt], fired in order under
  // the overlap policy: {scheduleId, occurrences}.
  backfill(id, params) {
    const body = { startAt: timeText(params?.startAt, "startAt"), endAt: timeText(params?.endAt, "endAt") };
    return this.change(id, "backfill", body, params);
  }

  change(id, verb, body, options) {
    return this.transport.request("POST", `/v1/schedules/${seg(id)}/${verb}`, { ...requestOptions(options), body });
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

// The options of a call whose key, if any, is in its body.
function callOptions(options) {
  return pick(options, ["timeoutMs", "signal", "retry"]);
}

export class Durin {
  constructor(options = {}) {
    this.transport = new Transport(options);
    this.runs = new Runs(this.transport);
    this.hooks = new Hooks(this.transport);
    this.instances = new Instances(this.transport);
    this.apiKeys = new ApiKeys(this.transport);
    this.tenants = new Tenants(this.transport);
    this.schedules = new Schedules(this.transport);
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
