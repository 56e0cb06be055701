// Types of @durin/client. Field names are the server's (gateway/api.cpp);
// answers are its JSON as sent.

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export type RunStatus = "pending" | "running" | "waiting" | "completed" | "failed" | "cancelled" | "blocked";

/** Opt-in retry of requests that got no answer, timed out, or got 503. */
export interface RetryOptions {
  /** Tries in all, the first included: 1 (the default) never retries. At most 100. */
  attempts: number;
  /** The first wait; it doubles per retry (±20% jitter). Default 500. */
  initialDelayMs?: number;
  /** The longest wait (a longer Retry-After, up to 60 s, still wins). Default 10000. */
  maxDelayMs?: number;
}

export interface DurinOptions {
  /** Default: $DURIN_SERVER, else http://127.0.0.1:7070. */
  server?: string;
  /** Sent as `Authorization: Bearer`. Default: $DURIN_API_KEY. */
  apiKey?: string;
  /** Per request, until the whole answer arrived. Default 60000. */
  timeoutMs?: number;
  /** Default: no retries. */
  retry?: RetryOptions;
  /** Default: globalThis.fetch. */
  fetch?: typeof fetch;
  /** Extra headers on every request. */
  headers?: Record<string, string>;
}

/** Options every call takes. */
export interface RequestOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
  /** This call's retry policy instead of the client's. */
  retry?: RetryOptions;
}

/** Options of a call that changes something. */
export interface MutationOptions extends RequestOptions {
  /** Sent as Idempotency-Key: 1..255 printable ASCII. Name the work, not the attempt. */
  idempotencyKey?: string;
}

export interface ApiErrorBody {
  code: string;
  message: string;
  /** hook-conflict: the run that holds the token or instance id. */
  conflictingRunId?: string;
  /** start-outcome-unknown: the run that may have started. */
  runId?: string;
  /** lease-conflict: wrong_owner or not_claimed. */
  reason?: string;
  [field: string]: Json | undefined;
}

export interface RunError {
  code: string;
  message: string;
}

export interface Run {
  id: string;
  instanceId: string;
  flow: string;
  status: RunStatus;
  input: Json;
  output: Json;
  error: RunError | null;
  /** RFC 3339 with milliseconds; null until it happened. */
  createdAt: string | null;
  startedAt: string | null;
  completedAt: string | null;
  /** Present while the run is held as blocked. */
  blockedReason?: string;
}

export interface RunPage {
  runs: Run[];
  /** null on the last page. */
  nextCursor: string | null;
}

export interface HistoryEvent {
  sequence: number;
  kind: string;
  at: string | null;
  [field: string]: Json;
}

export interface RunHistory {
  runId: string;
  events: HistoryEvent[];
}

export interface StartHook {
  token: string;
  /** A duration ("30 days"), milliseconds, or an RFC 3339 time. */
  minRetention?: string | number;
  metadata?: Json;
}

export interface StartParams extends MutationOptions {
  flow: string;
  input?: Json;
  /** Default true: answer when the run completes, fails or waits (at most 25 s). */
  wait?: boolean;
  hook?: StartHook;
  instanceId?: string;
  onDuplicate?: "reject-duplicate" | "return-existing-active";
  commandId?: string;
}

export interface ListParams extends RequestOptions {
  status?: Exclude<RunStatus, "blocked">;
  flow?: string;
  /** 1..1000, default 100. */
  limit?: number;
  cursor?: string;
}

/** Awaited: the first page. Iterated with for await: every run of every page. */
export interface RunList extends PromiseLike<RunPage>, AsyncIterable<Run> {
  catch<T = never>(onRejected?: (reason: unknown) => T | PromiseLike<T>): Promise<RunPage | T>;
  finally(onFinally?: () => void): Promise<RunPage>;
  /** Every page, following nextCursor. */
  pages(): AsyncIterableIterator<RunPage>;
}

export interface CancelOptions extends MutationOptions {
  reason?: string;
  commandId?: string;
}

export interface WaitOptions {
  /** Default 60000; then TimeoutError, with the last state seen as `.run`. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface Hook {
  token: string;
  runId: string;
  metadata: Json;
  createdAt: string | null;
  state: string;
  retainUntil: string | null;
}

export interface ResumeOptions extends MutationOptions {
  commandId?: string;
}

export interface ApiKey {
  id: string;
  name: string;
  admin: boolean;
  createdAt: string;
}

export interface CreatedApiKey {
  id: string;
  name: string;
  /** Shown once: a replay of the request never gets it (ReplayWithheldError). */
  secret: string;
  createdAt: string;
}

export interface CreatedTenant {
  id: string;
  name: string;
  apiKey: { id: string; secret: string };
}

export declare class Runs {
  start(params: StartParams): Promise<Run>;
  get(id: string, options?: RequestOptions): Promise<Run>;
  list(params?: ListParams): RunList;
  history(id: string, options?: RequestOptions): Promise<RunHistory>;
  cancel(id: string, options?: CancelOptions): Promise<Run>;
  /** Polls until completed, failed or cancelled. */
  wait(id: string, options?: WaitOptions): Promise<Run>;
}

export declare class Hooks {
  get(token: string, options?: RequestOptions): Promise<Hook>;
  resume(token: string, payload: Json, options?: ResumeOptions): Promise<{ runId: string }>;
}

export declare class Instances {
  /** The active run holding the instance id; NotFoundError when none. */
  get(instanceId: string, options?: RequestOptions): Promise<Run>;
}

