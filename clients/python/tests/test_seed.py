"""The seed's "Retry a start safely", rewritten for durin
(examples/retry_a_start.py), run as a user would against a real server: it
must print exactly what the seed prints."""

import os
import subprocess
import sys
import unittest

from support import CLIENT_ROOT, SOURCE, Server


class SeedExampleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_retried_start_is_the_same_run_and_a_changed_body_a_conflict(self):
        env = dict(os.environ, DURIN_SERVER=self.server.url,
                   DURIN_API_KEY=self.server.api_key, PYTHONPATH=SOURCE)
        done = subprocess.run(
            [sys.executable, os.path.join(CLIENT_ROOT, "examples", "retry_a_start.py")],
            env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(
            done.stdout,
            "True completed\n"
            "Idempotency-Key was reused with a different request body. "
            "Use a fresh key or the original body.\n")

    def test_the_readme_clients_section_shows_this_very_example(self):
        with open(os.path.join(CLIENT_ROOT, "examples", "retry_a_start.py")) as file:
            code = file.read()
        shown = code[code.index("from durin import"):]
        with open(os.path.join(CLIENT_ROOT, "..", "..", "README.md")) as file:
            readme = file.read()
        self.assertIn("```python\n" + shown + "```", readme)


if __name__ == "__main__":
    unittest.main()
