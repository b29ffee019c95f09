"""Small builders for stage and pipeline tests: trajectories and a scripted critic/hindsight responder."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from ceb.backends.base import ChatRequest
from ceb.data.trajectory import Step, Trajectory
from ceb.pipeline.results import StepRow
from ceb.stages.base import NOT_AVAILABLE


def step(action: str, observation: str = "", state: str = "", label: int | None = None, **kw: object) -> Step:
    return Step(state=state, action=action, observation=observation, label=label, **kw)  # type: ignore[arg-type]


def trajectory(tid: str, *steps: Step, task: str = "list the files", domain: str = "shell", **kw: object) -> Trajectory:
    return Trajectory(id=tid, task=task, domain=domain, steps=tuple(steps), **kw)  # type: ignore[arg-type]


def shell_stream(prefix: str, n: int) -> list[Trajectory]:
    """``n`` shell trajectories the offline labeller can read: failing commands are 0, the others 1."""
    out = []
    for i in range(n):
        ok = step(f"ls /data/{prefix}{i % 4}", observation=f"file{i}.txt", label=1)
        bad = step(f"cat /nope/{prefix}{i % 3}", observation="cat: /nope: No such file or directory", label=0)
        out.append(trajectory(f"{prefix}{i}", ok, bad, step(f"wc -l file{i}.txt", observation=f"{i} lines", label=1)))
    return out


_N_STEPS = re.compile(r"The whole trajectory \((\d+) steps\)")


def stage_of(request: ChatRequest) -> str:
    return request.stage


def n_steps_of(request: ChatRequest) -> int:
    m = _N_STEPS.search(request.messages[-1]["content"])
    assert m, "hindsight prompt does not say how many steps it has"
    return int(m.group(1))


def default_reply(request: ChatRequest, score: float = 0.6, label: int = 1) -> str:
    """A well-formed reply for either stage."""
    if request.stage == "critic":
        return orjson.dumps({"score": score, "reason": "scripted"}).decode()
    return orjson.dumps({"labels": [label] * n_steps_of(request)}).decode()


def step_rows(rows: Iterable[Mapping[str, Any]]) -> list[StepRow]:
    """Typed result rows from short dicts (``stream``, ``method``, ``trajectory``, ``step``, ``score``, ``label``).

    Other fields take neutral defaults; the status follows the score and the error (as layout-1 rows are
    read); without ``position`` a trajectory's position is the rank of its first row in its lane.
    """
    seen: dict[tuple[Any, ...], dict[str, int]] = {}
    out = []
    for raw in rows:
        row = {"error": None, "clipped": False, "raw": "", "latency_s": 0.0, "queue_s": 0.0, "requests": 1}
        row |= {"prompt_tokens": None, "completion_tokens": None, "bank_size": 0, "repetition_flag": False}
        row |= {"retrieved": []} | dict(raw)
        lane = (row["stream"], row.get("critic", ""), row["method"], row.get("order", 0))
        first = seen.setdefault(lane, {})
        first.setdefault(row["trajectory"], len(first))
        row.setdefault("position", first[row["trajectory"]])
        if "status" not in row:
            na = str(row["error"] or "").startswith(NOT_AVAILABLE)
            row["status"] = "scored" if row["score"] is not None else "not_available" if na else "failed"
        out.append(StepRow(**row))
    return out
