"""Worker: runs the steps of one task queue in this process, the way
durin::worker (include/durin/worker.hpp) does in C++.

One thread polls for as many tasks as runners are free (``maxTasks``),
``concurrency`` runner threads run them, one thread reports finished
outcomes in batches (POST /v1/tasks/report): whatever finished while the
previous report was on its way goes in the next one. The server fences
every report by lease owner and attempt: a late one is answered
``recorded: false`` and changes nothing, and the worker goes on.

Steps run at least once: make their effects idempotent with
``meta.step_id``.

    def charge(args, meta):
        order_id, index = args
        return payments.charge(order_id, key=meta.step_id)

    worker = durin.worker("payments", {"charge": charge}, concurrency=4)
    worker.run()  # until worker.stop() from another thread or a signal handler
"""

from __future__ import annotations

import collections
import json
import os
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional

from ._http import Transport
from .errors import (BadRequestError, DurinApiError, DurinError, FatalError,
                     ForbiddenError, NotFoundError, RetryableError,
                     UnauthorizedError)

REPORTS_PER_REQUEST_MAX = 256
REPORT_TRIES_MAX = 5
MESSAGE_BYTES_MAX = 4096

# Errors polling again cannot fix: the worker stops.
_FATAL = (BadRequestError, UnauthorizedError, ForbiddenError, NotFoundError)


