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

import datetime
import json
import time
import urllib.parse
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterator, List,
                    Mapping, Optional, Union)

from ._http import DEFAULT_TIMEOUT, Retry, RetryLike, Transport
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
                    Hook, Json, MessageReceipt, MessageStart, QueryResult,
                    Resumed, Revoked, Run, RunHistory, RunPage, Schedule,
                    SchedulePage, StartHook, Triggered, UpdateResult)

if TYPE_CHECKING:
    from .worker import StepFunction, Worker

__all__ = [
    "Durin", "Retry",
    "DurinError", "DurinApiError", "BadRequestError", "UnauthorizedError",
    "ForbiddenError", "NotFoundError", "ConflictError",
    "IdempotencyKeyInFlightError", "ReplayWithheldError", "HookConflictError",
    "RunFinishedError", "ScheduleExistsError", "HandlerNotFoundError",
    "UnprocessableError", "UpdateRejectedError", "QueryRefusedError",
    "UnavailableError", "ShardUnavailableError", "ConnectionError",
    "TimeoutError", "FatalError", "RetryableError",
]

Duration = Union[str, int, float, datetime.timedelta]
Instant = Union[str, datetime.datetime]


def _segment(value: str) -> str:
    if not isinstance(value, str) or value == "":
        raise ValueError("an id or token must be a non-empty string")
    return urllib.parse.quote(value, safe="")


def _fields(**values: Any) -> Dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


def _duration(value: Optional[Duration]) -> Any:
    """A duration as the server takes it: text ("1m") or milliseconds."""
    if isinstance(value, datetime.timedelta):
        ms = value.total_seconds() * 1000
        return int(ms) if ms == int(ms) else ms
    return value


