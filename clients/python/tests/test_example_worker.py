"""examples/python-worker/worker.py, the repository's Python worker, is a
user of this client: run as its own process (from the tree, not installed),
it runs acme.remote-echo's steps and stops after --max-tasks reports; on
SIGTERM it stops gracefully with exit code 0."""

import json
import os
import signal
import subprocess
import sys
import unittest

from support import REPO, Server

from durin import Durin

WORKER = os.path.join(REPO, "examples", "python-worker", "worker.py")


class ExampleWorkerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.durin = Durin(cls.server.url, cls.server.api_key)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def command(self, *extra):
        env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
        return dict(args=[sys.executable, WORKER, "--server", self.server.url,
                          "--api-key", self.server.api_key, "--queue", "workers", *extra],
                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def test_runs_the_steps_and_stops_after_max_tasks(self):
        run = self.durin.runs.start(flow="acme.remote-echo",
                                    input={"count": 3, "value": {"n": 7}}, wait=False)
        done = subprocess.run(timeout=60, **self.command("--max-tasks", "3"))
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        self.assertEqual([line["recorded"] for line in lines], [True, True, True])
        self.assertEqual({line["stepName"] for line in lines}, {"remote-echo"})
        finished = self.durin.runs.wait(run.id, timeout=10)
        self.assertEqual((finished.status, finished.output["value"]), ("completed", {"n": 7}))

    def test_sigterm_stops_it_gracefully(self):
        process = subprocess.Popen(**self.command())
        try:
            run = self.durin.runs.start(flow="acme.remote-echo", input={"value": 1})
            self.assertEqual(run.status, "completed")
            os.kill(process.pid, signal.SIGTERM)
            self.assertEqual(process.wait(15), 0)
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
            process.stdout.close()
            process.stderr.close()


if __name__ == "__main__":
    unittest.main()
