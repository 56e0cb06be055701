"""The answers of the durin API as frozen dataclasses.

Field names are the server's (gateway/api.cpp) in snake_case; times are the
server's RFC 3339 strings with milliseconds (None until they happened).
Every answer keeps the JSON it was made from in ``raw``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

Json = Any


def _text(value: Any) -> Optional[str]:
    return None if value is None else str(value)


@dataclass(frozen=True)
class RunError:
    code: str
    message: str


@dataclass(frozen=True)
class Run:
    """A run: ``status`` is pending, running, waiting, completed, failed,
    cancelled, terminated (or blocked, while held). ``schedule_id`` and
    ``occurrence`` (the nominal firing time) are set when a schedule
    started it; ``start_token`` when it was started with a hook."""

    id: str
    instance_id: str
    flow: str
    status: str
    input: Json
    output: Json
    error: Optional[RunError]
    created_at: Optional[str]
    started_at: Optional[str]
    completed_at: Optional[str]
    blocked_reason: Optional[str] = None
    start_token: Optional[str] = None
    schedule_id: Optional[str] = None
    occurrence: Optional[str] = None
    # Set at start and by the flow; None when none.
    memo: Json = None
    # By name: {"type": "keyword" | "int" | "double" | "bool" | "time",
    # "value": ...}.
    search_attributes: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        """Completed, failed, cancelled or terminated."""
        return self.status in ("completed", "failed", "cancelled", "terminated")

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Run":
        error = body.get("error")
        return cls(
            id=str(body["id"]),
            instance_id=str(body.get("instanceId") or body["id"]),
            flow=str(body.get("flow", "")),
            status=str(body.get("status", "")),
            input=body.get("input"),
            output=body.get("output"),
            error=None if not isinstance(error, dict) else RunError(
                str(error.get("code", "")), str(error.get("message", ""))),
            created_at=_text(body.get("createdAt")),
            started_at=_text(body.get("startedAt")),
            completed_at=_text(body.get("completedAt")),
            blocked_reason=_text(body.get("blockedReason")),
            start_token=_text(body.get("startToken")),
            schedule_id=_text(body.get("scheduleId")),
            occurrence=_text(body.get("occurrence")),
            memo=body.get("memo"),
            search_attributes=dict(body.get("searchAttributes") or {}),
            raw=body,
        )


@dataclass(frozen=True)
class RunPage:
    """One page of ``runs.list``, newest first; ``next_cursor`` is None on
    the last page."""

    runs: List[Run]
    next_cursor: Optional[str]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "RunPage":
        return cls([Run.from_json(run) for run in body.get("runs", [])],
                   _text(body.get("nextCursor")) or None)


@dataclass(frozen=True)
class RunHistory:
    """A run's history; each event is the server's JSON object
    (``sequence``, ``kind``, ``at`` and the kind's own fields)."""

    run_id: str
    events: List[Dict[str, Any]]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "RunHistory":
        return cls(str(body.get("runId", "")), list(body.get("events", [])))


@dataclass(frozen=True)
class Hook:
    token: str
    run_id: str
    metadata: Json
    created_at: Optional[str]
    state: str
    retain_until: Optional[str]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Hook":
        return cls(str(body.get("token", "")), str(body.get("runId", "")),
                   body.get("metadata"), _text(body.get("createdAt")),
                   str(body.get("state", "")), _text(body.get("retainUntil")),
                   raw=body)


@dataclass(frozen=True)
class StartHook:
    """The start hook of ``runs.start(hook=...)``: ``min_retention`` is a
    duration ("30 days"), milliseconds, or an RFC 3339 time."""

    token: str
    min_retention: Optional[Any] = None
    metadata: Optional[Json] = None

    def to_json(self) -> Dict[str, Any]:
        body: Dict[str, Any] = {"token": self.token}
        if self.min_retention is not None:
            body["minRetention"] = self.min_retention
        if self.metadata is not None:
            body["metadata"] = self.metadata
        return body


@dataclass(frozen=True)
class Resumed:
    """``hooks.resume``: the payload is durable for run ``run_id``."""

    run_id: str


@dataclass(frozen=True)
class ApiKey:
    id: str
    name: str
    admin: bool
    created_at: Optional[str]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "ApiKey":
        return cls(str(body["id"]), str(body.get("name", "")),
                   bool(body.get("admin", False)), _text(body.get("createdAt")))


@dataclass(frozen=True)
class CreatedApiKey:
    """A new key: ``secret`` is shown this once (a replay is refused with
    ReplayWithheldError)."""

    id: str
    name: str
    secret: str = field(repr=False)
    created_at: Optional[str] = None

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "CreatedApiKey":
        return cls(str(body["id"]), str(body.get("name", "")),
                   str(body["secret"]), _text(body.get("createdAt")))


@dataclass(frozen=True)
class Revoked:
    id: str
    revoked: bool


@dataclass(frozen=True)
class TenantKey:
    id: str
    secret: str = field(repr=False)


@dataclass(frozen=True)
class CreatedTenant:
    id: str
    name: str
    api_key: TenantKey

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "CreatedTenant":
        key = body.get("apiKey", {})
        return cls(str(body["id"]), str(body.get("name", "")),
                   TenantKey(str(key.get("id", "")), str(key.get("secret", ""))))


@dataclass(frozen=True)
class MessageStart:
    """Message-with-start (``instances.send_message(start=...)``): the run
    of ``flow`` started with ``input`` when no run holds the instance."""

    flow: str
    input: Optional[Json] = None

    def to_json(self) -> Dict[str, Any]:
        body: Dict[str, Any] = {"flow": self.flow}
        if self.input is not None:
            body["input"] = self.input
        return body


@dataclass(frozen=True)
class MessageReceipt:
    """Where a message was recorded: ``sequence`` is its place in run
    ``run_id``'s history; ``started`` is True when it started that run
    (message-with-start)."""

    run_id: str
    sequence: int
    started: bool

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "MessageReceipt":
        return cls(str(body["runId"]), int(body.get("sequence", 0)),
                   bool(body.get("started", False)))


@dataclass(frozen=True)
class UpdateResult:
    """``runs.update``: ``status`` is "completed" (``result`` is the flow's)
    or "accepted" (recorded, not completed yet; ``result`` None)."""

    run_id: str
    update_id: str
    sequence: int
    status: str
    result: Json = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "UpdateResult":
        return cls(str(body["runId"]), str(body.get("updateId", "")),
                   int(body.get("sequence", 0)), str(body.get("status", "")),
                   body.get("result"), raw=body)


@dataclass(frozen=True)
class QueryResult:
    """``runs.query``: the handler's answer from the run's state now."""

    run_id: str
    query: str
    result: Json

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "QueryResult":
        return cls(str(body.get("runId", "")), str(body.get("query", "")),
                   body.get("result"))


@dataclass(frozen=True)
class ScheduleSpec:
    """When a schedule fires, as stored: ``cron`` with its ``timezone``, or
    ``interval`` (ms); ``jitter`` in ms; ``start_at``/``end_at`` RFC 3339
    or None."""

    cron: Optional[str]
    timezone: Optional[str]
    interval: Optional[int]
    jitter: int
    start_at: Optional[str]
    end_at: Optional[str]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "ScheduleSpec":
        interval = body.get("interval")
        return cls(_text(body.get("cron")), _text(body.get("timezone")),
                   None if interval is None else int(interval),
                   int(body.get("jitter") or 0), _text(body.get("startAt")),
                   _text(body.get("endAt")))


@dataclass(frozen=True)
class ScheduleAction:
    flow: str
    input: Json = None
    memo: Json = None
    # {"name": {"type", "value"}}, as a run shows them.
    search_attributes: Optional[Dict[str, Any]] = None


@dataclass(frozen=True)
class ScheduleFiring:
    """One firing: the occurrence (RFC 3339) and the run it started."""

    occurrence: str
    run_id: str

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "ScheduleFiring":
        return cls(str(body.get("occurrence", "")), str(body.get("runId", "")))


@dataclass(frozen=True)
class ScheduleInfo:
    """What a schedule did so far. ``running``: the runs it started that may
    not have ended; ``buffered`` and ``queued``: occurrences waiting."""

    fired: int
    missed_catchup: int
    skipped_overlap: int
    running: List[str]
    buffered: int
    queued: int
    last_firing: Optional[ScheduleFiring]
    recent: List[ScheduleFiring]
    last_error: Optional[str]
    created_at: Optional[str]
    updated_at: Optional[str]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "ScheduleInfo":
        last = body.get("lastFiring")
        return cls(
            fired=int(body.get("fired", 0)),
            missed_catchup=int(body.get("missedCatchup", 0)),
            skipped_overlap=int(body.get("skippedOverlap", 0)),
            running=[str(run) for run in body.get("running", [])],
            buffered=int(body.get("buffered", 0)),
            queued=int(body.get("queued", 0)),
            last_firing=ScheduleFiring.from_json(last) if isinstance(last, dict) else None,
            recent=[ScheduleFiring.from_json(one) for one in body.get("recent", [])],
            last_error=_text(body.get("lastError")),
            created_at=_text(body.get("createdAt")),
            updated_at=_text(body.get("updatedAt")),
        )


@dataclass(frozen=True)
class Schedule:
    """A schedule: its definition (``catchup_window`` in ms), ``paused``,
    ``note``, ``next_occurrence`` (None while paused or when none is left)
    and ``info``. ``created`` is set by ``schedules.create`` only: False
    when it existed with the same definition."""

    schedule_id: str
    spec: ScheduleSpec
    action: ScheduleAction
    overlap: str
    catchup_window: int
    paused: bool
    note: str
    next_occurrence: Optional[str]
    info: ScheduleInfo
    created: Optional[bool] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Schedule":
        action = body.get("action") or {}
        created = body.get("created")
        return cls(
            schedule_id=str(body["scheduleId"]),
            spec=ScheduleSpec.from_json(body.get("spec") or {}),
            action=ScheduleAction(str(action.get("flow", "")), action.get("input"),
                                  action.get("memo"),
                                  action.get("searchAttributes")),
            overlap=str(body.get("overlap", "")),
            catchup_window=int(body.get("catchupWindow", 0)),
            paused=bool(body.get("paused", False)),
            note=str(body.get("note", "")),
            next_occurrence=_text(body.get("nextOccurrence")),
            info=ScheduleInfo.from_json(body.get("info") or {}),
            created=None if created is None else bool(created),
            raw=body,
        )


@dataclass(frozen=True)
class SchedulePage:
    """One page of ``schedules.list``, by id; ``next_cursor`` is None on
    the last page."""

    schedules: List[Schedule]
    next_cursor: Optional[str]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "SchedulePage":
        return cls([Schedule.from_json(one) for one in body.get("schedules", [])],
                   _text(body.get("nextCursor")) or None)


@dataclass(frozen=True)
class Triggered:
    """``schedules.trigger``: the occurrence queued (RFC 3339)."""

    schedule_id: str
    occurrence: str


@dataclass(frozen=True)
class Backfilled:
    """``schedules.backfill``: every occurrence queued, in order."""

    schedule_id: str
    occurrences: List[str]


@dataclass(frozen=True)
class Deleted:
    schedule_id: str
    deleted: bool
