"""Durin: the client of one durin server's HTTP API (README.md, "HTTP API").

Each method is one route. Every method that changes something takes
``idempotency_key``, sent as Idempotency-Key: a repeat after the first
answered gets the first answer again. A client is safe to share between
threads.

    from durin import Durin, ConflictError

    durin = Durin()  # DURIN_SERVER, DURIN_API_KEY
    run = durin.runs.start(flow="acme.review-order",
                           input={"orderId": "A-200"},
                           idempotency_key="review-A-200")
"""

from __future__ import annotations

import time
import urllib.parse
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterator, List,
                    Mapping, Optional, Union)

from ._http import DEFAULT_TIMEOUT, Retry, RetryLike, Transport
from .errors import (BadRequestError, ConflictError, ConnectionError,
                     DurinApiError, DurinError, FatalError, ForbiddenError,
                     HookConflictError, IdempotencyKeyInFlightError,
                     NotFoundError, ReplayWithheldError, RetryableError,
                     ShardUnavailableError, TimeoutError, UnauthorizedError,
                     UnavailableError)
from .types import (ApiKey, CreatedApiKey, CreatedTenant, Hook, Json, Resumed,
                    Revoked, Run, RunHistory, RunPage, StartHook)

if TYPE_CHECKING:
    from .worker import StepFunction, Worker

__all__ = [
    "Durin", "Retry",
    "DurinError", "DurinApiError", "BadRequestError", "UnauthorizedError",
    "ForbiddenError", "NotFoundError", "ConflictError",
    "IdempotencyKeyInFlightError", "ReplayWithheldError", "HookConflictError",
    "UnavailableError", "ShardUnavailableError", "ConnectionError",
    "TimeoutError", "FatalError", "RetryableError",
]


def _segment(value: str) -> str:
    if not isinstance(value, str) or value == "":
        raise ValueError("an id or token must be a non-empty string")
    return urllib.parse.quote(value, safe="")


def _fields(**values: Any) -> Dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


class Runs:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def start(self, flow: str, input: Json = None, *,
              idempotency_key: Optional[str] = None,
              wait: Optional[bool] = None,
              hook: Union[StartHook, Mapping[str, Any], None] = None,
              instance_id: Optional[str] = None,
              on_duplicate: Optional[str] = None,
              command_id: Optional[str] = None,
              timeout: Optional[float] = None,
              retry: RetryLike = None) -> Run:
        """Starts a run of ``flow``. By default (``wait`` None or True) it
        answers when the run completes, fails or waits (at most 25 s, then
        as it is); ``wait=False`` answers at once. ``on_duplicate`` is
        "reject-duplicate" or "return-existing-active"."""
        if not isinstance(flow, str) or flow == "":
            raise ValueError("flow must be a non-empty string")
        if isinstance(hook, StartHook):
            hook_body: Optional[Dict[str, Any]] = hook.to_json()
        elif hook is not None:
            hook_body = dict(hook)
            if "min_retention" in hook_body:
                hook_body["minRetention"] = hook_body.pop("min_retention")
        else:
            hook_body = None
        body = _fields(flow=flow, input=input, wait=wait, hook=hook_body,
                       instanceId=instance_id, onDuplicate=on_duplicate,
                       commandId=command_id)
        return Run.from_json(self._transport.request(
            "POST", "/v1/runs", body=body, idempotency_key=idempotency_key,
            timeout=timeout, retry=retry))

    def get(self, run_id: str, *, timeout: Optional[float] = None,
            retry: RetryLike = None) -> Run:
        return Run.from_json(self._transport.request(
            "GET", "/v1/runs/" + _segment(run_id), timeout=timeout, retry=retry))

    def list(self, *, status: Optional[str] = None, flow: Optional[str] = None,
             limit: Optional[int] = None, cursor: Optional[str] = None,
             timeout: Optional[float] = None,
             retry: RetryLike = None) -> RunPage:
        """One page, newest first (``limit`` 1..1000, default 100)."""
        return RunPage.from_json(self._transport.request(
            "GET", "/v1/runs",
            query={"status": status, "flow": flow, "limit": limit,
                   "cursor": cursor},
            timeout=timeout, retry=retry))

    def list_all(self, *, status: Optional[str] = None,
                 flow: Optional[str] = None, limit: Optional[int] = None,
                 cursor: Optional[str] = None,
                 timeout: Optional[float] = None,
                 retry: RetryLike = None) -> Iterator[Run]:
        """Every run of every page, following next_cursor; ``limit`` is the
        page size. Pages are fetched as the iteration reaches them."""
        while True:
            page = self.list(status=status, flow=flow, limit=limit,
                             cursor=cursor, timeout=timeout, retry=retry)
            for run in page.runs:
                yield run
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def history(self, run_id: str, *, timeout: Optional[float] = None,
                retry: RetryLike = None) -> RunHistory:
        return RunHistory.from_json(self._transport.request(
            "GET", "/v1/runs/%s/history" % _segment(run_id), timeout=timeout,
            retry=retry))

    def cancel(self, run_id: str, *, reason: Optional[str] = None,
               command_id: Optional[str] = None,
               idempotency_key: Optional[str] = None,
               timeout: Optional[float] = None,
               retry: RetryLike = None) -> Run:
        """The cancelled run. A repeated ``command_id`` answers it again; a
        run that already ended is refused with run-finished (409)."""
        return Run.from_json(self._transport.request(
            "POST", "/v1/runs/%s/cancel" % _segment(run_id),
            body=_fields(reason=reason, commandId=command_id),
            idempotency_key=idempotency_key, timeout=timeout, retry=retry))

    def wait(self, run_id: str, timeout: float = 60.0) -> Run:
        """Polls the run until it completed, failed or was cancelled. Raises
        durin.TimeoutError (with ``run`` as last seen) after ``timeout``
        seconds. The interval grows from 50 ms to 1 s."""
        deadline = time.monotonic() + timeout
        interval = 0.05
        while True:
            left = deadline - time.monotonic()
            run = self.get(run_id, timeout=max(0.001, min(left, 30.0)))
            if run.finished:
                return run
            if time.monotonic() + interval > deadline:
                raise TimeoutError("run %s did not finish within %g s (it is %s)"
                                   % (run_id, timeout, run.status), run=run)
            time.sleep(interval)
            interval = min(1.0, interval * 2)


