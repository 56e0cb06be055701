"""`pip install ./clients/python` works offline (the in-tree backend needs
nothing from a package index), and what it installs works: the package,
py.typed and metadata, imported from the install (not the tree) by a
program that talks to a real server. The sdist builds and installs too."""

import glob
import os
import subprocess
import sys
import tempfile
import unittest
import zipfile

from support import CLIENT_ROOT, Server

sys.path.insert(0, os.path.join(CLIENT_ROOT, "build_backend"))
import durin_build  # noqa: E402

PROGRAM = """
import durin
from durin import Durin, NotFoundError
print(durin.__file__)
durin_client = Durin()
run = durin_client.runs.start(flow="acme.review-order", input={"orderId": "P-1"},
                              idempotency_key="pack-P-1")
try:
    durin_client.runs.get("run_missing")
except NotFoundError as err:
    print(run.status, err.code)
"""


class PackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.scratch = tempfile.TemporaryDirectory(prefix="durin-py-pack-")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.scratch.cleanup()

    def pip_install(self, source, target):
        # --no-index: no package index is reachable, and none is needed.
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-index", "--quiet",
             "--disable-pip-version-check", "--target", target, source],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)

    def run_program(self, target):
        env = dict(os.environ, PYTHONPATH=target, DURIN_SERVER=self.server.url,
                   DURIN_API_KEY=self.server.api_key)
        done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, cwd=self.scratch.name,
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout.splitlines()

    def test_pip_install_of_the_directory_installs_a_working_typed_package(self):
        target = os.path.join(self.scratch.name, "from-directory")
        self.pip_install(CLIENT_ROOT, target)
        self.assertTrue(os.path.exists(os.path.join(target, "durin", "py.typed")))
        for module in ("__init__", "client", "errors", "types", "worker", "_http"):
            self.assertTrue(os.path.exists(os.path.join(target, "durin", module + ".py")), module)
        [info] = glob.glob(os.path.join(target, "durin-*.dist-info"))
        with open(os.path.join(info, "METADATA")) as file:
            metadata = file.read()
        self.assertIn("Name: durin\n", metadata)
        self.assertIn("Requires-Python: >=3.9\n", metadata)
        self.assertFalse(os.path.exists(os.path.join(target, "tests")))
        location, answer = self.run_program(target)
        self.assertTrue(location.startswith(target), location)
        self.assertEqual(answer, "completed run-not-found")

    def test_wheel_record_matches_its_files(self):
        wheel_dir = os.path.join(self.scratch.name, "wheel")
        name = durin_build.build_wheel(wheel_dir)
        self.assertEqual(name, "durin-0.1.0-py3-none-any.whl")
        with zipfile.ZipFile(os.path.join(wheel_dir, name)) as wheel:
            names = wheel.namelist()
            record = wheel.read("durin-0.1.0.dist-info/RECORD").decode().splitlines()
        self.assertIn("durin/py.typed", names)
        self.assertEqual(sorted(line.split(",")[0] for line in record), sorted(names))

    def test_the_sdist_builds_and_installs(self):
        sdist_dir = os.path.join(self.scratch.name, "sdist")
        name = durin_build.build_sdist(sdist_dir)
        target = os.path.join(self.scratch.name, "from-sdist")
        self.pip_install(os.path.join(sdist_dir, name), target)
        self.assertEqual(self.run_program(target)[1], "completed run-not-found")


if __name__ == "__main__":
    unittest.main()
