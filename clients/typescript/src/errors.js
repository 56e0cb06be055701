// The errors of @durin/client. Every error the client throws is a DurinError:
// a DurinApiError when the server answered with an error ({code, message}),
// a ConnectionError or TimeoutError when no answer came. Workers' step code
// throws FatalError or RetryableError to choose what durin does next.
//
// `instanceof` fails when two copies of the package are loaded (a bundle and
// a dependency's copy, say), so every class has a static `is(value)` that
// checks a brand: the list of class kinds stored under a registry symbol,
// which every copy of the package reads the same.

const brand = Symbol.for("@durin/client.error-kinds");

function mark(error, kinds) {
  Object.defineProperty(error, brand, { value: kinds, enumerable: false });
}

function kindsOf(value) {
  if (value === null || (typeof value !== "object" && typeof value !== "function")) {
    return undefined;
  }
  const kinds = value[brand];
  return Array.isArray(kinds) ? kinds : undefined;
}

// The kinds of a class and its ancestors up to DurinError, most derived first.
function chainOf(constructor) {
  const kinds = [];
  for (let c = constructor; c && c !== Function.prototype; c = Object.getPrototypeOf(c)) {
    if (Object.hasOwn(c, "kind")) {
      kinds.push(c.kind);
    }
  }
  return kinds;
}

export class DurinError extends Error {
  static kind = "DurinError";

  constructor(message, options) {
    super(message, options);
    this.name = new.target.kind;
    mark(this, chainOf(new.target));
  }

  // True for an error of this class (or a subclass), from any copy of the
  // package.
  static is(value) {
    const kinds = kindsOf(value);
    return kinds !== undefined && kinds.includes(this.kind);
  }
}

// The server answered with an error status. `error` is the body as the
// server sent it ({code, message, ...}); `retryAfter` is the Retry-After
// header in seconds, when there was one.
export class DurinApiError extends DurinError {
  static kind = "DurinApiError";

  constructor(status, error, retryAfter, details = {}) {
    super(error.message, details.cause ? { cause: details.cause } : undefined);
    this.status = status;
    this.error = error;
    if (retryAfter !== undefined) {
      this.retryAfter = retryAfter;
    }
    this.method = details.method;
    this.path = details.path;
  }

  get code() {
    return this.error.code;
  }
}

// 400: invalid-argument, invalid-json, invalid-path, ...: the request was
// refused as it is and changed nothing.
export class BadRequestError extends DurinApiError {
  static kind = "BadRequestError";
}

// 401: no API key, an unknown one, or a revoked one.
export class UnauthorizedError extends DurinApiError {
  static kind = "UnauthorizedError";
}

// 403: the key may not do this (only an admin key creates tenants).
export class ForbiddenError extends DurinApiError {
  static kind = "ForbiddenError";
}

// 404: run-not-found, hook-not-found, flow-not-found, api-key-not-found,
// schedule-not-found, handler-not-found, not-found. Another tenant's runs,
// hooks and keys answer as not found.
export class NotFoundError extends DurinApiError {
  static kind = "NotFoundError";
}

// 409 conflict: the Idempotency-Key was used before with another request.
export class ConflictError extends DurinApiError {
  static kind = "ConflictError";
}

// 409 idempotency-key-in-flight: the first request with this key is still
// running. Retry after `retryAfter` seconds to get its answer. Never
// retried by the client on its own.
export class IdempotencyKeyInFlightError extends DurinApiError {
  static kind = "IdempotencyKeyInFlightError";
}

// 409 idempotency-key-replay-withheld: the first request with this key
// succeeded, but its answer carried a secret and is never sent again.
export class ReplayWithheldError extends DurinApiError {
  static kind = "ReplayWithheldError";
}

// 409 hook-conflict: the hook token or instance id is held by another run,
// `conflictingRunId`.
export class HookConflictError extends DurinApiError {
  static kind = "HookConflictError";