export declare class ApiKeys {
  create(params?: { name?: string } & MutationOptions): Promise<CreatedApiKey>;
  list(options?: RequestOptions): Promise<ApiKey[]>;
  revoke(id: string, options?: MutationOptions): Promise<{ id: string; revoked: true }>;
}

export declare class Tenants {
  /** Admin key only (else ForbiddenError). */
  create(params: { name: string } & MutationOptions): Promise<CreatedTenant>;
}

export declare class Durin {
  constructor(options?: DurinOptions);
  readonly server: string;
  readonly runs: Runs;
  readonly hooks: Hooks;
  readonly instances: Instances;
  readonly apiKeys: ApiKeys;
  readonly tenants: Tenants;
  /** Starts a worker at once. */
  worker(options: WorkerOptions): Worker;
}

// ---- Workers

export interface StepProgress {
  message?: string;
  current?: number;
  total?: number;
}

export interface StepMeta {
  /** The same on every attempt of the step: the idempotency key for other systems. */
  stepId: string;
  /** New on every attempt. */
  attemptId: string;
  /** 1 for the first attempt. */
  attempt: number;
  stepName: string;
  runId: string;
  instanceId: string;
  taskQueue: string;
  leaseExpiresAtMs: number;
  workerId: string;
  /** Aborted once a heartbeat learns the attempt should stop (stale or cancelled). */
  signal: AbortSignal;
  /** Renews the lease and records progress; false when the step should stop. */
  heartbeat(progress?: StepProgress): Promise<boolean>;
}

export type StepFunction = (args: Json[], meta: StepMeta) => Json | void | Promise<Json | void>;

export interface StepOutcome {
  attemptId: string;
  stepId: string;
  stepName: string;
  /** false: a late report (another attempt's outcome stands); `reason` says why. */
  recorded: boolean;
  reason?: string;
  code?: string;
  message?: string;
}

export interface WorkerOptions {
  queue: string;
  steps: Record<string, StepFunction>;
  /** Tasks in hand at once, 1..256. Default 1. */
  concurrency?: number;
  /** Default: ts-<pid>-<random>. */
  workerId?: string;
  /** How long one poll waits for a task; stop() waits at most this long for it. Default 2000. */
  pollWaitMs?: number;
  /** The pause after a failed request. Default 200. */
  retryDelayMs?: number;
  /** Each answered report. */
  onOutcome?: (outcome: StepOutcome) => void;
  /** Each failed request (the worker goes on, unless the error is fatal). */
  onError?: (error: unknown) => void;
}

export interface WorkerStats {
  /** Tasks claimed. */
  tasks: number;
  /** Outcomes the server recorded. */
  recorded: number;
  /** Outcomes refused as late (stale, cancelled). */
  refused: number;
  /** Failed requests. */
  errors: number;
}

export declare class Worker {
  private constructor();
  readonly workerId: string;
  readonly queue: string;
  readonly stats: Readonly<WorkerStats>;
  /**
   * Resolves once stopped and every claimed task was run and reported;
   * rejects with the error when a poll was refused for good (401, 403,
   * 400, 404).
   */
  readonly done: Promise<void>;
  /** Graceful: no new poll; the tasks in hand finish and are reported. */
  stop(): Promise<void>;
}

// ---- Errors

export declare class DurinError extends Error {
  /** True for an error of this class or a subclass, from any copy of the package. */
  static is<T extends abstract new (...args: any[]) => DurinError>(this: T, value: unknown): value is InstanceType<T>;
}

export declare class DurinApiError extends DurinError {
  constructor(status: number, error: ApiErrorBody, retryAfter?: number);
  readonly status: number;
  /** The error as the server sent it. */
  readonly error: ApiErrorBody;
  /** error.code. */
  readonly code: string;
  /** Retry-After in seconds, when the server sent one. */
  readonly retryAfter?: number;
  readonly method?: string;
  readonly path?: string;
}

/** 400 (invalid-argument, invalid-json, invalid-path, ...). */
export declare class BadRequestError extends DurinApiError {}
/** 401: no key, an unknown or a revoked one. */
export declare class UnauthorizedError extends DurinApiError {}
/** 403. */
export declare class ForbiddenError extends DurinApiError {}
/** 404: run-not-found, hook-not-found, flow-not-found, api-key-not-found, not-found. */
export declare class NotFoundError extends DurinApiError {}
/** 409 conflict: the key was used with another request. */
export declare class ConflictError extends DurinApiError {}
/** 409 idempotency-key-in-flight; retryAfter is set. */
export declare class IdempotencyKeyInFlightError extends DurinApiError {}
/** 409 idempotency-key-replay-withheld. */
export declare class ReplayWithheldError extends DurinApiError {}
/** 409 hook-conflict. */
export declare class HookConflictError extends DurinApiError {
  readonly conflictingRunId: string | undefined;
}
/** 503: storage-error, shutting-down, start-outcome-unknown, ... */
export declare class UnavailableError extends DurinApiError {}
/** 503 shard-unavailable. */
export declare class ShardUnavailableError extends UnavailableError {}
/** No answer: refused, reset or closed connection. */
export declare class ConnectionError extends DurinError {
  /** The connection was refused: the request was never sent. */
  readonly refused?: boolean;
}
/** No answer within timeoutMs; from runs.wait, the run did not finish in time (`run`). */
export declare class TimeoutError extends DurinError {
  readonly run?: Run;
}
/** Thrown by step code: no more attempts. */
export declare class FatalError extends DurinError {}
/** Thrown by step code: retry, after retryAfterMs when given. */
export declare class RetryableError extends DurinError {
  constructor(message: string, options?: { retryAfterMs?: number; cause?: unknown });
  readonly retryAfterMs?: number;
}