class Hooks:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def get(self, token: str, *, timeout: Optional[float] = None,
            retry: RetryLike = None) -> Hook:
        return Hook.from_json(self._transport.request(
            "GET", "/v1/hooks/" + _segment(token), timeout=timeout, retry=retry))

    def resume(self, token: str, payload: Json, *,
               command_id: Optional[str] = None,
               idempotency_key: Optional[str] = None,
               timeout: Optional[float] = None,
               retry: RetryLike = None) -> Resumed:
        """Delivers ``payload`` to the hook's run; answers once durable. A
        repeated ``command_id`` (or idempotency key) is not recorded again."""
        body: Dict[str, Any] = {"payload": payload}
        body.update(_fields(commandId=command_id))
        answer = self._transport.request(
            "POST", "/v1/hooks/%s/resume" % _segment(token), body=body,
            idempotency_key=idempotency_key, timeout=timeout, retry=retry)
        return Resumed(str(answer["runId"]))


class Instances:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def get(self, instance_id: str, *, timeout: Optional[float] = None,
            retry: RetryLike = None) -> Run:
        """The active run holding ``instance_id``; NotFoundError when none."""
        return Run.from_json(self._transport.request(
            "GET", "/v1/instances/" + _segment(instance_id), timeout=timeout,
            retry=retry))


class ApiKeys:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def create(self, name: Optional[str] = None, *,
               idempotency_key: Optional[str] = None,
               timeout: Optional[float] = None,
               retry: RetryLike = None) -> CreatedApiKey:
        """A new key of this tenant; its secret is shown once. A replay of
        the request raises ReplayWithheldError."""
        return CreatedApiKey.from_json(self._transport.request(
            "POST", "/v1/api-keys", body=_fields(name=name),
            idempotency_key=idempotency_key, timeout=timeout, retry=retry))

    def list(self, *, timeout: Optional[float] = None,
             retry: RetryLike = None) -> List[ApiKey]:
        answer = self._transport.request("GET", "/v1/api-keys",
                                         timeout=timeout, retry=retry)
        return [ApiKey.from_json(key) for key in answer.get("apiKeys", [])]

    def revoke(self, key_id: str, *, idempotency_key: Optional[str] = None,
               timeout: Optional[float] = None,
               retry: RetryLike = None) -> Revoked:
        """The key is refused from the moment this answers."""
        answer = self._transport.request(
            "DELETE", "/v1/api-keys/" + _segment(key_id),
            idempotency_key=idempotency_key, timeout=timeout, retry=retry)
        return Revoked(str(answer["id"]), bool(answer.get("revoked")))


class Tenants:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def create(self, name: str, *, idempotency_key: Optional[str] = None,
               timeout: Optional[float] = None,
               retry: RetryLike = None) -> CreatedTenant:
        """Admin key only (else ForbiddenError): a tenant and its first key."""
        return CreatedTenant.from_json(self._transport.request(
            "POST", "/v1/tenants", body=_fields(name=name),
            idempotency_key=idempotency_key, timeout=timeout, retry=retry))


class Durin:
    """A client of one durin server.

    ``server`` defaults to $DURIN_SERVER, else http://127.0.0.1:7070;
    ``api_key`` to $DURIN_API_KEY. ``timeout`` (seconds) bounds connecting
    and each read of a request. ``retry`` (a Retry or a dict such as
    ``{"attempts": 3}``) is off by default.
    """

    def __init__(self, server: Optional[str] = None,
                 api_key: Optional[str] = None, *,
                 timeout: float = DEFAULT_TIMEOUT,
                 retry: RetryLike = None,
                 headers: Optional[Mapping[str, str]] = None) -> None:
        self._transport = Transport(server, api_key, timeout, retry, headers)
        self.runs = Runs(self._transport)
        self.hooks = Hooks(self._transport)
        self.instances = Instances(self._transport)
        self.api_keys = ApiKeys(self._transport)
        self.tenants = Tenants(self._transport)

    @property
    def server(self) -> str:
        return self._transport.server

    def worker(self, queue: str, steps: Mapping[str, "StepFunction"], *,
               concurrency: int = 1, worker_id: Optional[str] = None,
               poll_wait: float = 2.0, retry_delay: float = 0.2,
               on_outcome: Optional[Callable[[Dict[str, Any]], None]] = None,
               on_error: Optional[Callable[[BaseException], None]] = None
               ) -> "Worker":
        """A worker for ``queue`` (not started: call run() or start())."""
        from .worker import Worker
        return Worker(self._transport, queue, steps, concurrency=concurrency,
                      worker_id=worker_id, poll_wait=poll_wait,
                      retry_delay=retry_delay, on_outcome=on_outcome,
                      on_error=on_error)
