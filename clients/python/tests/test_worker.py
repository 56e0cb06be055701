"""durin's Python Worker against a real `durin serve`: remote steps of the
example flows (bin/worker_steps.cpp: acme.remote-echo on queue `workers`,
acme.pay's `charge` on `payments` with a 600 ms start-to-close timeout) run
end to end in this process; a lease lost mid-step is refused as late and
the worker goes on; stop() is graceful; step errors choose retries."""

import threading
import time
import unittest

from support import Server, eventually

from durin import (Durin, FatalError, RetryableError, UnauthorizedError,
                   WorkerStats)
from durin._http import Transport


class RecordingTransport(Transport):
    """Records the path and body of every request."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sent = []
        self._sent_lock = threading.Lock()

    def request(self, method, path, **options):
        with self._sent_lock:
            self.sent.append((path, options.get("body")))
        return super().request(method, path, **options)


class WorkerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(env={"DURIN_CHARGE_TIMEOUT_MS": "600"})
        cls.durin = Durin(cls.server.url, cls.server.api_key)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_remote_steps_run_end_to_end_through_batched_polls_and_reports(self):
        transport = RecordingTransport(self.server.url, self.server.api_key)
        metas = []
        beats = []

        def echo(args, meta):
            metas.append(meta)
            beats.append(meta.heartbeat("echoing", 1, 1))
            return {"echoed": args[0]["n"] + 1}

        from durin import Worker
        worker = Worker(transport, "workers", {"remote-echo": echo}, concurrency=3, poll_wait=0.5).start()
        try:
            runs = [self.durin.runs.start(flow="acme.remote-echo",
                                          input={"count": 1, "value": {"n": i}}, wait=False)
                    for i in range(4)]
            for i, run in enumerate(runs):
                done = self.durin.runs.wait(run.id, timeout=15)
                self.assertEqual(done.status, "completed")
                self.assertEqual(done.output, {"count": 1, "value": {"echoed": i + 1}})
        finally:
            worker.stop()
            worker.join()
        self.assertEqual(beats, [True] * 4)
        for meta in metas:
            self.assertEqual(meta.step_id, meta.run_id + "/1")
            self.assertTrue(meta.attempt_id.startswith("att_"))
            self.assertEqual((meta.attempt, meta.step_name, meta.task_queue, meta.worker_id),
                             (1, "remote-echo", "workers", worker.worker_id))
        self.assertEqual(worker.stats, WorkerStats(tasks=4, recorded=4, refused=0, errors=0))
        polls = [body for path, body in transport.sent if path == "/v1/task-queues/workers/poll"]
        self.assertTrue(polls)
        for body in polls:
            self.assertTrue(1 <= body["maxTasks"] <= 3, body)
        reports = [body for path, body in transport.sent if path == "/v1/tasks/report"]
        self.assertEqual(sum(len(body["reports"]) for body in reports), 4)
        self.assertFalse([path for path, _ in transport.sent
                          if path.endswith(("/complete", "/fail"))], "only the batched route")

    def test_lease_lost_mid_step_late_report_is_refused_and_the_worker_goes_on(self):
        outcomes = []
        attempts = []
        seen_stop = []

        def charge(args, meta):
            order_id, index = args
            attempts.append((meta.step_id, meta.attempt_id, meta.attempt))
            if order_id == "L-1" and meta.attempt == 1:
                time.sleep(1.5)  # outlives the 600 ms start-to-close timeout
                seen_stop.append((meta.heartbeat("still charging"), meta.should_stop))
            return {"charged": meta.step_id, "attemptId": meta.attempt_id,
                    "orderId": order_id, "index": index}

        worker = self.durin.worker("payments", {"charge": charge}, concurrency=2, poll_wait=0.5,
                                   on_outcome=outcomes.append).start()
        try:
            run = self.durin.runs.start(flow="acme.pay", input={"orderId": "L-1"}, wait=False)
            done = self.durin.runs.wait(run.id, timeout=15)
            self.assertEqual(done.status, "completed")
            eventually(lambda: len(outcomes) == 2)
            (first_step, first_attempt, _), (second_step, second_attempt, number) = attempts
            self.assertEqual(first_step, second_step, "one step, two attempts")
            self.assertNotEqual(first_attempt, second_attempt)
            self.assertEqual(number, 2)
            self.assertEqual(seen_stop, [(False, True)])
            self.assertEqual(done.output["receipts"][0]["attemptId"], second_attempt)
            late = [o for o in outcomes if o["attemptId"] == first_attempt][0]
            self.assertEqual((late["recorded"], late["reason"]), (False, "stale_attempt"))
            self.assertTrue([o for o in outcomes if o["attemptId"] == second_attempt][0]["recorded"])
            # It goes on: the next run's charges are taken by the same worker.
            paid = self.durin.runs.wait(self.durin.runs.start(
                flow="acme.pay", input={"orderId": "L-2", "charges": 2}, wait=False).id, timeout=15)
            self.assertEqual(paid.status, "completed")
            self.assertEqual(len(paid.output["receipts"]), 2)
        finally:
            worker.stop()
            worker.join()
        self.assertEqual((worker.stats.refused, worker.stats.recorded), (1, 3))

    def test_stop_is_graceful_the_step_in_hand_finishes_and_is_reported(self):
        started = threading.Event()

        def slow(args, meta):
            started.set()
            time.sleep(0.7)
            return args[0]

        worker = self.durin.worker("workers", {"remote-echo": slow}, poll_wait=0.5).start()
        run = self.durin.runs.start(flow="acme.remote-echo", input={"value": "graceful"}, wait=False)
        self.assertTrue(started.wait(10))
        began = time.monotonic()
        worker.stop()
        worker.join()
        self.assertGreaterEqual(time.monotonic() - began, 0.4, "stop waited for the step")
        self.assertEqual(worker.stats.recorded, 1)
        done = self.durin.runs.wait(run.id, timeout=5)
        self.assertEqual((done.status, done.output["value"]), ("completed", "graceful"))

    def test_retryable_error_retries_fatal_error_and_an_unknown_step_fail_for_good(self):
        def echo(args, meta):
            if args[0] == "fatal":
                raise FatalError("the card was declined")
            if meta.attempt == 1:
                raise RetryableError("busy, try later", retry_after=0.05)
            return {"attempt": meta.attempt}

        worker = self.durin.worker("workers", {"remote-echo": echo}, poll_wait=0.5).start()
        try:
            # A retry's backoff is a durable timer: the run is waiting
            # meanwhile, so follow it with runs.wait.
            started = self.durin.runs.start(flow="acme.remote-echo", input={"value": "retry"}, wait=False)
            retried = self.durin.runs.wait(started.id, timeout=10)
            self.assertEqual(retried.status, "completed")
            self.assertEqual(retried.output["value"], {"attempt": 2})
            failed = self.durin.runs.start(flow="acme.remote-echo", input={"value": "fatal"})
            self.assertEqual(failed.status, "failed")
            self.assertIn("the card was declined", failed.error.message)
        finally:
            worker.stop()
            worker.join()
        none = self.durin.worker("workers", {}, poll_wait=0.5).start()
        try:
            failed = self.durin.runs.start(flow="acme.remote-echo", input={"value": 1})
            self.assertEqual(failed.status, "failed")
            self.assertIn("no step registered as 'remote-echo'", failed.error.message)
        finally:
            none.stop()
            none.join()

    def test_worker_whose_key_is_refused_stops_with_unauthorized(self):
        worker = Durin(self.server.url, "revoked-or-wrong").worker("workers", {})
        with self.assertRaises(UnauthorizedError) as caught:
            worker.run()
        self.assertEqual(caught.exception.status, 401)
        self.assertIs(worker.error, caught.exception)
        self.assertEqual(worker.stats.errors, 1)


if __name__ == "__main__":
    unittest.main()
