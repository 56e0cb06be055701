// One HTTP exchange with a durin server, and the opt-in retry around it.
// Uses the platform's fetch; knows nothing about routes.

import { ConnectionError, DurinError, TimeoutError, UnavailableError, apiError } from "./errors.js";

export const defaultServer = "http://127.0.0.1:7070";
export const defaultTimeoutMs = 60_000;
// A Retry-After longer than this is not waited for in full.
const retryAfterMaxMs = 60_000;

function env(name) {
  const value = globalThis.process?.env?.[name];
  return value === undefined || value === "" ? undefined : value;
}

// Seconds from a Retry-After header (delta-seconds or an HTTP date).
export function parseRetryAfter(text, nowMs = Date.now()) {
  if (text === null || text === undefined || text === "") {
    return undefined;
  }
  if (/^\d+$/.test(text.trim())) {
    return Number(text.trim());
  }
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - nowMs) / 1000));
}

function retryPolicy(retry) {
  const policy = {
    attempts: 1,
    initialDelayMs: 500,
    maxDelayMs: 10_000,
    ...(retry ?? {}),
  };
  if (!Number.isInteger(policy.attempts) || policy.attempts < 1 || policy.attempts > 100) {
    throw new RangeError("retry.attempts must be an integer from 1 to 100");
  }
  return policy;
}

// The wait before try number `tried + 1`: doubling from initialDelayMs, at
// most maxDelayMs, ±20% jitter; at least the server's Retry-After (up to 60 s).
export function retryDelayMs(policy, tried, retryAfterSeconds, random = Math.random) {
  const base = Math.min(policy.maxDelayMs, policy.initialDelayMs * 2 ** (tried - 1));
  const jittered = Math.min(policy.maxDelayMs, base * (0.8 + 0.4 * random()));
  const told = retryAfterSeconds === undefined ? 0 : Math.min(retryAfterMaxMs, retryAfterSeconds * 1000);
  return Math.round(Math.max(jittered, told));
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

export class Transport {
  constructor(options = {}) {
    this.server = (options.server ?? env("DURIN_SERVER") ?? defaultServer).replace(/\/+$/, "");
    this.apiKey = options.apiKey ?? env("DURIN_API_KEY");
    this.timeoutMs = options.timeoutMs ?? defaultTimeoutMs;
    this.retry = retryPolicy(options.retry);
    this.headers = { ...(options.headers ?? {}) };
    this.fetch = options.fetch ?? globalThis.fetch;
    if (typeof this.fetch !== "function") {
      throw new TypeError("no fetch: pass options.fetch on platforms without a global fetch");
    }
  }

  // Sends one request, retried per the policy; the parsed JSON answer.
  // `options`: {query, body, idempotencyKey, idempotent, timeoutMs, signal,
  // retry}. `idempotent`: the body names the work itself (a message's
  // idempotencyKey, an update's updateId), so the request is as safe to
  // send again as a keyed one.
  async request(method, path, options = {}) {
    const policy = options.retry === undefined ? this.retry : retryPolicy(options.retry);
    const safe = method === "GET" || options.idempotencyKey !== undefined || options.idempotent === true;
    for (let tried = 1; ; ++tried) {
      try {
        return await this.once(method, path, options);
      } catch (error) {
        if (tried >= policy.attempts || !retryable(error, safe)) {
          throw error;
        }
        await sleep(retryDelayMs(policy, tried, error.retryAfter), options.signal);
      }
    }
  }

  async once(method, path, options) {
    let url = this.server + path;
    if (options.query) {
      const query = new URLSearchParams();
      for (const [name, value] of Object.entries(options.query)) {
        if (value !== undefined && value !== null) {
          query.set(name, String(value));
        }
      }
      const text = query.toString();
      if (text !== "") {
        url += "?" + text;
      }
    }
    const headers = { accept: "application/json", ...this.headers };
    if (this.apiKey !== undefined) {
      headers.authorization = "Bearer " + this.apiKey;
    }
    let body;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    if (options.idempotencyKey !== undefined) {
      headers["idempotency-key"] = options.idempotencyKey;
    }
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, timeoutMs);
    const outer = options.signal;
    const onAbort = () => controller.abort(outer.reason);
    if (outer?.aborted) {
      onAbort();
    } else {
      outer?.addEventListener("abort", onAbort, { once: true });
    }
    const details = { method, path };
    try {
      let response;
      let text;
      try {
        response = await this.fetch(url, { method, headers, body, signal: controller.signal });
        text = await response.text();
      } catch (error) {
        if (timedOut) {
          throw new TimeoutError(`${method} ${path}: no answer within ${timeoutMs} ms`, { cause: error });
        }
        if (outer?.aborted) {
          throw outer.reason ?? error;
        }
        const code = error?.cause?.code ?? error?.code;
        const connection = new ConnectionError(
          `${method} ${path}: no answer from ${this.server}` + (code ? ` (${code})` : ""),
          { cause: error },
        );
        connection.refused = code === "ECONNREFUSED";
        throw connection;
      }
      let parsed;
      if (text !== "") {
        try {
          parsed = JSON.parse(text);
        } catch {
          parsed = undefined;
        }
      }
      if (response.status >= 200 && response.status < 300) {
        if (parsed === undefined && text !== "") {
          throw new DurinError(`${method} ${path}: the answer is not JSON`);
        }
        return parsed ?? {};
      }
      throw apiError(response.status, parsed, parseRetryAfter(response.headers.get("retry-after")), details);
    } finally {
      clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
    }
  }
}

// Only what may not have reached the server, or may answer differently
// later: no answer, or 503. A request that is neither a GET nor keyed is
// retried only when its connection was refused (it was never sent).
function retryable(error, safe) {
  if (ConnectionError.is(error)) {
    return safe || error.refused === true;
  }
  return safe && (TimeoutError.is(error) || UnavailableError.is(error));
}