  get conflictingRunId() {
    return this.error.conflictingRunId;
  }
}

// 409 run-finished: the run has ended, so it takes no more messages,
// updates, queries, cancels or terminates (a repeated idempotency key,
// commandId or updateId still answers as the first did).
export class RunFinishedError extends DurinApiError {
  static kind = "RunFinishedError";
}

// 409 schedule-exists: a schedule with this id exists with another
// definition (the same definition again answers it, `created: false`).
export class ScheduleExistsError extends DurinApiError {
  static kind = "ScheduleExistsError";
}

// 404 handler-not-found: the run's flow has no update or query handler of
// that name (ctx.on_update, ctx.on_query).
export class HandlerNotFoundError extends NotFoundError {
  static kind = "HandlerNotFoundError";
}

// 422: the request was understood and refused by the flow or the run
// (update-rejected, query-refused, step-failed, flow-error).
export class UnprocessableError extends DurinApiError {
  static kind = "UnprocessableError";
}

// 422 update-rejected: the flow's validator refused the update's args;
// nothing was recorded. The message carries the validator's reason.
export class UpdateRejectedError extends UnprocessableError {
  static kind = "UpdateRejectedError";
}

// 422 query-refused: the query's handler tried a durable call (a step, a
// timer, complete_update, ...); queries only read.
export class QueryRefusedError extends UnprocessableError {
  static kind = "QueryRefusedError";
}

// 503: the server could not do it now (storage-error, shutting-down,
// unavailable, start-outcome-unknown with `error.runId`). Indefinite: a change
// may or may not have happened; retry with the same idempotency key.
export class UnavailableError extends DurinApiError {
  static kind = "UnavailableError";
}

// 503 shard-unavailable: the shard owning the request is not reachable
// (clustered servers).
export class ShardUnavailableError extends UnavailableError {
  static kind = "ShardUnavailableError";
}

// No answer came: the connection was refused, reset or closed. Whether a
// mutating request took effect is unknown; retry it with its key.
export class ConnectionError extends DurinError {
  static kind = "ConnectionError";
}

// No answer came in time (the request's timeoutMs), or runs.wait gave up.
export class TimeoutError extends DurinError {
  static kind = "TimeoutError";
}

// Thrown by step code: fail the step for good, no more attempts.
export class FatalError extends DurinError {
  static kind = "FatalError";
}

// Thrown by step code: fail this attempt; retry after `retryAfterMs` (or the
// step's policy when not given).
export class RetryableError extends DurinError {
  static kind = "RetryableError";

  constructor(message, options = {}) {
    super(message, options.cause ? { cause: options.cause } : undefined);
    if (options.retryAfterMs !== undefined) {
      this.retryAfterMs = options.retryAfterMs;
    }
  }
}

const byCode = {
  conflict: ConflictError,
  "idempotency-key-in-flight": IdempotencyKeyInFlightError,
  "idempotency-key-replay-withheld": ReplayWithheldError,
  "hook-conflict": HookConflictError,
  "shard-unavailable": ShardUnavailableError,
  "run-finished": RunFinishedError,
  "schedule-exists": ScheduleExistsError,
  "handler-not-found": HandlerNotFoundError,
  "update-rejected": UpdateRejectedError,
  "query-refused": QueryRefusedError,
};

const byStatus = {
  400: BadRequestError,
  401: UnauthorizedError,
  403: ForbiddenError,
  404: NotFoundError,
  422: UnprocessableError,
  503: UnavailableError,
};

// The error for an error answer: by code first, then by status.
export function apiError(status, body, retryAfter, details) {
  const error =
    body !== null && typeof body === "object" && typeof body.code === "string"
      ? body
      : { code: "http-" + status, message: `the server answered ${status} without an error body` };
  if (typeof error.message !== "string") {
    error.message = String(error.message ?? error.code);
  }
  const Class = byCode[error.code] ?? byStatus[status] ?? DurinApiError;
  return new Class(status, error, retryAfter, details);
}
