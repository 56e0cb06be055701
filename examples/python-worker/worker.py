#!/usr/bin/env python3
"""A durin worker in plain Python (standard library only): long-polls a task
queue of a `durin serve` node, runs the example steps, reports outcomes.

The protocol is four JSON-over-HTTP calls (README.md, "Remote workers"):
  POST /v1/task-queues/{queue}/poll    {workerId, pollRequestId, waitMs}
  POST /v1/tasks/{attemptId}/heartbeat {workerId, message, current, total}
  POST /v1/tasks/{attemptId}/complete  {workerId, result}
  POST /v1/tasks/{attemptId}/fail      {workerId, message, retryable}
A report that comes too late is answered {"recorded": false, "reason": ...}:
another attempt owns the step now; that is not an error.

  worker.py --server http://127.0.0.1:7070 --api-key KEY --queue workers \
            [--max-tasks N] [--worker-id ID]
"""
import argparse
import json
import os
import socket
import sys
import urllib.error
import urllib.request


class Node:
    def __init__(self, server, api_key):
        self.server = server.rstrip("/")
        self.api_key = api_key

    def post(self, path, body, timeout=70):
        request = urllib.request.Request(
            self.server + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Authorization": "Bearer " + self.api_key,
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")


def remote_echo(task, heartbeat):
    heartbeat("echoing", 1, 1)
    return task["args"][0]


# The step ids of durin are stable across attempts: the idempotency key.
STEPS = {"remote-echo": remote_echo}


def run(node, queue, worker_id, max_tasks):
    done = 0
    polls = 0
    while max_tasks <= 0 or done < max_tasks:
        polls += 1
        status, answer = node.post(
            "/v1/task-queues/%s/poll" % queue,
            {"workerId": worker_id, "pollRequestId": "py-%d" % polls,
             "waitMs": 2000})
        if status != 200:
            print("poll failed: %s %s" % (status, answer), file=sys.stderr)
            return 1
        task = answer.get("task")
        if task is None:
            continue
        base = "/v1/tasks/" + task["attemptId"]

        def heartbeat(message="", current=None, total=None):
            body = {"workerId": worker_id, "message": message}
            if current is not None:
                body["current"] = current
            if total is not None:
                body["total"] = total
            _, beat = node.post(base + "/heartbeat", body)
            return beat.get("continue", False)

        step = STEPS.get(task["stepName"])
        if step is None:
            report = ("/fail", {"workerId": worker_id, "retryable": False,
                                "message": "no step " + task["stepName"]})
        else:
            try:
                report = ("/complete", {"workerId": worker_id,
                                        "result": step(task, heartbeat)})
            except Exception as error:  # the step failed: let durin retry
                report = ("/fail", {"workerId": worker_id, "retryable": True,
                                    "message": str(error)[:4096]})
        status, answer = node.post(base + report[0], report[1])
        print(json.dumps({"stepId": task["stepId"],
                          "attemptId": task["attemptId"], "status": status,
                          "answer": answer}), flush=True)
        done += 1
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="http://127.0.0.1:7070")
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--queue", default="workers")
    parser.add_argument("--worker-id",
                        default="py-%s-%d" % (socket.gethostname(), os.getpid()))
    parser.add_argument("--max-tasks", type=int, default=0,
                        help="stop after this many tasks (0: never)")
    args = parser.parse_args()
    return run(Node(args.server, args.api_key), args.queue, args.worker_id,
               args.max_tasks)


if __name__ == "__main__":
    sys.exit(main())
