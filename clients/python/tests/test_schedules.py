"""Schedules against a real `durin serve`: create (and its replay), get,
list, pause and unpause, trigger and backfill (each firing a run that
runs.list finds by schedule_id), delete. The schedules here fire
acme.review-order on a yearly cron that never comes due during the test,
so every run they start is one the test asked for. One server for the
class; each test uses its own schedule ids."""

import datetime
import unittest

from support import Server, eventually

from durin import (BadRequestError, ConflictError, Deleted, Durin,
                   NotFoundError, Schedule, ScheduleExistsError)

YEARLY = "0 0 1 1 *"


def until(fetch, holds):
    """Polls ``fetch()`` until ``holds`` is true of its value; that value."""
    seen = []

    def check():
        seen.append(fetch())
        return holds(seen[-1])

    eventually(check)
    return seen[-1]


class SchedulesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.durin = Durin(cls.server.url, cls.server.api_key)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def yearly(self, schedule_id, **options):
        return self.durin.schedules.create(schedule_id, "acme.review-order",
                                           {"orderId": schedule_id}, cron=YEARLY,
                                           timezone="UTC", **options)

    def runs_of(self, schedule_id):
        return list(self.durin.runs.list_all(schedule_id=schedule_id, limit=2))

    def test_a_schedule_gives_each_run_its_memo_and_search_attributes(self):
        made = self.durin.schedules.create(
            "sched-tagged", "acme.review-order", {"orderId": "tagged"},
            interval="1s", overlap="allow_all", memo={"team": "billing"},
            search_attributes={"region": "eu"})
        self.assertEqual(made.action.memo, {"team": "billing"})
        self.assertEqual(made.action.search_attributes,
                         {"region": {"type": "keyword", "value": "eu"}})
        runs = eventually(lambda: self.runs_of("sched-tagged"))
        self.durin.schedules.delete("sched-tagged")
        self.assertEqual(runs[0].memo, {"team": "billing"})
        self.assertEqual(runs[0].search_attributes["region"],
                         {"type": "keyword", "value": "eu"})

    def test_create_answers_the_schedule_its_replay_answers_it_another_body_is_schedule_exists(self):
        made = self.yearly("sched-create", overlap="allow_all", note="first",
                           catchup_window=datetime.timedelta(minutes=5))
        self.assertIsInstance(made, Schedule)
        self.assertIs(made.created, True)
        self.assertEqual(made.schedule_id, "sched-create")
        self.assertEqual((made.spec.cron, made.spec.timezone, made.spec.interval),
                         (YEARLY, "UTC", None))
        self.assertEqual((made.action.flow, made.action.input),
                         ("acme.review-order", {"orderId": "sched-create"}))
        self.assertEqual((made.overlap, made.catchup_window), ("allow_all", 300000))
        self.assertEqual((made.paused, made.note), (False, "first"))
        self.assertRegex(made.next_occurrence, r"^\d{4}-01-01T00:00:00\.000Z$")
        self.assertEqual(made.info.fired, 0)
        replay = self.yearly("sched-create", overlap="allow_all", note="first",
                             catchup_window=datetime.timedelta(minutes=5))
        self.assertIs(replay.created, False)
        with self.assertRaises(ScheduleExistsError) as caught:
            self.yearly("sched-create", overlap="skip")
        self.assertNotIsInstance(caught.exception, ConflictError)
        self.assertEqual((caught.exception.status, caught.exception.code), (409, "schedule-exists"))
        got = self.durin.schedules.get("sched-create")
        self.assertEqual(got.schedule_id, "sched-create")
        self.assertIsNone(got.created)

    def test_an_interval_schedule_and_bad_definitions(self):
        made = self.durin.schedules.create(
            "sched-interval", "acme.review-order", {"orderId": "I"}, interval="1h",
            jitter=datetime.timedelta(seconds=2), paused=True,
            start_at=datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc),
            idempotency_key="create-sched-interval")
        self.assertEqual((made.spec.interval, made.spec.jitter, made.spec.cron),
                         (3600000, 2000, None))
        self.assertEqual(made.spec.start_at, "2030-01-01T00:00:00.000Z")
        self.assertIs(made.paused, True)
        self.assertIsNone(made.next_occurrence)
        again = self.durin.schedules.create(
            "sched-interval", "acme.review-order", {"orderId": "I"}, interval="1h",
            jitter=datetime.timedelta(seconds=2), paused=True,
            start_at=datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc),
            idempotency_key="create-sched-interval")
        self.assertEqual(again.raw, made.raw, "a keyed create repeated gets the first answer")
        with self.assertRaises(BadRequestError) as cron:
            self.durin.schedules.create("sched-bad", "acme.review-order", cron="every day")
        self.assertEqual(cron.exception.code, "invalid-argument")
        with self.assertRaises(BadRequestError) as overlap:
            self.yearly("sched-bad", overlap="sometimes")
        self.assertIn("overlap", str(overlap.exception))
        with self.assertRaises(ValueError):
            self.durin.schedules.create("sched-bad", "acme.review-order", cron=YEARLY,
                                        start_at=datetime.datetime(2030, 1, 1))
        with self.assertRaises(ValueError):
            self.durin.schedules.create("", "acme.review-order", cron=YEARLY)

    def test_trigger_starts_a_run_listed_by_schedule_id_and_a_keyed_trigger_repeated_fires_once(self):
        self.yearly("sched-trigger", overlap="allow_all")
        self.assertEqual(self.runs_of("sched-trigger"), [])
        fired = self.durin.schedules.trigger("sched-trigger", idempotency_key="trigger-1")
        self.assertEqual(fired.schedule_id, "sched-trigger")
        self.assertRegex(fired.occurrence, r"^\d{4}-\d\d-\d\dT")
        runs = eventually(lambda: [one for one in self.runs_of("sched-trigger")
                                   if one.status == "completed"])
        self.assertEqual(len(runs), 1)
        run = runs[0]
        self.assertEqual((run.flow, run.schedule_id, run.occurrence),
                         ("acme.review-order", "sched-trigger", fired.occurrence))
        self.assertEqual(run.input, {"orderId": "sched-trigger"})
        self.assertEqual(self.durin.schedules.trigger("sched-trigger", idempotency_key="trigger-1"),
                         fired)
        # Occurrences fire in the order queued: once the next trigger's run is
        # there, a run of the replay would be too.
        following = self.durin.schedules.trigger("sched-trigger")
        both = until(lambda: self.runs_of("sched-trigger"),
                     lambda runs: any(one.occurrence == following.occurrence for one in runs))
        self.assertEqual(len(both), 2)
        schedule = until(lambda: self.durin.schedules.get("sched-trigger"),
                         lambda got: got.info.fired == 2)
        self.assertEqual(len(schedule.info.recent), 2)
        self.assertIn(run.id, [firing.run_id for firing in schedule.info.recent])
        self.assertEqual(self.durin.runs.list(schedule_id="sched-none").runs, [])

    def test_pause_and_unpause_and_a_paused_schedule_still_fires_when_triggered(self):
        self.yearly("sched-pause")
        paused = self.durin.schedules.pause("sched-pause", note="maintenance")
        self.assertEqual((paused.paused, paused.note, paused.next_occurrence),
                         (True, "maintenance", None))
        self.assertTrue(self.durin.schedules.get("sched-pause").paused)
        self.durin.schedules.trigger("sched-pause")
        runs = eventually(lambda: self.runs_of("sched-pause"))
        self.assertEqual(runs[0].schedule_id, "sched-pause")
        unpaused = self.durin.schedules.unpause("sched-pause", idempotency_key="unpause-1")
        self.assertFalse(unpaused.paused)
        self.assertRegex(unpaused.next_occurrence, r"-01-01T00:00:00\.000Z$")

    def test_backfill_fires_every_occurrence_in_the_range_as_runs_listed_by_schedule_id(self):
        self.yearly("sched-backfill", overlap="allow_all")
        filled = self.durin.schedules.backfill(
            "sched-backfill", datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc),
            "2022-06-01T00:00:00Z")
        self.assertEqual(filled.schedule_id, "sched-backfill")
        self.assertEqual(filled.occurrences, ["2020-01-01T00:00:00.000Z",
                                              "2021-01-01T00:00:00.000Z",
                                              "2022-01-01T00:00:00.000Z"])
        runs = until(lambda: self.runs_of("sched-backfill"), lambda runs: len(runs) == 3)
        self.assertEqual(sorted(one.occurrence for one in runs), filled.occurrences)
        with self.assertRaises(BadRequestError):
            self.durin.schedules.backfill("sched-backfill", "yesterday", "today")

    def test_list_pages_by_id_and_list_all_follows_every_page(self):
        for schedule_id in ("list-a", "list-b", "list-c"):
            self.yearly(schedule_id)
        first = self.durin.schedules.list(limit=2)
        self.assertEqual(len(first.schedules), 2)
        self.assertIsInstance(first.next_cursor, str)
        ids = [one.schedule_id for one in self.durin.schedules.list_all(limit=2)]
        self.assertEqual(ids, sorted(ids), "by id")
        for schedule_id in ("list-a", "list-b", "list-c"):
            self.assertIn(schedule_id, ids)
        self.assertEqual(ids[:2], [one.schedule_id for one in first.schedules])

    def test_delete_removes_the_schedule_its_runs_stay(self):
        self.yearly("sched-delete")
        self.durin.schedules.trigger("sched-delete")
        eventually(lambda: self.runs_of("sched-delete"))
        deleted = self.durin.schedules.delete("sched-delete", idempotency_key="delete-1")
        self.assertEqual(deleted, Deleted("sched-delete", True))
        self.assertEqual(self.durin.schedules.delete("sched-delete", idempotency_key="delete-1"),
                         deleted)
        for call in (lambda: self.durin.schedules.get("sched-delete"),
                     lambda: self.durin.schedules.delete("sched-delete"),
                     lambda: self.durin.schedules.pause("sched-delete"),
                     lambda: self.durin.schedules.trigger("sched-delete")):
            with self.assertRaises(NotFoundError) as caught:
                call()
            self.assertEqual(caught.exception.code, "schedule-not-found")
        self.assertEqual(len(self.runs_of("sched-delete")), 1)


if __name__ == "__main__":
    unittest.main()
