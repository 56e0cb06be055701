// @durin/client: the TypeScript/JavaScript client of durin's HTTP API.
// Types: index.d.ts. README.md has the whole API.
export { Durin } from "./client.js";
export { Worker } from "./worker.js";
export {
  DurinError,
  DurinApiError,
  BadRequestError,
  UnauthorizedError,
  ForbiddenError,
  NotFoundError,
  ConflictError,
  IdempotencyKeyInFlightError,
  ReplayWithheldError,
  HookConflictError,
  RunFinishedError,
  ScheduleExistsError,
  HandlerNotFoundError,
  UnprocessableError,
  UpdateRejectedError,
  QueryRefusedError,
  UnavailableError,
  ShardUnavailableError,
  ConnectionError,
  TimeoutError,
  FatalError,
  RetryableError,
} from "./errors.js";
