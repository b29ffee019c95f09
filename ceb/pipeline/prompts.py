"""``ceb prompts``: the exact requests a method would send for chosen steps of a stream, with no endpoint.

Users audit what reaches a model this way (issue 32: the reference action reached the critic and the labeller on
Mind2Web and AMEX, and nothing showed it). :func:`render_prompts` walks the stream as a lane of ``ceb score`` does
(:func:`~ceb.stages.step.score_step` and :func:`~ceb.stages.step.label_trajectory`, in stream order) with the
offline stand-ins of :mod:`ceb.stages.offline` giving the scores and the hindsight labels, so each chosen step sees
the history and the bank as an offline run would have them at that point. At a chosen step the method's own critic
(the LLM critic, or a baseline's) is asked over a recording backend, and for a chosen trajectory the LLM hindsight
labeller too (for a method with a bank); every request they make is kept with its body as
:meth:`~ceb.backends.openai.OpenAITransport.payload` would send it. The recording backend answers each request with
one fixed reply every stage can read (:data:`STAND_IN_REPLY`), so no re-ask is triggered; what that reply says
does not matter, since the offline stand-ins decide the numbers the walk goes on with.

The judge of ``ceb relabel`` is not a method and is not walked here: it sees the reference action on purpose.
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
"""The recording backend's reply to a critic request: a score, a CoT reasoning list and a confidence, so neither
the LLM critic nor a baseline re-asks. A hindsight request gets ``{"labels": [1, ...]}`` of its length instead."""

_WIRE_URL = "http://localhost/v1"
"""A base URL for the payload builder, which needs one; nothing is ever sent to it."""


@dataclass(frozen=True, slots=True)
class RenderedRequest:
    """One request a method would send.

    Attributes:
        trajectory: The trajectory's id.
        step: The 0-based step the critic request scores; ``None`` for a hindsight request (the whole trajectory).
        stage: ``"critic"`` (the method's critic, a baseline's included) or ``"hindsight"``.
        bank_size: Records in the method's bank when the request is made (0 for a bank-free method).
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
    """The requests ``method`` would send for the chosen steps of one stream, in the order it would send them.

    Args:
        trajectories: The stream, in order (as :func:`~ceb.data.read_stream` gives it).
        config: The run's settings: prompts, text budgets, the method's switches, the ``backend`` section that
            shapes the body (its ``model``, ``structured_output``, ``token_limit_field``; no endpoint is opened).
        method: A registered method (:data:`~ceb.stages.methods.METHODS`), a baseline's name included.
        trajectory_ids: The trajectories to render; ``None``: the stream's last one (its bank is the fullest).
        steps: 0-based steps of those trajectories whose critic requests are rendered; ``None``: every step. The
            hindsight requests of a chosen trajectory are rendered whenever the method has a bank.

    Returns:
        The requests, per chosen trajectory in stream order: its chosen steps' critic requests, then its hindsight
        requests. A step a method scores without a request (PPL or ME from the step's ``actor_logprobs``) has
        none.

    Raises:
        ConfigError: ``method`` is not registered, a trajectory id is not in the stream, a step is past every
            chosen trajectory, or the stream is empty.
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
