"""Small builders for stage and pipeline tests: trajectories and a scripted critic/hindsight responder."""

from __future__ import annotations

import re

import orjson

from ceb.backends.base import ChatRequest
from ceb.data.trajectory import Step, Trajectory


def step(action: str, observation: str = "", state: str = "", label: int | None = None, **kw: object) -> Step:
    return Step(state=state, action=action, observation=observation, label=label, **kw)  # type: ignore[arg-type]


def trajectory(tid: str, *steps: Step, task: str = "list the files", domain: str = "shell", **kw: object) -> Trajectory:
    return Trajectory(id=tid, task=task, domain=domain, steps=tuple(steps), **kw)  # type: ignore[arg-type]


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