def _utf8_prefix(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore")


@dataclass
class StepMeta:
    """What a step knows about the attempt it runs in."""

    step_id: str  # the same on every attempt: the idempotency key
    attempt_id: str  # new on every attempt
    attempt: int  # 1 for the first
    step_name: str
    run_id: str
    instance_id: str
    task_queue: str
    lease_expires_at_ms: int
    worker_id: str
    _beat: Callable[[Dict[str, Any]], bool] = field(repr=False, default=lambda body: True)
    _stop: threading.Event = field(repr=False, default_factory=threading.Event)

    def heartbeat(self, message: Optional[str] = None,
                  current: Optional[int] = None,
                  total: Optional[int] = None) -> bool:
        """Renews the lease and records progress; False when the step
        should stop (the run was cancelled, or this attempt is stale)."""
        body: Dict[str, Any] = {}
        if message:
            body["message"] = _utf8_prefix(str(message), MESSAGE_BYTES_MAX)
        if current is not None:
            body["current"] = current
        if total is not None:
            body["total"] = total
        go_on = self._beat(body)
        if not go_on:
            self._stop.set()
        return go_on

    @property
    def should_stop(self) -> bool:
        """True once a heartbeat learned that this attempt should stop."""
        return self._stop.is_set()


StepFunction = Callable[[List[Any], StepMeta], Any]


@dataclass
class WorkerStats:
    tasks: int = 0  # claimed
    recorded: int = 0  # outcomes the server recorded
    refused: int = 0  # outcomes refused as late (stale, cancelled)
    errors: int = 0  # failed requests


class Worker:
    """Polls ``queue`` and runs ``steps`` (a mapping of step name to
    ``fn(args, meta)``) until stop(). Thread-safety: run() blocks its
    caller; stop() may be called from any thread and from a signal handler
    (it only sets a flag)."""

    def __init__(self, transport: Transport, queue: str,
                 steps: Mapping[str, StepFunction], *, concurrency: int = 1,
                 worker_id: Optional[str] = None, poll_wait: float = 2.0,
                 retry_delay: float = 0.2,
                 on_outcome: Optional[Callable[[Dict[str, Any]], None]] = None,
                 on_error: Optional[Callable[[BaseException], None]] = None
                 ) -> None:
        if not isinstance(queue, str) or queue == "":
            raise ValueError("queue must be a non-empty string")
        if not isinstance(concurrency, int) or not 1 <= concurrency <= 256:
            raise ValueError("concurrency must be an integer from 1 to 256")
        self._transport = transport
        self.queue = queue
        self.steps = dict(steps)
        self.concurrency = concurrency
        self.worker_id = worker_id or "py-%s-%d-%s" % (
            socket.gethostname(), os.getpid(), os.urandom(3).hex())
        self.poll_wait = poll_wait
        self.retry_delay = retry_delay
        self.on_outcome = on_outcome
        self.on_error = on_error
        self.error: Optional[BaseException] = None  # what stopped it, if fatal
        self._stats = WorkerStats()
        self._lock = threading.Condition()
        self._stopping = threading.Event()
        self._in_hand = 0  # claimed, not finished running
        self._ready: Deque[Dict[str, Any]] = collections.deque()
        self._finished: Deque[Dict[str, Any]] = collections.deque()
        self._polling = True
        self._running = True
        self._thread: Optional[threading.Thread] = None

    @property
    def stats(self) -> WorkerStats:
        with self._lock:
            return WorkerStats(**vars(self._stats))

    def stop(self) -> None:
        """Graceful: no new poll starts (the one on its way is answered
        within poll_wait and its tasks run); the tasks in hand finish and
        are reported before run() returns."""
        self._stopping.set()

    def start(self) -> "Worker":
        """Runs the worker on a thread of its own; join() waits for it."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run_quietly,
                                            name="durin-worker-" + self.queue,
                                            daemon=True)
            self._thread.start()
        return self

    def join(self, timeout: Optional[float] = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run_quietly(self) -> None:
        try:
            self.run()
        except DurinError:
            pass  # kept in self.error

    def run(self) -> None:
        """Polls and runs tasks until stop(). Returns once every claimed
        task ran and its outcome was reported (or given up after 5 failed
        tries: its lease then expires and the server delivers it again).
        Raises the error when a poll was refused for good (400, 401, 403,
        404), after the tasks in hand were reported."""
        runners = [threading.Thread(target=self._run_tasks, daemon=True,
                                    name="durin-runner-%d" % i)
                   for i in range(self.concurrency)]
        reporter = threading.Thread(target=self._report, daemon=True,
                                    name="durin-reporter")
        for thread in runners:
            thread.start()
        reporter.start()
        try:
            self._poll()
        except DurinError as error:
            self.error = error
        finally:
            with self._lock:
                self._polling = False
                self._lock.notify_all()
            for thread in runners:
                thread.join()
            with self._lock:
                self._running = False
                self._lock.notify_all()
            reporter.join()
        if self.error is not None:
            raise self.error

    def _failed(self, error: BaseException) -> None:
        with self._lock:
            self._stats.errors += 1
        if self.on_error is not None:
            try:
                self.on_error(error)
            except Exception:
                pass  # the callback's failure is not the worker's

    def _poll(self) -> None:
        path = "/v1/task-queues/%s/poll" % urllib.parse.quote(self.queue, safe="")
        polls = 0
        while not self._stopping.is_set():
            with self._lock:
                while self._in_hand >= self.concurrency and not self._stopping.is_set():
                    self._lock.wait(0.1)
                free = self.concurrency - self._in_hand
            if self._stopping.is_set():
                return
            try:
                # A retried poll keeps its id, so a lost answer's tasks come
                # back instead of more being leased.
                answer = self._transport.request(
                    "POST", path,
                    body={"workerId": self.worker_id,
                          "pollRequestId": "p%d" % polls,
                          "waitMs": int(self.poll_wait * 1000),
                          "maxTasks": free},
                    timeout=self.poll_wait + 30.0, retry={"attempts": 1})
            except DurinError as error:
                self._failed(error)
                if isinstance(error, _FATAL):
                    raise
                self._stopping.wait(self.retry_delay)
                continue
            tasks = answer.get("tasks") or []
            if not tasks:
                continue
            polls += 1
            with self._lock:
                self._stats.tasks += len(tasks)
                self._in_hand += len(tasks)
                self._ready.extend(tasks)
                self._lock.notify_all()

    def _run_tasks(self) -> None:
        while True:
            with self._lock:
                while not self._ready and self._polling:
                    self._lock.wait()
                if not self._ready:
                    return
                task = self._ready.popleft()
            report = self._run_task(task)
            with self._lock:
                self._finished.append({"report": report, "tries": 0, "task": task})
                self._in_hand -= 1
                self._lock.notify_all()

    def _heartbeat(self, attempt_id: str) -> Callable[[Dict[str, Any]], bool]:
        path = "/v1/tasks/%s/heartbeat" % urllib.parse.quote(attempt_id, safe="")

        def beat(body: Dict[str, Any]) -> bool:
            body = dict(body, workerId=self.worker_id)
            try:
                answer = self._transport.request("POST", path, body=body,
                                                 retry={"attempts": 1})
            except DurinError as error:
                self._failed(error)
                if isinstance(error, DurinApiError) and error.status < 500:
                    return False  # lease-conflict: another worker holds it
                return True  # unreachable server: go on; the lease decides
            return answer.get("continue") is not False

        return beat

    def _run_task(self, task: Dict[str, Any]) -> Dict[str, Any]:
        attempt_id = str(task.get("attemptId", ""))
        meta = StepMeta(
            step_id=str(task.get("stepId", "")),
            attempt_id=attempt_id,
            attempt=int(task.get("attempt", 1)),
            step_name=str(task.get("stepName", "")),
            run_id=str(task.get("runId", "")),
            instance_id=str(task.get("instanceId") or task.get("runId", "")),
            task_queue=str(task.get("taskQueue") or self.queue),
            lease_expires_at_ms=int(task.get("leaseExpiresAtMs", 0)),
            worker_id=self.worker_id,
            _beat=self._heartbeat(attempt_id),
        )
        step = self.steps.get(meta.step_name)
        if step is None:
            return _failure(attempt_id, "worker %s has no step registered as '%s'"
                            % (self.worker_id, meta.step_name), False)
        try:
            result = step(list(task.get("args") or []), meta)
            json.dumps(result)  # raises here, not in the batch, when not JSON
            return {"attemptId": attempt_id, "outcome": "complete", "result": result}
        except FatalError as error:
            return _failure(attempt_id, str(error), False)
        except RetryableError as error:
            report = _failure(attempt_id, str(error), True)
            if error.retry_after is not None and error.retry_after >= 0:
                report["retryAfterMs"] = int(error.retry_after * 1000)
            return report
        except Exception as error:  # any other failure: the policy retries
            return _failure(attempt_id, str(error) or type(error).__name__, True)

    def _report(self) -> None:
        while True:
            with self._lock:
                while not self._finished and self._running:
                    self._lock.wait()
                if not self._finished:
                    return
                batch = []
                while self._finished and len(batch) < REPORTS_PER_REQUEST_MAX:
                    batch.append(self._finished.popleft())
            again = self._send(batch)
            kept = [item for item in again if item["tries"] + 1 < REPORT_TRIES_MAX]
            for item in kept:
                item["tries"] += 1
            if kept:
                with self._lock:
                    self._finished.extendleft(reversed(kept))
                time.sleep(self.retry_delay)

    def _send(self, batch: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """Reports ``batch``; the items to send again."""
        try:
            answer = self._transport.request(
                "POST", "/v1/tasks/report",
                body={"workerId": self.worker_id,
                      "reports": [item["report"] for item in batch]},
                retry={"attempts": 1})
        except DurinError as error:
            self._failed(error)
            # A refused request (4xx) is this worker's bug: not sent again.
            if isinstance(error, DurinApiError) and error.status < 500:
                return []
            return batch
        results = answer.get("results") or []
        again = []
        for i, item in enumerate(batch):
            result = results[i] if i < len(results) else None
            if not isinstance(result, dict) or not isinstance(result.get("recorded"), bool):
                again.append(item)  # indefinite: a repeat is answered stale if recorded
                continue
            with self._lock:
                if result["recorded"]:
                    self._stats.recorded += 1
                else:
                    self._stats.refused += 1
            if self.on_outcome is not None:
                outcome = dict(result, stepId=item["task"].get("stepId"),
                               stepName=item["task"].get("stepName"))
                try:
                    self.on_outcome(outcome)
                except Exception:
                    pass  # the callback's failure is not the worker's
        return again


def _failure(attempt_id: str, message: str, retryable: bool) -> Dict[str, Any]:
    return {"attemptId": attempt_id, "outcome": "fail",
            "message": _utf8_prefix(message or "the step failed", MESSAGE_BYTES_MAX),
            "retryable": retryable}
