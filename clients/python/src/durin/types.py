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
    cancelled (or blocked, while held)."""

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
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        """Completed, failed or cancelled."""
        return self.status in ("completed", "failed", "cancelled")

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
