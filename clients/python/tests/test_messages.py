"""Talking to running flows against a real `durin serve`: messages (by run
and by instance id, with idempotency keys and message-with-start), updates,
queries and terminate, with the example flows acme.inbox (reads messages
"note" until one has done: true) and acme.counter (update "add" {by}, query
"value", message "stop"). One server per class; each test uses its own runs,
instance ids and keys."""

import unittest

from support import Server, eventually

from durin import (BadRequestError, ConflictError, Durin, DurinApiError,
                   HandlerNotFoundError, MessageReceipt, MessageStart,
                   NotFoundError, QueryResult, RunFinishedError,
                   UnprocessableError, UpdateRejectedError, UpdateResult)


class ServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.durin = Durin(cls.server.url, cls.server.api_key)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def recorded(self, run_id, name):
        """The payloads of the run's recorded messages ``name``, in order."""
        return [event["value"]["payload"] for event in self.durin.runs.history(run_id).events
                if event["kind"] == "message-received" and event.get("name") == name]

    def counter(self, value):
        return self.durin.runs.start(flow="acme.counter", input={"value": value})


class RunMessagesTest(ServerTest):
    def test_a_repeated_key_records_one_message_and_answers_as_the_first(self):
        run = self.durin.runs.start(flow="acme.inbox", wait=False)
        first = self.durin.runs.send_message(run.id, "note", {"n": 1}, idempotency_key="note-1")
        self.assertIsInstance(first, MessageReceipt)
        self.assertEqual((first.run_id, first.started), (run.id, False))
        self.assertEqual(self.durin.runs.send_message(run.id, "note", {"n": 1},
                                                      idempotency_key="note-1"), first)
        # The key names the message: another payload under it is not recorded either.
        self.assertEqual(self.durin.runs.send_message(run.id, "note", {"n": 99},
                                                      idempotency_key="note-1"), first)
        second = self.durin.runs.send_message(run.id, "note", {"n": 2})
        self.assertGreater(second.sequence, first.sequence)
        self.durin.runs.send_message(run.id, "note", {"done": True}, idempotency_key="note-done")
        done = self.durin.runs.wait(run.id)
        self.assertEqual(done.status, "completed")
        self.assertEqual(done.output["notes"], [{"n": 1}, {"n": 2}, {"done": True}])
        self.assertEqual(self.recorded(run.id, "note"), [{"n": 1}, {"n": 2}, {"done": True}])
        # After the run ended: a repeated key still answers as the first; a
        # new message is RunFinishedError.
        self.assertEqual(self.durin.runs.send_message(run.id, "note", {"n": 1},
                                                      idempotency_key="note-1"), first)
        with self.assertRaises(RunFinishedError) as caught:
            self.durin.runs.send_message(run.id, "note", {"n": 3})
        self.assertNotIsInstance(caught.exception, ConflictError)
        self.assertEqual((caught.exception.status, caught.exception.code), (409, "run-finished"))

    def test_keys_are_per_message_name(self):
        run = self.durin.runs.start(flow="acme.inbox", wait=False)
        note = self.durin.runs.send_message(run.id, "note", "a", idempotency_key="shared")
        other = self.durin.runs.send_message(run.id, "other", "b", idempotency_key="shared")
        self.assertNotEqual(note.sequence, other.sequence)
        self.assertEqual(self.recorded(run.id, "note"), ["a"])
        self.assertEqual(self.recorded(run.id, "other"), ["b"])
        self.durin.runs.terminate(run.id)

    def test_no_payload_records_null_a_bad_name_is_bad_request_an_unknown_run_not_found(self):
        run = self.durin.runs.start(flow="acme.inbox", wait=False)
        self.durin.runs.send_message(run.id, "note")
        self.assertEqual(self.recorded(run.id, "note"), [None])
        with self.assertRaises(BadRequestError) as bad:
            self.durin.runs.send_message(run.id, "bad name", {})
        self.assertEqual(bad.exception.code, "invalid-argument")
        with self.assertRaises(NotFoundError) as missing:
            self.durin.runs.send_message("run_nope", "note", {})
        self.assertEqual(missing.exception.code, "run-not-found")
        with self.assertRaises(ValueError):
            self.durin.runs.send_message(run.id, "", {})
        self.durin.runs.terminate(run.id)


