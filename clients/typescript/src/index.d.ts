// Types of @durin/client. Field names are the server's (gateway/api.cpp);
// answers are its JSON as sent.

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export type RunStatus =
  | "pending"
  | "running"
  | "waiting"
  | "completed"
  | "failed"
  | "cancelled"
  | "terminated"
  | "blocked";

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
  /** The start hook's token, when it was started with one. */
  startToken?: string;
  /** The schedule that started it, and the occurrence (RFC 3339) it was started for. */
  scheduleId?: string;
  occurrence?: string;
  /** Set at start and by the flow (ctx.set_memo); null when none. */
  memo?: Json;
  /** By name: {"type": "keyword" | "int" | "double" | "bool" | "time", "value"}. */
  searchAttributes?: Record<string, { type: string; value: Json }>;
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
  memo?: Json;
  /** A plain value (string, number, boolean) or {"type", "value"}; a name's type is fixed per tenant. */
  searchAttributes?: Record<string, Json>;
}

export interface ListParams extends RequestOptions {
  status?: Exclude<RunStatus, "blocked">;
  flow?: string;
  /** Only the runs this schedule started. */
  scheduleId?: string;
  /** Only the runs it matches, e.g. "priority > 3 AND status = 'running'" (README: the query language). */
  query?: string;
  /** 1..1000, default 100. */
  limit?: number;
  cursor?: string;
}

/** Awaited: the first page. Iterated with for await: every item of every page. */
export interface PagedList<Page, Item> extends PromiseLike<Page>, AsyncIterable<Item> {
  catch<T = never>(onRejected?: (reason: unknown) => T | PromiseLike<T>): Promise<Page | T>;
  finally(onFinally?: () => void): Promise<Page>;
  /** Every page, following nextCursor. */
  pages(): AsyncIterableIterator<Page>;
}

/** Awaited: the first page. Iterated with for await: every run of every page. */
export interface RunList extends PagedList<RunPage, Run> {}

export interface CancelOptions extends MutationOptions {
  reason?: string;
  commandId?: string;
}

export type TerminateOptions = CancelOptions;

// ---- Messages, updates, queries

/**
 * Options of a message. Its idempotency key is sent in the body (not as
 * Idempotency-Key) and recorded once per run (or instance) and message
 * name: a repeat records nothing and answers as the first, also after the
 * run ended. With a key the request is retried like a keyed one.
 */
export interface MessageOptions extends RequestOptions {
  /** 1..200 bytes. */
  idempotencyKey?: string;
}

/** Message-with-start: the run started for the instance when none holds it. */
export interface MessageStart {
  flow: string;
  input?: Json;
}

export interface InstanceMessageOptions extends MessageOptions {
  start?: MessageStart;
}

export interface MessageReceipt {
  runId: string;
  /** The message's place in the run's history. */
  sequence: number;
  /** true: this message started its run (message-with-start; sequence 1). */
  started: boolean;
}

export interface UpdateOptions extends RequestOptions {
  /** 1..200 bytes; a repeat answers the first update's handle or result (default: one is drawn). With it the request is retried like a keyed one. */
  updateId?: string;
  /** Default "completed": answer once the flow completed it (or accepted, after 25 s). */
  waitFor?: "completed" | "accepted";
}

export interface UpdateResult<T = Json> {
  runId: string;
  updateId: string;
  sequence: number;
  status: "accepted" | "completed";
  /** The flow's result; present once completed. */
  result?: T;
}

export interface QueryResult<T = Json> {
  runId: string;
  query: string;
  result: T;
}

// ---- Schedules

export type OverlapPolicy = "skip" | "buffer_one" | "buffer_all" | "allow_all" | "cancel_other" | "terminate_other";

/** A duration ("1m", "30 s", "2h") or milliseconds. */
export type Duration = string | number;

export interface ScheduleSpec {
  /** 5 fields (minute hour day-of-month month day-of-week), or @hourly, @daily, ... */
  cron?: string;
  /** IANA, for cron; default "UTC". */
  timezone?: string;
  /** At least 1 s; instead of cron. */
  interval?: Duration;
  jitter?: Duration;
  /** RFC 3339. */
  startAt?: string;
  endAt?: string;
}

export interface ScheduleAction {
  flow: string;
  input?: Json;
  /** Given to every run the schedule starts. */
  memo?: Json;
  /** Given to every run the schedule starts: plain or {type, value} at
   * create; a schedule's view shows them {type, value}, as a run's. */
  searchAttributes?: Record<string, Json>;
}

export interface CreateScheduleParams extends MutationOptions {
  /** 1..200 bytes, unique per tenant. */
  scheduleId: string;
  spec: ScheduleSpec;
  action: ScheduleAction;
  /** Default "skip". */
  overlap?: OverlapPolicy;
  /** Default "1m", at most 366 days. */
  catchupWindow?: Duration;
  paused?: boolean;
  note?: string;
}

export interface ScheduleFiring {
  occurrence: string;
  runId: string;
}

