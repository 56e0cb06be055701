"""Every route of the client against a real `durin serve`, and every error
class the server can produce: what each call answers, and which class,
status and code each refusal has. One server per class; each test uses its
own ids and keys."""

import os
import threading
import time
import unittest

from support import Server, eventually

import durin
from durin import (BadRequestError, ConflictError, Durin, DurinApiError,
                   DurinError, ForbiddenError, HookConflictError,
                   IdempotencyKeyInFlightError, NotFoundError,
                   ReplayWithheldError, StartHook, UnauthorizedError)

CONFLICT_MESSAGE = ("Idempotency-Key was reused with a different request body. "
                    "Use a fresh key or the original body.")


class ServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.durin = Durin(cls.server.url, cls.server.api_key)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()


class RunsTest(ServerTest):
    def test_waited_start_answers_the_completed_run_and_get_and_history_show_it(self):
        run = self.durin.runs.start(flow="acme.review-order", input={"orderId": "R-1"})
        self.assertEqual(run.status, "completed")
        self.assertEqual(run.flow, "acme.review-order")
        self.assertEqual(run.input, {"orderId": "R-1"})
        self.assertEqual(run.output["orderId"], "R-1")
        self.assertEqual(run.instance_id, run.id)
        self.assertRegex(run.created_at, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertEqual(self.durin.runs.get(run.id), run)
        history = self.durin.runs.history(run.id)
        self.assertEqual(history.run_id, run.id)
        self.assertGreaterEqual(len(history.events), 3)
        sequences = [event["sequence"] for event in history.events]
        self.assertEqual(sequences, list(range(sequences[0], sequences[0] + len(sequences))))

    def test_start_without_wait_answers_at_once_and_wait_follows_it(self):
        run = self.durin.runs.start(flow="acme.sleep", input={"ms": 300}, wait=False)
        self.assertNotEqual(run.status, "completed")
        done = self.durin.runs.wait(run.id, timeout=10)
        self.assertEqual((done.id, done.status), (run.id, "completed"))

    def test_wait_gives_up_with_timeout_error_carrying_the_run(self):
        run = self.durin.runs.start(flow="acme.sleep", input={"ms": 60000}, wait=False)
        began = time.monotonic()
        with self.assertRaises(durin.TimeoutError) as caught:
            self.durin.runs.wait(run.id, timeout=0.3)
        self.assertIsInstance(caught.exception, TimeoutError)  # the builtin too
        self.assertNotIsInstance(caught.exception, DurinApiError)
        self.assertEqual(caught.exception.run.id, run.id)
        self.assertLess(time.monotonic() - began, 3)
        self.durin.runs.cancel(run.id)

    def test_list_pages_by_cursor_and_list_all_follows_every_page(self):
        ids = [self.durin.runs.start(flow="acme.flaky", input={"failures": 0}).id
               for _ in range(5)]
        first = self.durin.runs.list(flow="acme.flaky", limit=2)
        self.assertEqual(len(first.runs), 2)
        self.assertIsInstance(first.next_cursor, str)
        seen = [run.id for run in self.durin.runs.list_all(flow="acme.flaky", limit=2)]
        self.assertEqual(sorted(seen), sorted(ids))
        self.assertEqual(seen[:2], [run.id for run in first.runs], "newest first")
        everything = self.durin.runs.list(flow="acme.flaky", status="completed", limit=1000)
        self.assertEqual(len(everything.runs), 5)
        self.assertIsNone(everything.next_cursor)

    def test_a_starts_memo_and_search_attributes_come_back_and_a_query_finds_them(self):
        run = self.durin.runs.start(
            flow="acme.tagged", wait=False, memo={"note": "py"},
            search_attributes={"pyTeam": "blue", "pySize": 3})
        got = self.durin.runs.get(run.id)
        self.assertEqual(got.memo, {"note": "py"})
        self.assertEqual(got.search_attributes["pySize"], {"type": "int", "value": 3})
        self.durin.runs.start(flow="acme.tagged", wait=False,
                              search_attributes={"pyTeam": "red"})
        found = [r.id for r in self.durin.runs.list_all(
            query="pyTeam = 'blue' AND pySize > 2", limit=1)]
        self.assertEqual(found, [run.id])
        with self.assertRaises(DurinApiError) as caught:
            self.durin.runs.list(query="pySize = 'big'")
        self.assertEqual((caught.exception.status, caught.exception.code),
                         (400, "invalid-argument"))

    def test_cancel_answers_the_run_a_repeated_command_id_again_a_plain_repeat_run_finished(self):
        run = self.durin.runs.start(flow="acme.sleep", input={"ms": 60000}, wait=False)
        cancelled = self.durin.runs.cancel(run.id, reason="test", command_id="cancel-1")
        self.assertEqual(cancelled.status, "cancelled")
        again = self.durin.runs.cancel(run.id, reason="test", command_id="cancel-1")
        self.assertEqual(again.status, "cancelled")
        with self.assertRaises(DurinApiError) as caught:
            self.durin.runs.cancel(run.id)
        self.assertNotIsInstance(caught.exception, ConflictError)
        self.assertEqual((caught.exception.status, caught.exception.code), (409, "run-finished"))

    def test_keyed_cancel_repeated_gets_the_first_answer(self):
        run = self.durin.runs.start(flow="acme.sleep", input={"ms": 60000}, wait=False)
        first = self.durin.runs.cancel(run.id, idempotency_key="cancel-" + run.id)
        retry = self.durin.runs.cancel(run.id, idempotency_key="cancel-" + run.id)
        self.assertEqual(retry.raw, first.raw)


class IdempotencyTest(ServerTest):
    def test_same_start_twice_is_one_run_and_another_body_a_conflict_with_the_servers_message(self):
        def start(order_id):
            return self.durin.runs.start(flow="acme.review-order", input={"orderId": order_id},
                                         idempotency_key="review-K-1")
        first = start("K-1")
        retry = start("K-1")
        self.assertEqual((retry.id, retry.created_at), (first.id, first.created_at))
        with self.assertRaises(ConflictError) as caught:
            start("K-2")
        error = caught.exception
        self.assertEqual((error.status, error.code), (409, "conflict"))
        self.assertEqual(error.message, CONFLICT_MESSAGE)
        self.assertEqual(str(error), CONFLICT_MESSAGE)

    def test_repeat_in_flight_is_refused_with_retry_after_never_retried_then_the_same_run(self):
        # acme.remote-echo's step waits on queue `workers`, which nobody
        # polls yet: the waited start holds its key until a worker comes.
        retrying = Durin(self.server.url, self.server.api_key, retry={"attempts": 5})
        kwargs = dict(flow="acme.remote-echo", input={"value": "in-flight"},
                      idempotency_key="echo-in-flight")
        answers = []
        first = threading.Thread(target=lambda: answers.append(retrying.runs.start(**kwargs)))
        first.start()
        eventually(lambda: self.durin.runs.list(flow="acme.remote-echo").runs)
        began = time.monotonic()
        with self.assertRaises(IdempotencyKeyInFlightError) as caught:
            retrying.runs.start(**kwargs)
        self.assertLess(time.monotonic() - began, 2, "an in-flight key is not retried")
        error = caught.exception
        self.assertNotIsInstance(error, ConflictError)
        self.assertEqual((error.status, error.code, error.retry_after),
                         (409, "idempotency-key-in-flight", 5))
        with self.assertRaises(ConflictError):
            retrying.runs.start(**dict(kwargs, input={"value": "other"}))
        worker = self.durin.worker("workers", {"remote-echo": lambda args, meta: args[0]}).start()
        try:
            first.join(30)
            self.assertEqual(len(answers), 1)
            self.assertEqual(answers[0].status, "completed")
            self.assertEqual(answers[0].output, {"count": 1, "value": "in-flight"})
            self.assertEqual(retrying.runs.start(**kwargs).id, answers[0].id)
        finally:
            worker.stop()
            worker.join()

    def test_refused_start_is_not_kept(self):
        for _ in range(2):
            with self.assertRaises(NotFoundError) as caught:
                self.durin.runs.start(flow="acme.no-such-flow", idempotency_key="missing-flow")
            self.assertEqual((caught.exception.status, caught.exception.code), (404, "flow-not-found"))

    def test_api_key_creation_replayed_is_withheld(self):
        made = self.durin.api_keys.create("replayed", idempotency_key="key-replayed")
        self.assertTrue(made.secret)
        self.assertNotIn(made.secret, repr(made))
        with self.assertRaises(ReplayWithheldError) as caught:
            self.durin.api_keys.create("replayed", idempotency_key="key-replayed")
        self.assertEqual((caught.exception.status, caught.exception.code),
                         (409, "idempotency-key-replay-withheld"))
        self.assertNotIn(made.secret, str(caught.exception))
        named = [key for key in self.durin.api_keys.list() if key.name == "replayed"]
        self.assertEqual(len(named), 1, "nothing was made twice")

    def test_tenant_creation_replayed_is_withheld(self):
        self.durin.tenants.create("replay-tenant", idempotency_key="tenant-replayed")
        with self.assertRaises(ReplayWithheldError):
            self.durin.tenants.create("replay-tenant", idempotency_key="tenant-replayed")


class HooksAndInstancesTest(ServerTest):
    def test_run_waiting_on_its_hook_is_resumed_and_completes(self):
        run = self.durin.runs.start(flow="acme.order-notes", input={"orderId": "H-1", "note": "first"})
        self.assertEqual(run.status, "waiting")
        hook = self.durin.hooks.get("order:H-1")
        self.assertEqual((hook.token, hook.run_id), ("order:H-1", run.id))
        resumed = self.durin.hooks.resume("order:H-1", {"note": "last", "done": True},
                                          idempotency_key="resume-H-1")
        self.assertEqual(resumed.run_id, run.id)
        replay = self.durin.hooks.resume("order:H-1", {"note": "last", "done": True},
                                         idempotency_key="resume-H-1")
        self.assertEqual(replay, resumed)
        done = self.durin.runs.wait(run.id)
        self.assertEqual(done.status, "completed")
        self.assertEqual(len(done.output["notes"]), 2)

    def test_unknown_hook_is_not_found(self):
        with self.assertRaises(NotFoundError) as caught:
            self.durin.hooks.get("order:nobody")
        self.assertEqual(caught.exception.code, "hook-not-found")
        with self.assertRaises(NotFoundError):
            self.durin.hooks.resume("order:nobody", {})

    def test_instance_id_found_while_active_and_a_duplicate_names_the_owner(self):
        run = self.durin.runs.start(flow="acme.order-notes", input={"orderId": "I-1", "note": "n"},
                                    instance_id="order-I-1")
        self.assertEqual(run.instance_id, "order-I-1")
        self.assertEqual(self.durin.instances.get("order-I-1").id, run.id)
        with self.assertRaises(HookConflictError) as caught:
            self.durin.runs.start(flow="acme.order-notes", input={"orderId": "I-1b", "note": "n"},
                                  instance_id="order-I-1")
        self.assertEqual((caught.exception.status, caught.exception.code), (409, "hook-conflict"))
        self.assertEqual(caught.exception.conflicting_run_id, run.id)
        existing = self.durin.runs.start(flow="acme.order-notes", input={"orderId": "I-1b", "note": "n"},
                                         instance_id="order-I-1", on_duplicate="return-existing-active")
        self.assertEqual(existing.id, run.id)
        self.durin.runs.cancel(run.id)
        with self.assertRaises(NotFoundError):
            self.durin.instances.get("order-I-1")

    def test_start_hook_held_by_another_run_is_hook_conflict(self):
        hook = StartHook("start:S-1", min_retention="1 hour")
        run = self.durin.runs.start(flow="acme.review-order", input={"orderId": "S-1"}, hook=hook)
        self.assertEqual(run.status, "completed")
        with self.assertRaises(HookConflictError) as caught:
            self.durin.runs.start(flow="acme.review-order", input={"orderId": "S-1"},
                                  hook={"token": "start:S-1", "min_retention": "1 hour"})
        self.assertEqual(caught.exception.conflicting_run_id, run.id)
        self.assertEqual(self.durin.hooks.get("start:S-1").state, "retained")


class KeysTenantsAuthTest(ServerTest):
    def test_created_key_works_until_revoked(self):
        made = self.durin.api_keys.create("short-lived")
        self.assertEqual(made.name, "short-lived")
        entry = [key for key in self.durin.api_keys.list() if key.id == made.id][0]
        self.assertFalse(entry.admin)
        user = Durin(self.server.url, made.secret)
        user.runs.list(limit=1)
        revoked = self.durin.api_keys.revoke(made.id, idempotency_key="revoke-" + made.id)
        self.assertEqual((revoked.id, revoked.revoked), (made.id, True))
        with self.assertRaises(UnauthorizedError) as caught:
            user.runs.list(limit=1)
        self.assertEqual((caught.exception.status, caught.exception.code), (401, "unauthorized"))
        # Revoking again converges (a cluster sends the revocation everywhere
        # again): the same answer, and the key stays refused.
        again = self.durin.api_keys.revoke(made.id)
        self.assertEqual((again.id, again.revoked), (made.id, True))
        with self.assertRaises(UnauthorizedError):
            user.runs.list(limit=1)
        with self.assertRaises(NotFoundError) as unknown:
            self.durin.api_keys.revoke("key_0000000000000000")
        self.assertEqual(unknown.exception.code, "api-key-not-found")

    def test_no_key_and_a_wrong_key_are_unauthorized(self):
        saved = os.environ.pop("DURIN_API_KEY", None)
        try:
            for key in (None, "not-a-key"):
                with self.assertRaises(UnauthorizedError) as caught:
                    Durin(self.server.url, key).runs.list()
                self.assertEqual(caught.exception.status, 401)
        finally:
            if saved is not None:
                os.environ["DURIN_API_KEY"] = saved

    def test_another_tenants_run_hook_and_keys_are_not_found(self):
        tenant = self.durin.tenants.create("other")
        self.assertEqual(tenant.name, "other")
        other = Durin(self.server.url, tenant.api_key.secret)
        mine = self.durin.runs.start(flow="acme.order-notes", input={"orderId": "T-1", "note": "n"})
        with self.assertRaises(NotFoundError) as caught:
            other.runs.get(mine.id)
        self.assertEqual((caught.exception.status, caught.exception.code), (404, "run-not-found"))
        with self.assertRaises(NotFoundError):
            other.runs.cancel(mine.id)
        with self.assertRaises(NotFoundError):
            other.hooks.get("order:T-1")
        self.assertEqual(other.runs.list().runs, [])
        self.assertEqual([key.id for key in other.api_keys.list()], [tenant.api_key.id])
        with self.assertRaises(ForbiddenError) as forbidden:
            other.tenants.create("nested")
        self.assertEqual((forbidden.exception.status, forbidden.exception.code), (403, "forbidden"))
        self.durin.runs.cancel(mine.id)


class BadInputTest(ServerTest):
    def test_servers_refusals_of_bad_input_are_bad_request_naming_the_field(self):
        with self.assertRaises(BadRequestError) as wait:
            self.durin.runs.start(flow="acme.review-order", wait="yes")  # type: ignore[arg-type]
        self.assertEqual((wait.exception.status, wait.exception.code), (400, "invalid-argument"))
        self.assertIn("wait", wait.exception.message)
        with self.assertRaises(BadRequestError) as limit:
            self.durin.runs.list(limit=0)
        self.assertIn("limit", str(limit.exception))
        with self.assertRaises(BadRequestError):
            self.durin.runs.list(status="sleeping")
        with self.assertRaises(BadRequestError):
            self.durin.tenants.create("")
        with self.assertRaises(BadRequestError) as path:
            self.durin.runs.get("..")
        self.assertEqual(path.exception.code, "invalid-path")
        with self.assertRaises(NotFoundError) as missing:
            self.durin.runs.get("run_nope")
        self.assertEqual(missing.exception.code, "run-not-found")

    def test_client_refuses_what_it_can_tell_is_wrong(self):
        with self.assertRaises(ValueError):
            self.durin.runs.start(flow="")
        with self.assertRaises(ValueError):
            self.durin.runs.get("")
        with self.assertRaises(ValueError):
            Durin(self.server.url, retry={"attempts": 0})
        with self.assertRaises(ValueError):
            Durin("ftp://example")


class OptionsTest(ServerTest):
    def test_server_and_key_default_to_the_environment(self):
        saved = {name: os.environ.get(name) for name in ("DURIN_SERVER", "DURIN_API_KEY")}
        os.environ["DURIN_SERVER"] = self.server.url + "/"
        os.environ["DURIN_API_KEY"] = self.server.api_key
        try:
            from_env = Durin()
            self.assertEqual(from_env.server, self.server.url)
            from_env.runs.list(limit=1)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def test_every_error_is_a_durin_error(self):
        with self.assertRaises(DurinError):
            self.durin.runs.get("run_nope")


if __name__ == "__main__":
    unittest.main()