class InstanceMessagesTest(ServerTest):
    def test_message_with_start_starts_one_run_and_its_retry_starts_nothing(self):
        start = MessageStart("acme.inbox", {})
        with self.assertRaises(NotFoundError) as none:
            self.durin.instances.send_message("inbox-M-1", "note", {"n": 0})
        self.assertEqual(none.exception.code, "run-not-found")
        first = self.durin.instances.send_message("inbox-M-1", "note", {"n": 1},
                                                  idempotency_key="m1-first", start=start)
        self.assertEqual((first.started, first.sequence), (True, 1))
        self.assertEqual(self.durin.instances.send_message(
            "inbox-M-1", "note", {"n": 1}, idempotency_key="m1-first", start=start), first)
        run = self.durin.instances.get("inbox-M-1")
        self.assertEqual((run.id, run.instance_id), (first.run_id, "inbox-M-1"))
        # A run holds the instance: the start is ignored, the message goes to it.
        joined = self.durin.instances.send_message(
            "inbox-M-1", "note", {"n": 2}, idempotency_key="m1-second",
            start={"flow": "acme.inbox", "input": {}})
        self.assertEqual((joined.started, joined.run_id), (False, first.run_id))
        self.durin.instances.send_message("inbox-M-1", "note", {"done": True})
        done = self.durin.runs.wait(first.run_id)
        self.assertEqual(done.output["notes"], [{"n": 1}, {"n": 2}, {"done": True}])
        again = self.durin.instances.send_message("inbox-M-1", "note", {"n": 1},
                                                  idempotency_key="m1-first", start=start)
        self.assertEqual(again, first)
        runs = [one for one in self.durin.runs.list_all(flow="acme.inbox")
                if one.instance_id == "inbox-M-1"]
        self.assertEqual(len(runs), 1, "one run for the instance")

    def test_a_start_of_an_unknown_flow_is_not_found_and_one_without_a_flow_is_refused_before_sending(self):
        with self.assertRaises(NotFoundError) as caught:
            self.durin.instances.send_message("inbox-M-2", "note", {},
                                              start={"flow": "acme.nope"})
        self.assertEqual(caught.exception.code, "flow-not-found")
        with self.assertRaises(ValueError):
            self.durin.instances.send_message("inbox-M-2", "note", {}, start={})


class UpdatesTest(ServerTest):
    def test_an_update_answers_its_result_and_a_repeated_update_id_the_first_result(self):
        run = self.counter(5)
        self.assertEqual(run.status, "waiting")
        added = self.durin.runs.update(run.id, "add", {"by": 2}, update_id="add-2")
        self.assertIsInstance(added, UpdateResult)
        self.assertEqual((added.run_id, added.update_id, added.status), (run.id, "add-2", "completed"))
        self.assertTrue(added.completed)
        self.assertEqual(added.result, {"value": 7})
        self.assertEqual(self.durin.runs.update(run.id, "add", {"by": 2}, update_id="add-2"), added)
        more = self.durin.runs.update(run.id, "add", {"by": 3})
        self.assertEqual(more.result, {"value": 10})
        self.assertTrue(more.update_id)
        self.durin.runs.send_message(run.id, "stop")
        self.assertEqual(self.durin.runs.wait(run.id).output, {"value": 10})

    def test_wait_for_accepted_answers_once_accepted(self):
        run = self.counter(0)
        accepted = self.durin.runs.update(run.id, "add", {"by": 4}, update_id="add-4",
                                          wait_for="accepted")
        self.assertEqual(accepted.status, "accepted")
        self.assertFalse(accepted.completed)
        self.assertIsNone(accepted.result)
        # The flow applies it after the answer: the query sees it soon.
        eventually(lambda: self.durin.runs.query(run.id, "value").result == {"value": 4})
        self.durin.runs.terminate(run.id)

    def test_a_rejected_update_is_update_rejected_error_and_records_nothing(self):
        run = self.counter(1)
        before = len(self.durin.runs.history(run.id).events)
        with self.assertRaises(UpdateRejectedError) as caught:
            self.durin.runs.update(run.id, "add", {"by": -1}, update_id="add-negative")
        error = caught.exception
        self.assertIsInstance(error, UnprocessableError)
        self.assertIsInstance(error, DurinApiError)
        self.assertEqual((error.status, error.code), (422, "update-rejected"))
        self.assertIn("must not be negative", str(error))
        self.assertEqual(len(self.durin.runs.history(run.id).events), before)
        self.assertEqual(self.durin.runs.query(run.id, "value").result, {"value": 1})
        with self.assertRaises(HandlerNotFoundError) as unknown:
            self.durin.runs.update(run.id, "subtract", {"by": 1})
        self.assertIsInstance(unknown.exception, NotFoundError)
        self.assertEqual(unknown.exception.code, "handler-not-found")
        with self.assertRaises(BadRequestError):
            self.durin.runs.update(run.id, "add", {"by": 1}, wait_for="later")
        self.durin.runs.terminate(run.id)


