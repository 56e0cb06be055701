"""The opt-in retry: what is retried (no answer, a timeout, 503), with the
same idempotency key and body, after at least Retry-After; what never is
(4xx, 409 in flight, an unkeyed POST that may have been sent). A real durin
server does not fail on demand, so these run against a scripted HTTP server
on 127.0.0.1 in this process, which records every request."""

import http.server
import json
import socket
import threading
import time
import unittest
import urllib.parse

import support  # noqa: F401  (puts src/ on sys.path)

import durin
from durin import (Durin, IdempotencyKeyInFlightError, QueryRefusedError,
                   Retry, ShardUnavailableError, UnavailableError,
                   UnprocessableError, UpdateRejectedError)
from durin._http import parse_retry_after


class Stub:
    """Answers each request with the next entry of ``script``:
    (status, body, headers), "reset" (close unanswered) or "hang"."""

    def __init__(self):
        self.script = []
        self.requests = []
        self.release = threading.Event()
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def handle_one(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                stub.requests.append({"method": self.command, "path": self.path,
                                      "headers": dict(self.headers), "body": body,
                                      "at": time.monotonic()})
                step = stub.script.pop(0) if stub.script else (200, {"id": "run_x", "status": "completed"}, {})
                if step == "reset":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if step == "hang":
                    stub.release.wait(10)
                    self.close_connection = True
                    return
                status, answer, headers = step
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = handle_one

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def unavailable(seconds=None):
    headers = {} if seconds is None else {"Retry-After": str(seconds)}
    return (503, {"code": "storage-error", "message": "the write may or may not have landed"}, headers)


class RetryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stub = Stub()

    @classmethod
    def tearDownClass(cls):
        cls.stub.close()

    def setUp(self):
        self.stub.script = []
        self.stub.requests = []

    def client(self, **options):
        return Durin(self.stub.url, "k", **options)

    def test_without_retry_a_503_is_raised_at_once_with_retry_after(self):
        self.stub.script = [unavailable(2)]
        with self.assertRaises(UnavailableError) as caught:
            self.client().runs.start(flow="f", idempotency_key="k-1")
        self.assertNotIsInstance(caught.exception, ShardUnavailableError)
        self.assertEqual((caught.exception.status, caught.exception.code,
                          caught.exception.retry_after), (503, "storage-error", 2))
        self.assertEqual(len(self.stub.requests), 1)

    def test_keyed_start_is_sent_again_with_the_same_key_and_body_after_retry_after(self):
        self.stub.script = [unavailable(1), (202, {"id": "run_1", "status": "pending"}, {})]
        client = self.client(retry=Retry(attempts=3, initial_delay=0.01))
        run = client.runs.start(flow="f", input={"a": 1}, wait=False, idempotency_key="k-2")
        self.assertEqual(run.id, "run_1")
        first, second = self.stub.requests
        self.assertEqual(first["headers"]["Idempotency-Key"], "k-2")
        self.assertEqual(second["headers"]["Idempotency-Key"], "k-2")
        self.assertEqual(second["body"], first["body"])
        self.assertEqual(json.loads(first["body"]), {"flow": "f", "input": {"a": 1}, "wait": False})
        waited = second["at"] - first["at"]
        self.assertGreaterEqual(waited, 0.99)
        self.assertLess(waited, 3)

    def test_gives_up_after_attempts_tries_in_all_with_the_last_error(self):
        self.stub.script = [unavailable(0), unavailable(0),
                            (503, {"code": "shard-unavailable", "message": "no shard"}, {})]
        with self.assertRaises(ShardUnavailableError):
            self.client(retry={"attempts": 3, "initial_delay": 0.01}).runs.get("run_1")
        self.assertEqual(len(self.stub.requests), 3)

    def test_connection_closed_unanswered_is_retried_when_keyed_not_for_an_unkeyed_post(self):
        self.stub.script = ["reset", (200, {"id": "run_2", "status": "completed"}, {})]
        client = self.client(retry={"attempts": 2, "initial_delay": 0.01})
        self.assertEqual(client.runs.start(flow="f", idempotency_key="k-3").id, "run_2")
        self.assertEqual(len(self.stub.requests), 2)
        self.assertEqual(self.stub.requests[1]["headers"]["Idempotency-Key"], "k-3")

        self.stub.script = ["reset", (200, {"id": "run_3", "status": "completed"}, {})]
        self.stub.requests = []
        with self.assertRaises(durin.ConnectionError) as caught:
            client.runs.start(flow="f")
        self.assertFalse(caught.exception.refused)
        self.assertIsInstance(caught.exception, ConnectionError)  # the builtin too
        self.assertEqual(len(self.stub.requests), 1, "an unkeyed POST is not sent twice")

    def test_a_message_keyed_in_its_body_and_an_update_with_an_id_are_retried_unkeyed_ones_not(self):
        client = self.client(retry={"attempts": 3, "initial_delay": 0.01})
        self.stub.script = [unavailable(0), (200, {"runId": "run_m", "sequence": 2, "started": False}, {})]
        receipt = client.runs.send_message("run_m", "note", {"n": 1}, idempotency_key="note-1")
        self.assertEqual(receipt.sequence, 2)
        self.assertEqual(len(self.stub.requests), 2)
        for request in self.stub.requests:
            self.assertEqual(request["path"], "/v1/runs/run_m/messages/note")
            self.assertEqual(json.loads(request["body"]), {"payload": {"n": 1}, "idempotencyKey": "note-1"})
            self.assertNotIn("Idempotency-Key", request["headers"], "a message's key travels in its body")

        self.stub.script = ["reset", (200, {"runId": "run_s", "sequence": 1, "started": True}, {})]
        self.stub.requests = []
        start = {"flow": "acme.inbox", "input": {}}
        self.assertTrue(client.instances.send_message("inst/1", "note", None, idempotency_key="m-1",
                                                      start=start).started)
        self.assertEqual(len(self.stub.requests), 2)
        self.assertEqual(self.stub.requests[1]["path"], "/v1/instances/inst%2F1/messages/note")
        self.assertEqual(json.loads(self.stub.requests[1]["body"]),
                         {"payload": None, "idempotencyKey": "m-1", "start": start})

        self.stub.script = [unavailable(0), (200, {"runId": "run_u", "updateId": "u-1", "sequence": 3,
                                                   "status": "completed", "result": 1}, {})]
        self.stub.requests = []
        client.runs.update("run_u", "add", {"by": 1}, update_id="u-1", wait_for="completed")
        self.assertEqual(len(self.stub.requests), 2)
        self.assertEqual(json.loads(self.stub.requests[1]["body"]),
                         {"args": {"by": 1}, "updateId": "u-1", "waitFor": "completed"})

        for call in (lambda: client.runs.send_message("run_m", "note", {"n": 2}),
                     lambda: client.runs.update("run_u", "add", {"by": 1})):
            self.stub.script = [unavailable(0), (200, {}, {})]
            self.stub.requests = []
            with self.assertRaises(UnavailableError):
                call()
            self.assertEqual(len(self.stub.requests), 1, "an unkeyed message or update is not sent twice")

    def test_a_query_sends_its_args_as_json_and_is_retried_as_a_get(self):
        self.stub.script = [unavailable(0), (200, {"runId": "run_q", "query": "value",
                                                   "result": {"value": 1}}, {})]
        client = self.client(retry={"attempts": 2, "initial_delay": 0.01})
        self.assertEqual(client.runs.query("run_q", "value", {"at": "now", "n": [1]}).result, {"value": 1})
        self.assertEqual(len(self.stub.requests), 2)
        sent = urllib.parse.urlsplit(self.stub.requests[1]["path"])
        self.assertEqual(sent.path, "/v1/runs/run_q/queries/value")
        args = urllib.parse.parse_qs(sent.query)["args"]
        self.assertEqual(json.loads(args[0]), {"at": "now", "n": [1]})
        self.stub.script = [(200, {"runId": "run_q", "query": "value", "result": None}, {})]
        self.stub.requests = []
        client.runs.query("run_q", "value")
        self.assertEqual(self.stub.requests[0]["path"], "/v1/runs/run_q/queries/value")

    def test_422_is_typed_by_code_update_rejected_query_refused_else_unprocessable_never_retried(self):
        client = self.client(retry={"attempts": 3, "initial_delay": 0.01})
        self.stub.script = [(422, {"code": "query-refused",
                                   "message": "query 'value' tried a durable call"}, {})]
        with self.assertRaises(QueryRefusedError) as refused:
            client.runs.query("run_q", "value")
        error = refused.exception
        self.assertIsInstance(error, UnprocessableError)
        self.assertNotIsInstance(error, UpdateRejectedError)
        self.assertEqual((error.status, error.code, str(error)),
                         (422, "query-refused", "query 'value' tried a durable call"))
        self.assertEqual(len(self.stub.requests), 1)
        self.stub.script = [(422, {"code": "update-rejected", "message": "no"}, {})]
        with self.assertRaises(UpdateRejectedError):
            client.runs.update("run_u", "add", {}, update_id="u-2")
        self.stub.script = [(422, {"code": "step-failed", "message": "failed"}, {})]
        with self.assertRaises(UnprocessableError) as other:
            client.runs.get("run_x")
        self.assertNotIsInstance(other.exception, (QueryRefusedError, UpdateRejectedError))

    def test_timeout_is_timeout_error_and_retried_with_retry(self):
        self.stub.script = ["hang"]
        began = time.monotonic()
        with self.assertRaises(durin.TimeoutError):
            self.client(timeout=0.2).runs.get("run_4")
        self.assertLess(time.monotonic() - began, 2)
        self.assertEqual(len(self.stub.requests), 1)

        self.stub.script = ["hang", (200, {"id": "run_4", "status": "running"}, {})]
        self.stub.requests = []
        client = self.client(timeout=0.2, retry={"attempts": 2, "initial_delay": 0.01})
        self.assertEqual(client.runs.get("run_4").id, "run_4")
        self.assertEqual(len(self.stub.requests), 2)

    def test_4xx_is_never_retried_an_in_flight_key_included(self):
        self.stub.script = [(409, {"code": "idempotency-key-in-flight", "message": "running"},
                             {"Retry-After": "5"}), (200, {"id": "run_5"}, {})]
        with self.assertRaises(IdempotencyKeyInFlightError) as caught:
            self.client(retry={"attempts": 5, "initial_delay": 0.01}).runs.start(
                flow="f", idempotency_key="k-5")
        self.assertEqual(caught.exception.retry_after, 5)
        self.assertEqual(len(self.stub.requests), 1)

    def test_refused_connection_is_retried_even_unkeyed(self):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        client = Durin("http://127.0.0.1:%d" % port, "k", retry={"attempts": 3, "initial_delay": 0.1})
        began = time.monotonic()
        with self.assertRaises(durin.ConnectionError) as caught:
            client.runs.start(flow="f")
        self.assertTrue(caught.exception.refused)
        self.assertGreaterEqual(time.monotonic() - began, 0.24, "tried three times")

    def test_wait_doubles_with_jitter_and_is_at_least_retry_after(self):
        policy = Retry(attempts=5, initial_delay=0.5, max_delay=10)
        self.assertAlmostEqual(policy.delay(1, None, unit=0.5), 0.5)
        self.assertAlmostEqual(policy.delay(2, None, unit=0.5), 1.0)
        self.assertAlmostEqual(policy.delay(3, None, unit=0.0), 1.6)
        self.assertAlmostEqual(policy.delay(9, None, unit=1.0), 10.0)
        self.assertAlmostEqual(policy.delay(1, 5, unit=0.5), 5.0)
        self.assertAlmostEqual(policy.delay(1, 3600, unit=0.5), 60.0)
        self.assertEqual(parse_retry_after("5"), 5)
        self.assertIsNone(parse_retry_after("soon"))
        self.assertIsNone(parse_retry_after(None))
        self.assertGreater(parse_retry_after("Fri, 01 Jan 2100 00:00:00 GMT"), 0)


if __name__ == "__main__":
    unittest.main()
