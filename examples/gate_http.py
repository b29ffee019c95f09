"""ceb over plain HTTP: score a tool call with ``ceb serve``, then send the finished run; the standard library only.

Start the service, then run the client (any language works the same way; this is the wire format)::

    ceb serve --in-memory                       # http://127.0.0.1:8377, offline backend, no key
    python examples/gate_http.py [base URL]     # CEB_SERVE_TOKEN: the bearer token, if the service has one

``POST /v1/score`` answers the confidence (``score``, ``decision``, ``repetition_flag``, ``bank_version``...);
``POST /v1/trajectories`` answers 202 with the trajectory's ``seq`` once it is durable. A 4xx or 5xx raises
``urllib.error.HTTPError``; its body is JSON with ``error`` (and ``field`` for a 422). A finished run's steps carry
action strings: a tool call's is ``name {arguments as canonical JSON}`` (:func:`action_text`), the form
``/v1/score`` reads a tool call as, so that a repeat is seen as one and the bank's keys match.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

STREAM = "http-agent"


def action_text(call: dict[str, Any]) -> str:
    """A tool call as the action string the service reads it as: ``name`` and its arguments as canonical JSON."""
    return f"{call['name']} {json.dumps(call['arguments'], ensure_ascii=False, sort_keys=True, separators=(',', ':'))}"


def post(base_url: str, path: str, body: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    """POST ``body`` as JSON to ``base_url + path`` and return the JSON answer."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(base_url + path, json.dumps(body).encode(), headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.load(response)
        return answer


def wait_until_ready(base_url: str, timeout_s: float = 30.0) -> None:
    """Wait until ``GET /health`` answers: the service may still be starting.

    Raises:
        ConnectionError: Nothing answered within ``timeout_s`` seconds (the message names the URL).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=5):
                return
        except urllib.error.HTTPError as exc:  # it answered: up, if not healthy (the call will say why)
            exc.close()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise ConnectionError(f"no ceb serve at {base_url} after {timeout_s:.0f} s: {exc}") from None
            time.sleep(0.2)


def score(base_url: str, trajectory_id: str, call: dict[str, Any], history: list[dict[str, str]]) -> dict[str, Any]:
    """The confidence for tool call ``call`` (``{"name", "arguments"}``) after the steps in ``history``."""
    body = {"stream": STREAM, "trajectory_id": trajectory_id, "task": "print a.txt", "domain": "shell"}
    return post(base_url, "/v1/score", body | {"action": call, "history": history}, os.environ.get("CEB_SERVE_TOKEN"))


def finish(base_url: str, trajectory_id: str, history: list[dict[str, str]]) -> dict[str, Any]:
    """Send the finished run (SCHEMA.md steps); the acknowledgement carries its ``seq``."""
    trajectory = {"id": trajectory_id, "task": "print a.txt", "domain": "shell", "steps": history}
    body = {"stream": STREAM, "trajectory": trajectory}
    return post(base_url, "/v1/trajectories", body, os.environ.get("CEB_SERVE_TOKEN"))


def main(
    base_url: str = "http://127.0.0.1:8377", trajectory_id: str = "run-1"
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Score three calls (the third a repeat), run those allowed, send the run; the confidences and the ack."""
    wait_until_ready(base_url)
    outputs = {"ls": "a.txt b.txt", "cat a.txt": "hello"}
    history: list[dict[str, str]] = []
    answers = []
    for command in ("ls", "cat a.txt", "cat a.txt"):
        call = {"name": "bash", "arguments": {"command": command}}
        c = score(base_url, trajectory_id, call, history)
        answers.append(c)
        print(f"{command!r}: score {c['score']}, {c['decision']}, repetition {c['repetition_flag']}")
        if c["decision"] == "allow":
            history.append({"state": "", "action": action_text(call), "observation": outputs[command]})
    ack = finish(base_url, trajectory_id, history)
    print("acknowledged:", ack)
    return answers, ack


if __name__ == "__main__":
    main(*sys.argv[1:2])
