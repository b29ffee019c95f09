"""``ceb prompts``: the exact requests a method would send for chosen steps of a stream, with no endpoint.

:func:`render_prompts` walks the stream as a lane does, with the offline stand-ins (:mod:`ceb.stages.offline`)
deciding scores and hindsight labels, and at each chosen step asks the method's critic (and, for a chosen
trajectory, the hindsight labeller) over a recording backend; each request is kept as
:meth:`~ceb.backends.openai.OpenAITransport.payload` would send it. Every request is answered with
:data:`STAND_IN_REPLY`, so nothing is re-asked. ``ceb relabel``'s judge is not walked: it sees the reference.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ceb.backends.base import ChatRequest, RetryPolicy
from ceb.backends.openai import OpenAITransport
from ceb.backends.scripted import ScriptedChat
from ceb.config import RunConfig
from ceb.data.trajectory import Trajectory
from ceb.errors import ConfigError
from ceb.stages.assembly import build_critic, llm_stages, offline_stages, prompt_set
from ceb.stages.base import HistoryItem
from ceb.stages.hindsight import LLMHindsight
from ceb.stages.methods import METHODS, MethodSpec
from ceb.stages.step import label_trajectory, new_bank, score_step

__all__ = ["STAND_IN_REPLY", "RenderedRequest", "render_prompts"]

STAND_IN_REPLY = '{"score": 0.5, "reason": "stand-in", "reasoning": ["stand-in"], "confidence": 0.5}'
"""The recording backend's reply to a critic request (every critic reads it); hindsight gets all-1 labels."""

_WIRE_URL = "http://localhost/v1"
"""A base URL for the payload builder, which needs one; nothing is ever sent to it."""


@dataclass(frozen=True, slots=True)
class RenderedRequest:
    """One request a method would send.

    Attributes:
        step: The 0-based step the critic request scores; ``None`` for a hindsight request (the whole trajectory).
        stage: ``"critic"`` (the method's critic, a baseline's included) or ``"hindsight"``.
        messages: The chat messages, ``({"role": ..., "content": ...}, ...)``.
        body: The JSON body of ``POST /chat/completions`` exactly as the ``openai`` backend would send it.
    """

    trajectory: str
    step: int | None
    stage: str
    bank_size: int
    messages: tuple[dict[str, str], ...]
    body: dict[str, Any]


def _reply(request: ChatRequest) -> str:
    if request.stage == "hindsight" and request.json_schema is not None:
        n = int(request.json_schema["properties"]["labels"]["minItems"])
        return orjson.dumps({"labels": [1] * n}).decode()
    return STAND_IN_REPLY


async def render_prompts(
    trajectories: Sequence[Trajectory],
    config: RunConfig,
    method: str,
    *,
    trajectory_ids: Collection[str] | None = None,
    steps: Collection[int] | None = None,
) -> list[RenderedRequest]:
    """The requests ``method`` would send for the chosen steps of one stream, in sending order.

    Args:
        trajectories: The stream, in order.
        config: Prompts, budgets, switches and the ``backend`` section shaping the body (no endpoint is opened).
        method: A registered method (:data:`~ceb.stages.methods.METHODS`).
        trajectory_ids: The trajectories to render; ``None``: the stream's last (fullest bank).
        steps: 0-based steps whose critic requests are rendered; ``None``: all. A bank method's hindsight requests
            of a chosen trajectory always are.

    Returns:
        Per chosen trajectory, its steps' critic requests then its hindsight requests (none for a step scored
        without a request, e.g. PPL).

    Raises:
        ConfigError: Unknown method or trajectory id, a step past every chosen trajectory, or an empty stream.
    """
    spec: MethodSpec = METHODS.get(method)
    if not trajectories:
        raise ConfigError("the stream has no trajectory to render")
    known = [t.id for t in trajectories]
    wanted = set(trajectory_ids) if trajectory_ids is not None else {known[-1]}
    missing = sorted(wanted - set(known))
    if missing:
        raise ConfigError(f"no trajectory {missing[0]!r} in the stream (its first is {known[0]!r})")
    last = max(known.index(i) for i in wanted)
    longest = max(len(t.steps) for t in trajectories if t.id in wanted)
    past = sorted(s for s in steps or () if s >= longest)
    if past:
        raise ConfigError(
            f"no step {past[0]} in the chosen trajector{'y' if len(wanted) == 1 else 'ies'}: the longest has "
            f"{longest} steps (0 to {longest - 1})"
        )

    wire = OpenAITransport(
        config.backend.model_copy(
            update={
                "name": "openai",
                "base_url": _WIRE_URL,
                "model": config.backend.model or "MODEL",
                "server_priority": "off",
            }
        )
    )
    recorder = ScriptedChat(_reply, retry=RetryPolicy(max_attempts=1, backoff_s=0.0, max_backoff_s=0.0))
    offline = offline_stages(config)
    recorded = llm_stages(config, recorder)
    critic = build_critic(spec, config, recorded)
    labeller = LLMHindsight(recorder, prompt_set(config), config.hindsight)
    bank = new_bank(spec, config)
    out: list[RenderedRequest] = []

    def take(trajectory: str, step: int | None, stage: str) -> None:
        for request in recorder.requests:
            body = wire.payload(request)
            messages = tuple(dict(m) for m in request.messages)
            out.append(RenderedRequest(trajectory, step, stage, len(bank), messages, body))
        recorder.requests.clear()

    async with recorded:  # closes what a baseline opened (an actor endpoint is the recorder too)
        for trajectory in trajectories[: last + 1]:
            chosen = trajectory.id in wanted
            blind = trajectory.blinded()  # what every stage is handed: no label, reward or meta
            actor_prompt = trajectory.meta.get("actor_prompt")
            history: list[HistoryItem] = []
            scores: list[float | None] = []
            for t, step in enumerate(blind.steps):
                done = await score_step(
                    step=step,
                    t=t,
                    task=blind.task,
                    domain=blind.domain,
                    history=history,
                    bank=bank,
                    method=spec,
                    config=config,
                    critic=offline.critic,
                    actor_prompt=actor_prompt if isinstance(actor_prompt, str) else None,
                )
                if chosen and (steps is None or t in steps):
                    await critic.score(done.input)  # the same input the method's own critic is given in a run
                    take(blind.id, t, "critic")
                scores.append(done.result.score)
                history.append(HistoryItem(action=step.action, observation=step.observation, score=done.result.score))
            if not spec.use_bank:
                continue
            if chosen and not spec.oracle_labels:
                await labeller.label(blind, spec.resolve(config.ceb).votes)
                take(blind.id, None, "hindsight")
            banked = await label_trajectory(
                blind,
                scores,
                method=spec,
                config=config,
                hindsight=offline.hindsight,
                labels=trajectory.labels if spec.oracle_labels else None,
            )
            bank.add_trajectory(banked.records)
    return out