export interface ScheduleInfo {
  fired: number;
  missedCatchup: number;
  skippedOverlap: number;
  /** Runs it started that may not have ended. */
  running: string[];
  buffered: number;
  queued: number;
  lastFiring: ScheduleFiring | null;
  recent: ScheduleFiring[];
  lastError: string | null;
  createdAt: string | null;
  updatedAt: string | null;
}

export interface Schedule {
  scheduleId: string;
  /** As stored: durations in ms, unset bounds null. */
  spec: {
    cron?: string;
    timezone?: string;
    interval?: number;
    jitter: number;
    startAt: string | null;
    endAt: string | null;
  };
  action: ScheduleAction;
  overlap: OverlapPolicy;
  /** Milliseconds. */
  catchupWindow: number;
  paused: boolean;
  note: string;
  /** null while paused or when none is left. */
  nextOccurrence: string | null;
  info: ScheduleInfo;
  /** schedules.create only: false when it existed with the same definition. */
  created?: boolean;
}

export interface SchedulePage {
  schedules: Schedule[];
  /** null on the last page. */
  nextCursor: string | null;
  /** A cluster with shards nobody serves now. */
  unavailableShards?: number[];
}

export interface ScheduleListParams extends RequestOptions {
  /** 1..1000, default 100. */
  limit?: number;
  /** The last schedule id of the previous page. */
  cursor?: string;
}

/** Awaited: the first page. Iterated with for await: every schedule, by id. */
export interface ScheduleList extends PagedList<SchedulePage, Schedule> {}

export interface PauseOptions extends MutationOptions {
  /** Replaces the schedule's note (an absent note clears it). */
  note?: string;
}

export interface BackfillParams extends MutationOptions {
  /** A Date or RFC 3339 text; both ends included. */
  startAt: Date | string;
  endAt: Date | string;
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
  /** A forced stop: the run, status terminated. */
  terminate(id: string, options?: TerminateOptions): Promise<Run>;
  /** Polls until completed, failed, cancelled or terminated. */
  wait(id: string, options?: WaitOptions): Promise<Run>;
  /** Records message `name` (1..128 of letters, digits, `._:-`) in the run's history. */
  sendMessage(id: string, name: string, payload?: Json, options?: MessageOptions): Promise<MessageReceipt>;
  /** UpdateRejectedError when the flow's validator refuses it; HandlerNotFoundError without a handler. */
  update<T = Json>(id: string, name: string, args?: Json, options?: UpdateOptions): Promise<UpdateResult<T>>;
  /** QueryRefusedError when the handler tries a durable call; RunFinishedError once the run ended. */
  query<T = Json>(id: string, name: string, args?: Json, options?: RequestOptions): Promise<QueryResult<T>>;
}

export declare class Hooks {
  get(token: string, options?: RequestOptions): Promise<Hook>;
  resume(token: string, payload: Json, options?: ResumeOptions): Promise<{ runId: string }>;
}

export declare class Instances {
  /** The active run holding the instance id; NotFoundError when none. */
  get(instanceId: string, options?: RequestOptions): Promise<Run>;
  /** To the active run holding the instance (NotFoundError when none), or, with `start`, a new one. */
  sendMessage(instanceId: string, name: string, payload?: Json, options?: InstanceMessageOptions): Promise<MessageReceipt>;
}

export declare class Schedules {
  /** ScheduleExistsError when the id exists with another definition. */
  create(params: CreateScheduleParams): Promise<Schedule>;
  get(scheduleId: string, options?: RequestOptions): Promise<Schedule>;
  list(params?: ScheduleListParams): ScheduleList;
  /** Its runs stay. */
  delete(scheduleId: string, options?: MutationOptions): Promise<{ scheduleId: string; deleted: true }>;
  pause(scheduleId: string, options?: PauseOptions): Promise<Schedule>;
  unpause(scheduleId: string, options?: PauseOptions): Promise<Schedule>;
  /** One occurrence at now, also while paused. */
  trigger(scheduleId: string, options?: MutationOptions): Promise<{ scheduleId: string; occurrence: string }>;
  /** Every occurrence in the range (at most 1,000). */
  backfill(scheduleId: string, params: BackfillParams): Promise<{ scheduleId: string; occurrences: string[] }>;
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
  readonly schedules: Schedules;
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
/** 404: run-not-found, hook-not-found, flow-not-found, api-key-not-found, schedule-not-found, not-found. */
export declare class NotFoundError extends DurinApiError {}
/** 404 handler-not-found: no update or query handler of that name. */
export declare class HandlerNotFoundError extends NotFoundError {}
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
/** 409 run-finished: the run ended; it takes no more messages, updates, queries, cancels or terminates. */
export declare class RunFinishedError extends DurinApiError {}
/** 409 schedule-exists: the id exists with another definition. */
export declare class ScheduleExistsError extends DurinApiError {}
/** 422: update-rejected, query-refused, step-failed, flow-error. */
export declare class UnprocessableError extends DurinApiError {}
/** 422 update-rejected: the flow's validator refused the args; nothing was recorded. */
export declare class UpdateRejectedError extends UnprocessableError {}
/** 422 query-refused: the handler tried a durable call. */
export declare class QueryRefusedError extends UnprocessableError {}
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