def _instant(value: Optional[Instant], name: str) -> Optional[str]:
    """RFC 3339 text; a datetime must carry its time zone."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("%s: a datetime needs a time zone" % name)
        utc = value.astimezone(datetime.timezone.utc)
        return utc.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (utc.microsecond // 1000)
    raise TypeError("%s must be a datetime or RFC 3339 text" % name)


def _message(transport: Transport, path: str, payload: Json,
             body: Dict[str, Any], idempotency_key: Optional[str],
             timeout: Optional[float], retry: RetryLike) -> MessageReceipt:
    """A message's key travels in its body (recorded once per run, or
    instance, and name), not as Idempotency-Key; with it the request is
    safe to retry."""
    body = dict(body, payload=payload)
    body.update(_fields(idempotencyKey=idempotency_key))
    return MessageReceipt.from_json(transport.request(
        "POST", path, body=body, idempotent=idempotency_key is not None,
        timeout=timeout, retry=retry))


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
              memo: Json = None,
              search_attributes: Optional[Mapping[str, Any]] = None,
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
                       commandId=command_id, memo=memo,
                       searchAttributes=(None if search_attributes is None
                                         else dict(search_attributes)))
        return Run.from_json(self._transport.request(
            "POST", "/v1/runs", body=body, idempotency_key=idempotency_key,
            timeout=timeout, retry=retry))

    def get(self, run_id: str, *, timeout: Optional[float] = None,
            retry: RetryLike = None) -> Run:
        return Run.from_json(self._transport.request(
            "GET", "/v1/runs/" + _segment(run_id), timeout=timeout, retry=retry))

    def list(self, *, status: Optional[str] = None, flow: Optional[str] = None,
             schedule_id: Optional[str] = None,
             query: Optional[str] = None,
             limit: Optional[int] = None, cursor: Optional[str] = None,
             timeout: Optional[float] = None,
             retry: RetryLike = None) -> RunPage:
        """One page, newest first (``limit`` 1..1000, default 100);
        ``schedule_id``: only the runs that schedule started; ``query``:
        only the runs it matches (README: the query language)."""
        return RunPage.from_json(self._transport.request(
            "GET", "/v1/runs",
            query={"status": status, "flow": flow, "scheduleId": schedule_id,
                   "query": query, "limit": limit, "cursor": cursor},
            timeout=timeout, retry=retry))

    def list_all(self, *, status: Optional[str] = None,
                 flow: Optional[str] = None,
                 schedule_id: Optional[str] = None,
                 query: Optional[str] = None,
                 limit: Optional[int] = None,
                 cursor: Optional[str] = None,
                 timeout: Optional[float] = None,
                 retry: RetryLike = None) -> Iterator[Run]:
        """Every run of every page, following next_cursor; ``limit`` is the
        page size. Pages are fetched as the iteration reaches them."""
        while True:
            page = self.list(status=status, flow=flow, schedule_id=schedule_id,
                             query=query, limit=limit, cursor=cursor,
                             timeout=timeout, retry=retry)
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

    def terminate(self, run_id: str, *, reason: Optional[str] = None,
                  command_id: Optional[str] = None,
                  idempotency_key: Optional[str] = None,
                  timeout: Optional[float] = None,
                  retry: RetryLike = None) -> Run:
        """A forced stop: the run ends as terminated at once, running none
        of its code. A repeated ``command_id`` answers it again; a run that
        already ended is RunFinishedError."""
        return Run.from_json(self._transport.request(
            "POST", "/v1/runs/%s/terminate" % _segment(run_id),
            body=_fields(reason=reason, commandId=command_id),
            idempotency_key=idempotency_key, timeout=timeout, retry=retry))

    def send_message(self, run_id: str, name: str, payload: Json = None, *,
                     idempotency_key: Optional[str] = None,
                     timeout: Optional[float] = None,
                     retry: RetryLike = None) -> MessageReceipt:
        """Records message ``name`` in the run's history; answers once
        durable. A repeated ``idempotency_key`` (per run and name) records
        nothing and answers as the first, also after the run ended."""
        return _message(self._transport, "/v1/runs/%s/messages/%s" % (
            _segment(run_id), _segment(name)), payload, {}, idempotency_key,
            timeout, retry)

    def update(self, run_id: str, name: str, args: Json = None, *,
               update_id: Optional[str] = None,
               wait_for: Optional[str] = None,
               timeout: Optional[float] = None,
               retry: RetryLike = None) -> UpdateResult:
        """An update: validated by the flow (UpdateRejectedError, nothing
        recorded), recorded, completed by flow code. By default it answers
        once completed (or accepted, after 25 s); ``wait_for="accepted"``
        once accepted. A repeated ``update_id`` answers the first update's
        handle or result (and makes the call safe to retry)."""
        body = _fields(args=args, updateId=update_id, waitFor=wait_for)
        return UpdateResult.from_json(self._transport.request(
            "POST", "/v1/runs/%s/updates/%s" % (_segment(run_id), _segment(name)),
            body=body, idempotent=update_id is not None, timeout=timeout,
            retry=retry))

    def query(self, run_id: str, name: str, args: Json = None, *,
              timeout: Optional[float] = None,
              retry: RetryLike = None) -> QueryResult:
        """Reads the flow's state now; records nothing. ``args`` (any JSON)
        is sent as ?args=JSON. QueryRefusedError when the handler tries a
        durable call; RunFinishedError once the run ended."""
        query = None if args is None else {
            "args": json.dumps(args, separators=(",", ":"))}
        return QueryResult.from_json(self._transport.request(
            "GET", "/v1/runs/%s/queries/%s" % (_segment(run_id), _segment(name)),
            query=query, timeout=timeout, retry=retry))

    def wait(self, run_id: str, timeout: float = 60.0) -> Run:
        """Waits until the run completed, failed, was cancelled or
        terminated, by long polls of the server (GET /v1/runs/{id}?waitMs=,
        at most 25 s each: it answers as the run ends). Raises
        durin.TimeoutError (with ``run`` as last seen) after ``timeout``
        seconds."""
        deadline = time.monotonic() + timeout
        while True:
            asked = time.monotonic()
            wait_ms = int(max(0.0, min(deadline - asked, 25.0)) * 1000)
            run = Run.from_json(self._transport.request(
                "GET", "/v1/runs/" + _segment(run_id),
                query={"waitMs": str(wait_ms)}, timeout=wait_ms / 1000 + 10))
            if run.finished:
                return run
            if time.monotonic() >= deadline:
                raise TimeoutError("run %s did not finish within %g s (it is %s)"
                                   % (run_id, timeout, run.status), run=run)
            if time.monotonic() - asked < 0.05:
                time.sleep(0.05)  # a node that answers at once (draining)


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

    def send_message(self, instance_id: str, name: str, payload: Json = None,
                     *, idempotency_key: Optional[str] = None,
                     start: Union[MessageStart, Mapping[str, Any], None] = None,
                     timeout: Optional[float] = None,
                     retry: RetryLike = None) -> MessageReceipt:
        """A message to the active run holding ``instance_id``
        (NotFoundError when none); keys are per instance and name. With
        ``start`` (a MessageStart or {"flow", "input"}) a run is started for
        the instance when none holds it, the message its first event
        (``started`` True); its retry, also after that run closed, answers
        as the first and starts nothing."""
        body: Dict[str, Any] = {}
        if start is not None:
            body["start"] = start.to_json() if isinstance(start, MessageStart) else dict(start)
            flow = body["start"].get("flow")
            if not isinstance(flow, str) or flow == "":
                raise ValueError("start needs a flow (a non-empty string)")
        return _message(self._transport, "/v1/instances/%s/messages/%s" % (
            _segment(instance_id), _segment(name)), payload, body,
            idempotency_key, timeout, retry)


class Schedules:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def create(self, schedule_id: str, flow: str, input: Json = None, *,
               cron: Optional[str] = None, timezone: Optional[str] = None,
               interval: Optional[Duration] = None,
               jitter: Optional[Duration] = None,
               start_at: Optional[Instant] = None,
               end_at: Optional[Instant] = None,
               overlap: Optional[str] = None,
               catchup_window: Optional[Duration] = None,
               paused: Optional[bool] = None, note: Optional[str] = None,
               memo: Json = None,
               search_attributes: Optional[Mapping[str, Any]] = None,
               idempotency_key: Optional[str] = None,
               timeout: Optional[float] = None,
               retry: RetryLike = None) -> Schedule:
        """A schedule starting ``flow`` with ``input`` at each occurrence of
        ``cron`` (in ``timezone``, default UTC) or of ``interval``; each run
        gets ``memo`` and ``search_attributes`` (as ``runs.start``).
        Durations are text ("1m"), milliseconds or timedeltas; times RFC
        3339 text or aware datetimes. ``overlap``: skip (default),
        buffer_one, buffer_all, allow_all, cancel_other, terminate_other.
        The same definition again answers the schedule as it is
        (``created`` False); another one for the id is
        ScheduleExistsError."""
        if not isinstance(schedule_id, str) or schedule_id == "":
            raise ValueError("schedule_id must be a non-empty string")
        if not isinstance(flow, str) or flow == "":
            raise ValueError("flow must be a non-empty string")
        spec = _fields(cron=cron, timezone=timezone,
                       interval=_duration(interval), jitter=_duration(jitter),
                       startAt=_instant(start_at, "start_at"),
                       endAt=_instant(end_at, "end_at"))
        body = _fields(scheduleId=schedule_id, spec=spec,
                       action=_fields(
                           flow=flow, input=input, memo=memo,
                           searchAttributes=(None if search_attributes is None
                                             else dict(search_attributes))),
                       overlap=overlap,
                       catchupWindow=_duration(catchup_window),
                       paused=paused, note=note)
        return Schedule.from_json(self._transport.request(
            "POST", "/v1/schedules", body=body,
            idempotency_key=idempotency_key, timeout=timeout, retry=retry))

    def get(self, schedule_id: str, *, timeout: Optional[float] = None,
            retry: RetryLike = None) -> Schedule:
        return Schedule.from_json(self._transport.request(
            "GET", "/v1/schedules/" + _segment(schedule_id), timeout=timeout,
            retry=retry))

    def list(self, *, limit: Optional[int] = None,
             cursor: Optional[str] = None, timeout: Optional[float] = None,
             retry: RetryLike = None) -> SchedulePage:
        """One page, by id (``limit`` 1..1000, default 100)."""
        return SchedulePage.from_json(self._transport.request(
            "GET", "/v1/schedules", query={"limit": limit, "cursor": cursor},
            timeout=timeout, retry=retry))

    def list_all(self, *, limit: Optional[int] = None,
                 cursor: Optional[str] = None,
                 timeout: Optional[float] = None,
                 retry: RetryLike = None) -> Iterator[Schedule]:
        """Every schedule of every page, following next_cursor."""
        while True:
            page = self.list(limit=limit, cursor=cursor, timeout=timeout,
                             retry=retry)
            for schedule in page.schedules:
                yield schedule
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def delete(self, schedule_id: str, *,
               idempotency_key: Optional[str] = None,
               timeout: Optional[float] = None,
               retry: RetryLike = None) -> Deleted:
        """Removes the schedule; the runs it started stay."""
        answer = self._transport.request(
            "DELETE", "/v1/schedules/" + _segment(schedule_id),
            idempotency_key=idempotency_key, timeout=timeout, retry=retry)
        return Deleted(str(answer["scheduleId"]), bool(answer.get("deleted")))

    def pause(self, schedule_id: str, *, note: Optional[str] = None,
              idempotency_key: Optional[str] = None,
              timeout: Optional[float] = None,
              retry: RetryLike = None) -> Schedule:
        """Nothing fires while paused (but triggers and backfills). ``note``
        replaces the schedule's note (None clears it)."""
        return self._change(schedule_id, "pause", _fields(note=note),
                            idempotency_key, timeout, retry, Schedule.from_json)

    def unpause(self, schedule_id: str, *, note: Optional[str] = None,
                idempotency_key: Optional[str] = None,
                timeout: Optional[float] = None,
                retry: RetryLike = None) -> Schedule:
        """Goes on from the next occurrence after now (the paused ones are
        not caught up)."""
        return self._change(schedule_id, "unpause", _fields(note=note),
                            idempotency_key, timeout, retry, Schedule.from_json)

    def trigger(self, schedule_id: str, *,
                idempotency_key: Optional[str] = None,
                timeout: Optional[float] = None,
                retry: RetryLike = None) -> Triggered:
        """One occurrence at now, fired under the overlap policy (also while
        paused)."""
        return self._change(
            schedule_id, "trigger", None, idempotency_key, timeout, retry,
            lambda answer: Triggered(str(answer["scheduleId"]),
                                     str(answer["occurrence"])))

    def backfill(self, schedule_id: str, start_at: Instant, end_at: Instant,
                 *, idempotency_key: Optional[str] = None,
                 timeout: Optional[float] = None,
                 retry: RetryLike = None) -> Backfilled:
        """Every occurrence of the spec in [start_at, end_at] (at most
        1,000), fired in order under the overlap policy; a range backfilled
        twice fires twice (unless repeated with its idempotency key)."""
        body = {"startAt": _instant(start_at, "start_at"),
                "endAt": _instant(end_at, "end_at")}
        if body["startAt"] is None or body["endAt"] is None:
            raise ValueError("backfill needs start_at and end_at")
        return self._change(
            schedule_id, "backfill", body, idempotency_key, timeout, retry,
            lambda answer: Backfilled(str(answer["scheduleId"]),
                                      [str(one) for one in answer.get("occurrences", [])]))

    def _change(self, schedule_id: str, verb: str,
                body: Optional[Dict[str, Any]],
                idempotency_key: Optional[str], timeout: Optional[float],
                retry: RetryLike, make: Callable[[Dict[str, Any]], Any]) -> Any:
        return make(self._transport.request(
            "POST", "/v1/schedules/%s/%s" % (_segment(schedule_id), verb),
            body=body, idempotency_key=idempotency_key, timeout=timeout,
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
        self.schedules = Schedules(self._transport)

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
