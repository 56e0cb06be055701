"""durin: the Python client of durin's HTTP API, and a worker for its task
queues. Standard library only. README.md has the whole API.

    from durin import Durin, ConflictError
"""

from ._http import Retry
from .client import Durin
from .errors import (BadRequestError, ConflictError, ConnectionError,
                     DurinApiError, DurinError, FatalError, ForbiddenError,
                     HandlerNotFoundError, HookConflictError,
                     IdempotencyKeyInFlightError, NotFoundError,
                     QueryRefusedError, ReplayWithheldError, RetryableError,
                     RunFinishedError, ScheduleExistsError,
                     ShardUnavailableError, TimeoutError, UnauthorizedError,
                     UnavailableError, UnprocessableError,
                     UpdateRejectedError)
from .types import (ApiKey, Backfilled, CreatedApiKey, CreatedTenant, Deleted,
                    Hook, MessageReceipt, MessageStart, QueryResult, Resumed,
                    Revoked, Run, RunError, RunHistory, RunPage, Schedule,
                    ScheduleAction, ScheduleFiring, ScheduleInfo,
                    SchedulePage, ScheduleSpec, StartHook, TenantKey,
                    Triggered, UpdateResult)
from .worker import StepMeta, Worker, WorkerStats

__version__ = "0.1.0"

__all__ = [
    "Durin", "Retry", "Worker", "StepMeta", "WorkerStats",
    "Run", "RunError", "RunPage", "RunHistory", "Hook", "StartHook", "Resumed",
    "ApiKey", "CreatedApiKey", "Revoked", "CreatedTenant", "TenantKey",
    "MessageStart", "MessageReceipt", "UpdateResult", "QueryResult",
    "Schedule", "ScheduleSpec", "ScheduleAction", "ScheduleInfo",
    "ScheduleFiring", "SchedulePage", "Triggered", "Backfilled", "Deleted",
    "DurinError", "DurinApiError", "BadRequestError", "UnauthorizedError",
    "ForbiddenError", "NotFoundError", "ConflictError",
    "IdempotencyKeyInFlightError", "ReplayWithheldError", "HookConflictError",
    "RunFinishedError", "ScheduleExistsError", "HandlerNotFoundError",
    "UnprocessableError", "UpdateRejectedError", "QueryRefusedError",
    "UnavailableError", "ShardUnavailableError", "ConnectionError",
    "TimeoutError", "FatalError", "RetryableError",
]