class QueriesTest(ServerTest):
    def test_a_query_answers_the_state_now_records_nothing_and_sends_args_as_json(self):
        run = self.counter(41)
        before = len(self.durin.runs.history(run.id).events)
        answer = self.durin.runs.query(run.id, "value")
        self.assertEqual(answer, QueryResult(run.id, "value", {"value": 41}))
        self.durin.runs.update(run.id, "add", {"by": 1})
        with_args = self.durin.runs.query(run.id, "value", {"unit": "x", "list": [1, 2]})
        self.assertEqual(with_args.result, {"value": 42})
        self.assertEqual(len(self.durin.runs.history(run.id).events), before + 3,
                         "the update's events only")
        with self.assertRaises(HandlerNotFoundError) as unknown:
            self.durin.runs.query(run.id, "nope")
        self.assertEqual(unknown.exception.status, 404)
        self.durin.runs.terminate(run.id)
        with self.assertRaises(RunFinishedError) as ended:
            self.durin.runs.query(run.id, "value")
        self.assertEqual(ended.exception.code, "run-finished")


class TerminateTest(ServerTest):
    def test_terminate_makes_the_run_terminated_and_a_repeated_command_id_answers_it_again(self):
        run = self.counter(3)
        stopped = self.durin.runs.terminate(run.id, reason="enough", command_id="terminate-1")
        self.assertEqual((stopped.id, stopped.status), (run.id, "terminated"))
        self.assertTrue(stopped.finished)
        self.assertEqual((stopped.error.code, stopped.error.message), ("terminated", "enough"))
        self.assertEqual(self.durin.runs.get(run.id).status, "terminated")
        self.assertEqual(self.durin.runs.wait(run.id, timeout=5).status, "terminated")
        again = self.durin.runs.terminate(run.id, reason="enough", command_id="terminate-1")
        self.assertEqual(again.status, "terminated")
        self.assertEqual(self.durin.runs.history(run.id).events[-1]["kind"], "run-terminated")
        with self.assertRaises(RunFinishedError):
            self.durin.runs.terminate(run.id)
        terminated = self.durin.runs.list(flow="acme.counter", status="terminated", limit=1000)
        self.assertIn(run.id, [one.id for one in terminated.runs])

    def test_a_keyed_terminate_repeated_gets_the_first_answer_another_body_a_conflict(self):
        run = self.durin.runs.start(flow="acme.sleep", input={"ms": 60000}, wait=False)
        key = "terminate-" + run.id
        first = self.durin.runs.terminate(run.id, reason="r", idempotency_key=key)
        self.assertEqual(self.durin.runs.terminate(run.id, reason="r", idempotency_key=key).raw,
                         first.raw)
        with self.assertRaises(ConflictError):
            self.durin.runs.terminate(run.id, reason="other", idempotency_key=key)


if __name__ == "__main__":
    unittest.main()
