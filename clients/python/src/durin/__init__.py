"""durin: the Python client of durin's HTTP API, and a worker for its task
queues. Standard library only. README.md has the whole API.

    from durin import Durin, ConflictError
"""

from ._http import Retry
from .client import Durin
from .errors import (BadRequestError, ConflictError, ConnectionError,
                     DurinApiError, DurinError, FatalError, ForbiddenError,
                     HookConflictError, IdempotencyKeyInFlightError,
                     NotFoundError, ReplayWithheldError, RetryableError,
                     ShardUnavailableError, TimeoutError, UnauthorizedError,
                     UnavailableError)
from .types import (ApiKey, CreatedApiKey, CreatedTenant, Hook, Resumed,
                    Revoked, Run, RunError, RunHistory, RunPage, StartHook,
                    TenantKey)
from .worker import StepMeta, Worker, WorkerStats

__version__ = "0.1.0"

__all__ = [
    "Durin", "Retry", "Worker", "StepMeta", "WorkerStats",
    "Run", "RunError", "RunPage", "RunHistory", "Hook", "StartHook", "Resumed",
    "ApiKey", "CreatedApiKey", "Revoked", "CreatedTenant", "TenantKey",
    "DurinError", "DurinApiError", "BadRequestError", "UnauthorizedError",
    "ForbiddenError", "NotFoundError", "ConflictError",
    "IdempotencyKeyInFlightError", "ReplayWithheldError", "HookConflictError",
    "UnavailableError", "ShardUnavailableError", "ConnectionError",
    "TimeoutError", "FatalError", "RetryableError",
]
