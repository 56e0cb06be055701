"""The exceptions of the durin client.

Every exception the client raises is a :class:`DurinError`: a
:class:`DurinApiError` when the server answered with an error
(``{"code", "message"}``), a :class:`ConnectionError` or
:class:`TimeoutError` when no answer came. Step code run by a worker raises
:class:`FatalError` or :class:`RetryableError` to choose what happens next.
"""

from __future__ import annotations

import builtins
from typing import Any, Dict, Optional


class DurinError(Exception):
    """Base of every exception of this package."""


class DurinApiError(DurinError):
    """The server answered with an error status.

    ``status`` is the HTTP status, ``code`` and ``message`` the server's,
    ``error`` the whole error body as sent, ``retry_after`` the Retry-After
    header in seconds (None when there was none). ``str(err)`` is the
    server's message.
    """

    def __init__(
        self,
        status: int,
        error: Dict[str, Any],
        retry_after: Optional[float] = None,
        method: Optional[str] = None,
        path: Optional[str] = None,
    ) -> None:
        self.status = status
        self.error = error
        self.code: str = str(error.get("code", ""))
        self.message: str = str(error.get("message", ""))
        self.retry_after = retry_after
        self.method = method
        self.path = path
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return "%s(status=%d, code=%r, message=%r)" % (
            type(self).__name__, self.status, self.code, self.message)


class BadRequestError(DurinApiError):
    """400: invalid-argument, invalid-json, invalid-path; nothing changed."""


class UnauthorizedError(DurinApiError):
    """401: no API key, an unknown one, or a revoked one."""


class ForbiddenError(DurinApiError):
    """403: the key may not do this (only an admin key creates tenants)."""


class NotFoundError(DurinApiError):
    """404: run-not-found, hook-not-found, flow-not-found, api-key-not-found,
    schedule-not-found, handler-not-found, not-found. Another tenant's runs,
    hooks and keys answer as not found."""


class HandlerNotFoundError(NotFoundError):
    """404 handler-not-found: the run's flow has no update or query handler
    of that name (ctx.on_update, ctx.on_query)."""


class ConflictError(DurinApiError):
    """409 conflict: the Idempotency-Key was used with another request."""


class IdempotencyKeyInFlightError(DurinApiError):
    """409 idempotency-key-in-flight: the first request with this key is
    still running; retry after ``retry_after`` seconds to get its answer.
    Never retried by the client on its own."""


class ReplayWithheldError(DurinApiError):
    """409 idempotency-key-replay-withheld: the first request with this key
    succeeded, but its answer carried a secret and is never sent again."""


class HookConflictError(DurinApiError):
    """409 hook-conflict: the hook token or instance id is held by the run
    ``conflicting_run_id``."""

    @property
    def conflicting_run_id(self) -> Optional[str]:
        value = self.error.get("conflictingRunId")
        return None if value is None else str(value)


class RunFinishedError(DurinApiError):
    """409 run-finished: the run has ended, so it takes no more messages,
    updates, queries, cancels or terminates (a repeated idempotency key,
    command id or update id still answers as the first did)."""


class ScheduleExistsError(DurinApiError):
    """409 schedule-exists: a schedule with this id exists with another
    definition (the same definition again answers it, ``created`` False)."""


class UnprocessableError(DurinApiError):
    """422: understood and refused by the flow or the run (update-rejected,
    query-refused, step-failed, flow-error)."""


class UpdateRejectedError(UnprocessableError):
    """422 update-rejected: the flow's validator refused the update's args;
    nothing was recorded. ``str(err)`` carries the validator's reason."""


class QueryRefusedError(UnprocessableError):
    """422 query-refused: the query's handler tried a durable call (a step,
    a timer, complete_update, ...); queries only read."""


class UnavailableError(DurinApiError):
    """503: storage-error, shutting-down, unavailable, start-outcome-unknown
    (with ``error["runId"]``). Indefinite: a change may or may not have happened;
    retry with the same idempotency key."""


class ShardUnavailableError(UnavailableError):
    """503 shard-unavailable: the shard owning the request is not reachable
    (clustered servers)."""


class ConnectionError(DurinError, builtins.ConnectionError):
    """No answer: the connection was refused, reset or closed. Whether a
    mutating request took effect is unknown; retry it with its key.
    ``refused`` is True when the connection was refused (nothing was sent).
    Also a builtins.ConnectionError."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class TimeoutError(DurinError, builtins.TimeoutError):
    """No answer in time; from ``runs.wait``, the run did not finish in time
    (``run`` is its state as last seen). Also a builtins.TimeoutError."""

    def __init__(self, message: str, run: Any = None) -> None:
        super().__init__(message)
        self.run = run

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class FatalError(DurinError):
    """Raised by step code: fail the step for good, no more attempts."""


class RetryableError(DurinError):
    """Raised by step code: fail this attempt, retry after ``retry_after``
    seconds (or the step's retry policy when None)."""

    def __init__(self, message: str, retry_after: Optional[float] = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


_BY_CODE = {
    "conflict": ConflictError,
    "idempotency-key-in-flight": IdempotencyKeyInFlightError,
    "idempotency-key-replay-withheld": ReplayWithheldError,
    "hook-conflict": HookConflictError,
    "shard-unavailable": ShardUnavailableError,
    "run-finished": RunFinishedError,
    "schedule-exists": ScheduleExistsError,
    "handler-not-found": HandlerNotFoundError,
    "update-rejected": UpdateRejectedError,
    "query-refused": QueryRefusedError,
}

_BY_STATUS = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    422: UnprocessableError,
    503: UnavailableError,
}


def api_error(status: int, body: Any, retry_after: Optional[float] = None,
              method: Optional[str] = None,
              path: Optional[str] = None) -> DurinApiError:
    """The exception for an error answer: by code first, then by status."""
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        error = dict(body)
        error.setdefault("message", error["code"])
    else:
        error = {"code": "http-%d" % status,
                 "message": "the server answered %d without an error body" % status}
    cls = _BY_CODE.get(error["code"]) or _BY_STATUS.get(status) or DurinApiError
    return cls(status, error, retry_after, method, path)
