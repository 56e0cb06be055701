"""Runs every test of the Python client (tests/test_*.py) and closes with a
plain "python: N passed, N failed" line; exits non-zero when any failed.

    DURIN_BIN=build/bin/durin python3 clients/python/tests/run.py [-v]
"""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py", top_level_dir=here)
verbosity = 2 if "-v" in sys.argv[1:] else 1
result = unittest.TextTestRunner(verbosity=verbosity).run(suite)
failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
skipped = len(result.skipped)
passed = result.testsRun - failed - skipped
print("python: %d passed, %d failed, %d skipped" % (passed, failed, skipped))
sys.exit(0 if failed == 0 and result.testsRun > 0 else 1)
