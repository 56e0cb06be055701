// The console's only way to the node: the JSON API, called with the user's
// API key. The key lives in sessionStorage (this tab only, gone when it
// closes); it is never put in a cookie or a URL, and is sent only as
// `Authorization: Bearer`. A 401 forgets it and sends the user to the login.

const keyName = 'durin.apiKey';

export function apiKey() {
  return sessionStorage.getItem(keyName);
}

export function setApiKey(key) {
  sessionStorage.setItem(keyName, key);
}

export function forgetApiKey() {
  sessionStorage.removeItem(keyName);
}

export class ApiError extends Error {
  constructor(status, code, message, body) {
    super(message || code || `HTTP ${status}`);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

// A fresh idempotency key for one user action (a confirmed cancel, one
// resume): a retry of the same action reuses it.
export function newIdempotencyKey(action) {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  return `console-${action}-${hex}`;
}

// Calls `method path` and answers the parsed JSON body; throws ApiError
// for an error answer (with the API's code) or a transport failure.
export async function call(method, path, { body, idempotencyKey, key } = {}) {
  const secret = key ?? apiKey();
  const headers = { Accept: 'application/json' };
  if (secret) headers.Authorization = `Bearer ${secret}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (idempotencyKey) headers['Idempotency-Key'] = idempotencyKey;
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit',
    });
  } catch (e) {
    throw new ApiError(0, 'network', `the node did not answer: ${e.message}`);
  }
  const text = await response.text();
  let parsed = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = { message: text };
    }
  }
  if (!response.ok) {
    if (response.status === 401 && key === undefined) {
      forgetApiKey();
      window.dispatchEvent(new CustomEvent('durin:unauthorized'));
    }
    throw new ApiError(response.status, parsed?.code, parsed?.message, parsed);
  }
  return parsed;
}

function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') {
      search.set(name, String(value));
    }
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}

const segment = encodeURIComponent;

export const api = {
  listRuns: (filter) => call('GET', `/v1/runs${query(filter)}`),
  runCounts: (flow) => call('GET', `/v1/run-counts${query({ flow })}`),
  getRun: (id) => call('GET', `/v1/runs/${segment(id)}`),
  history: (id, after, limit) =>
    call('GET', `/v1/runs/${segment(id)}/history${query({ after, limit })}`),
  cancelRun: (id, reason, idempotencyKey) =>
    call('POST', `/v1/runs/${segment(id)}/cancel`,
      { body: reason ? { reason } : {}, idempotencyKey }),
  getInstance: (id) => call('GET', `/v1/instances/${segment(id)}`),
  getHook: (token) => call('GET', `/v1/hooks/${segment(token)}`),
  resumeHook: (token, payload, idempotencyKey) =>
    call('POST', `/v1/hooks/${segment(token)}/resume`,
      { body: { payload }, idempotencyKey }),
  tasks: () => call('GET', '/v1/tasks'),
  runTasks: (id) => call('GET', `/v1/tasks${query({ runId: id })}`),
  cluster: () => call('GET', '/v1/cluster'),
};
