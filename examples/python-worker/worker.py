#!/usr/bin/env python3
"""A durin worker in Python, a user of the Python client (clients/python):
polls a task queue of a `durin serve` node, runs the example step
`remote-echo` (the flow acme.remote-echo), reports outcomes in batches, and
prints one JSON line per answered report. A late report is answered
{"recorded": false, "reason": ...}: another attempt owns the step now; that
is not an error, and the worker goes on. SIGTERM/SIGINT stop it gracefully.

  worker.py [--server URL] [--api-key KEY] [--queue workers] \
            [--concurrency N] [--max-tasks N] [--worker-id ID]

The client comes from `pip install ./clients/python`, or, when it is not
installed, from this checkout's clients/python/src.
"""
import argparse
import json
import os
import signal
import sys
import threading

try:
    import durin
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "clients", "python", "src"))
    import durin


def remote_echo(args, meta):
    # meta.step_id is the same on every attempt: the idempotency key for
    # anything this step changes elsewhere.
    meta.heartbeat("echoing", 1, 1)
    return args[0]


STEPS = {"remote-echo": remote_echo}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", help="default $DURIN_SERVER, else http://127.0.0.1:7070")
    parser.add_argument("--api-key", help="default $DURIN_API_KEY")
    parser.add_argument("--queue", default="workers")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--worker-id")
    parser.add_argument("--max-tasks", type=int, default=0,
                        help="stop after this many answered reports (0: never)")
    args = parser.parse_args()

    client = durin.Durin(args.server, args.api_key)
    answered = 0
    lock = threading.Lock()
    worker = None

    def on_outcome(outcome):
        nonlocal answered
        print(json.dumps(outcome, sort_keys=True), flush=True)
        with lock:
            answered += 1
            if 0 < args.max_tasks <= answered:
                worker.stop()

    worker = client.worker(args.queue, STEPS, concurrency=args.concurrency,
                           worker_id=args.worker_id, on_outcome=on_outcome,
                           on_error=lambda error: print("request failed: %s" % error,
                                                        file=sys.stderr, flush=True))
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: worker.stop())
    try:
        worker.run()
    except durin.DurinApiError as error:
        print("the server refused the worker: %s %s: %s"
              % (error.status, error.code, error), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
