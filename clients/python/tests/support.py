"""A real `durin serve` for a test case: a fresh data dir, 127.0.0.1 port 0,
the address read from its "listening on HOST:PORT" line, the admin key from
DATA_DIR/admin.key; stop() ends it by its pid and removes the dir. The
binary: $DURIN_BIN, else build/bin/durin of this checkout.

Importing this module puts this checkout's src/ first on sys.path, so the
tests exercise the client in the tree.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_ROOT = os.path.dirname(HERE)
SOURCE = os.path.join(CLIENT_ROOT, "src")
REPO = os.path.dirname(os.path.dirname(CLIENT_ROOT))
DURIN_BIN = os.environ.get("DURIN_BIN") or os.path.join(REPO, "build", "bin", "durin")

if sys.path[:1] != [SOURCE]:
    sys.path.insert(0, SOURCE)


class Server:
    def __init__(self, env=None):
        self.data_dir = tempfile.mkdtemp(prefix="durin-py-")
        self._output = []
        self.process = subprocess.Popen(
            [DURIN_BIN, "serve", "--data-dir", self.data_dir, "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=dict(os.environ, **(env or {})), text=True)
        self.pid = self.process.pid
        listening = threading.Event()
        self.url = None

        def read():
            for line in self.process.stdout:
                self._output.append(line)
                found = re.search(r"listening on ([0-9.]+):(\d+)", line)
                if found and self.url is None:
                    self.url = "http://%s:%s" % found.groups()
                    listening.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not listening.wait(10):
            self.stop()
            raise RuntimeError("durin serve did not listen within 10 s:\n" + self.output())
        with open(os.path.join(self.data_dir, "admin.key")) as file:
            self.api_key = file.read().strip()

    def output(self):
        return "".join(self._output)

    def stop(self):
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.process.wait()
        self._reader.join(5)
        self.process.stdout.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        return self.process.returncode


def eventually(check, timeout=10.0, interval=0.02):
    """Polls ``check`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within %g s" % timeout)
        time.sleep(interval)
