"""One HTTP exchange with a durin server, and the opt-in retry around it.

Uses http.client directly (no proxies from the environment, no redirects),
one connection per request, so a client may be shared by threads.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import os
import random
import socket
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

from .errors import (ConnectionError, DurinError, TimeoutError,
                     UnavailableError, api_error)

DEFAULT_SERVER = "http://127.0.0.1:7070"
DEFAULT_TIMEOUT = 60.0
# A Retry-After longer than this is not waited for in full.
RETRY_AFTER_MAX = 60.0


@dataclass(frozen=True)
class Retry:
    """Opt-in retry of requests that got no answer, timed out, or got 503.

    ``attempts`` counts every try, the first included: 1 never retries. The
    wait doubles from ``initial_delay`` (seconds, ±20% jitter) up to
    ``max_delay``, and is at least the server's Retry-After (up to 60 s).
    Only GETs and requests with an idempotency key are retried, and any
    request whose connection was refused (it was never sent).
    """

    attempts: int = 1
    initial_delay: float = 0.5
    max_delay: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or not 1 <= self.attempts <= 100:
            raise ValueError("retry attempts must be an integer from 1 to 100")

    def delay(self, tried: int, retry_after: Optional[float],
              unit: Optional[float] = None) -> float:
        """Seconds to wait before try ``tried + 1``."""
        base = min(self.max_delay, self.initial_delay * 2 ** (tried - 1))
        jitter = random.random() if unit is None else unit
        waited = min(self.max_delay, base * (0.8 + 0.4 * jitter))
        told = 0.0 if retry_after is None else min(RETRY_AFTER_MAX, retry_after)
        return max(waited, told)


RetryLike = Union[Retry, Mapping[str, Any], None]


def as_retry(value: RetryLike) -> Retry:
    if value is None:
        return Retry()
    if isinstance(value, Retry):
        return value
    return Retry(**dict(value))


def parse_retry_after(text: Optional[str]) -> Optional[float]:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not text:
        return None
    text = text.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class Transport:
    def __init__(self, server: Optional[str] = None,
                 api_key: Optional[str] = None,
                 timeout: float = DEFAULT_TIMEOUT,
                 retry: RetryLike = None,
                 headers: Optional[Mapping[str, str]] = None) -> None:
        chosen = server or os.environ.get("DURIN_SERVER") or DEFAULT_SERVER
        self.server = chosen.rstrip("/")
        parts = urllib.parse.urlsplit(self.server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("server must be an http:// or https:// URL, not %r"
                             % chosen)
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._base_path = parts.path.rstrip("/")
        self.api_key = api_key if api_key is not None else (
            os.environ.get("DURIN_API_KEY") or None)
        self.timeout = timeout
        self.retry = as_retry(retry)
        self.headers = dict(headers or {})
        # Test seam: how a request waits between tries.
        self.sleep: Callable[[float], None] = time.sleep

    def request(self, method: str, path: str, *,
                query: Optional[Mapping[str, Any]] = None,
                body: Any = None,
                idempotency_key: Optional[str] = None,
                idempotent: bool = False,
                timeout: Optional[float] = None,
                retry: RetryLike = None) -> Any:
        """Sends one request, retried per the policy; the parsed JSON.
        ``idempotent``: the body names the work itself (a message's
        idempotency key, an update's id), so the request is as safe to send
        again as one with an Idempotency-Key."""
        policy = self.retry if retry is None else as_retry(retry)
        safe = method == "GET" or idempotency_key is not None or idempotent
        tried = 0
        while True:
            tried += 1
            try:
                return self._once(method, path, query, body, idempotency_key,
                                  timeout)
            except DurinError as error:
                if tried >= policy.attempts or not _retryable(error, safe):
                    raise
                self.sleep(policy.delay(tried, getattr(error, "retry_after",
                                                       None)))

    def _once(self, method: str, path: str,
              query: Optional[Mapping[str, Any]], body: Any,
              idempotency_key: Optional[str],
              timeout: Optional[float]) -> Any:
        target = self._base_path + path
        if query:
            pairs = [(name, _query_value(value))
                     for name, value in query.items() if value is not None]
            if pairs:
                target += "?" + urllib.parse.urlencode(pairs)
        headers = {"Accept": "application/json"}
        headers.update(self.headers)
        if self.api_key is not None:
            headers["Authorization"] = "Bearer " + self.api_key
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        seconds = self.timeout if timeout is None else timeout
        where = "%s %s" % (method, path)
        if self._scheme == "https":
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                self._host, self._port, timeout=seconds)
        else:
            connection = http.client.HTTPConnection(self._host, self._port,
                                                    timeout=seconds)
        try:
            try:
                connection.request(method, target, body=data, headers=headers)
                response = connection.getresponse()
                status = response.status
                retry_after = response.getheader("Retry-After")
                raw = response.read()
            except socket.timeout as error:  # TimeoutError from 3.10 on
                raise TimeoutError("%s: no answer within %g s" % (where, seconds)) from error
            except ConnectionRefusedError as error:
                raise ConnectionError("%s: connection to %s refused" % (where, self.server),
                                      refused=True) from error
            except (OSError, http.client.HTTPException) as error:
                raise ConnectionError("%s: no answer from %s (%s)" % (
                    where, self.server, type(error).__name__)) from error
        finally:
            connection.close()
        parsed: Any = None
        if raw:
            try:
                parsed = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                parsed = None
        if 200 <= status < 300:
            if parsed is None and raw:
                raise DurinError("%s: the answer is not JSON" % where)
            return {} if parsed is None else parsed
        raise api_error(status, parsed, parse_retry_after(retry_after), method, path)


def _query_value(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


def _retryable(error: DurinError, safe: bool) -> bool:
    """Only what may not have reached the server or may answer differently
    later: no answer, or 503. An unkeyed mutation only when its connection
    was refused (it was never sent)."""
    if isinstance(error, ConnectionError):
        return safe or error.refused
    return safe and isinstance(error, (TimeoutError, UnavailableError))
