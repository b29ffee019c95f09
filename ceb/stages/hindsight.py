"""The LLM hindsight labeler ``g_phi`` and the majority vote (Eq. 3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from ceb.backends.base import ChatBackend, ChatRequest, TransientError
from ceb.config import HindsightConfig
from ceb.data.trajectory import Trajectory
from ceb.errors import BackendError, FatalBackendError
from ceb.stages.asking import REASK_PREFIX, Answer, ask
from ceb.stages.base import CallStats, HindsightResult
from ceb.stages.parsing import parse_labels
from ceb.stages.templates import PromptSet

__all__ = [
    "APPENDIX_TEMPLATE_DOMAINS",
    "LLMHindsight",
    "hindsight_context",
    "labels_schema",
    "majority_vote",
    "shows_observations",
]

APPENDIX_TEMPLATE_DOMAINS = frozenset({"web", "mobile"})
"""Domains whose hindsight prompt follows the paper's appendix template for web steps (operation, element, value,
reasoning; no observation) unless ``hindsight.gui_observations`` is set."""


def shows_observations(domain: str, settings: HindsightConfig | None = None) -> bool:
    """Whether the labeller of ``domain`` sees observations: web and mobile only with ``gui_observations``."""
    return domain not in APPENDIX_TEMPLATE_DOMAINS or (settings or HindsightConfig()).gui_observations


def majority_vote(votes: Sequence[Sequence[int]]) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """Soft vote ``y~_t = mean_v y^(v)_t`` and pseudo-label ``y^_t = 1[y~_t >= 1/2]`` (Eq. 3).

    ``votes`` has shape ``(V, T)`` of 0/1, the two results shape ``(T,)``; a tie counts as productive.

    Raises:
        ValueError: No votes, or votes of different lengths.
    """
    if not votes:
        raise ValueError("majority vote over zero votes")
    n = len(votes[0])
    if any(len(v) != n for v in votes):
        raise ValueError(f"votes differ in length: {[len(v) for v in votes]}")
    soft = tuple(sum(v[t] for v in votes) / len(votes) for t in range(n))
    return soft, tuple(int(s >= 0.5) for s in soft)


def labels_schema(n_steps: int) -> dict[str, Any]:
    """JSON Schema of a hindsight reply with exactly ``n_steps`` labels in {0, 1}."""
    return {
        "type": "object",
        "properties": {
            "labels": {
                "type": "array",
                "items": {"type": "integer", "enum": [0, 1]},
                "minItems": n_steps,
                "maxItems": n_steps,
            }
        },
        "required": ["labels"],
        "additionalProperties": False,
    }


def hindsight_context(
    trajectory: Trajectory, settings: HindsightConfig | None = None, outcome: int | None = None
) -> dict[str, Any]:
    """The template variables of the hindsight prompt: the task and every executed step.

    A template shows ``observation`` only under ``show_observations`` (:func:`shows_observations`). ``outcome`` (1
    the task succeeded, 0 it failed) is for ``ceb label``'s judge; the paper's labeller is not given one.
    """
    return {
        "task": trajectory.task,
        "n_steps": len(trajectory.steps),
        "show_observations": shows_observations(trajectory.domain, settings),
        "outcome": outcome,
        "steps": [
            {
                "number": i + 1,
                "state": s.state,
                "action": s.action,
                "observation": s.observation,
                "reasoning": s.reasoning,
                "op": s.op,
                "element": s.element,
                "value": s.value,
            }
            for i, s in enumerate(trajectory.steps)
        ],
    }


class LLMHindsight:
    """Votes ``V`` times on a finished trajectory with an LLM (independent requests, or ``n = V`` choices).

    ``settings`` (``config.hindsight``) hold the votes' temperature, the paper's ``tau``.
    """

    def __init__(self, chat: ChatBackend, prompts: PromptSet, settings: HindsightConfig | None = None) -> None:
        self.chat = chat
        self.prompts = prompts
        self.settings = settings or HindsightConfig()

    def messages(self, trajectory: Trajectory, outcome: int | None = None) -> tuple[dict[str, str], ...]:
        """The ``(system, user)`` messages for ``trajectory``, with its final ``outcome`` when given."""
        context = hindsight_context(trajectory, self.settings, outcome)
        return self.prompts.messages(trajectory.domain, "hindsight", context)

    def _request(self, messages: tuple[dict[str, str], ...], n_steps: int, v: int, n: int = 1) -> ChatRequest:
        return ChatRequest(
            messages=messages,
            temperature=self.settings.temperature,
            max_tokens=self.settings.max_tokens,
            n=n,
            json_schema=labels_schema(n_steps),
            schema_name="hindsight_labels",
            seed=None if self.settings.seed is None else self.settings.seed + v,
            stage="hindsight",
        )

    async def _one_vote(self, messages: tuple[dict[str, str], ...], n_steps: int, v: int) -> Answer[tuple[int, ...]]:
        request = self._request(messages, n_steps, v)
        return await ask(self.chat, request, lambda raw: parse_labels(raw, n_steps), self.settings.format_retries)

    async def _shared_votes(
        self, messages: tuple[dict[str, str], ...], n_steps: int, votes: int
    ) -> list[Answer[tuple[int, ...]]]:
        """All ``votes`` as the choices of one request; an unreadable choice is re-asked alone."""

        def parse(raw: str) -> tuple[int, ...]:
            return parse_labels(raw, n_steps)

        try:
            resp = await self.chat.complete(self._request(messages, n_steps, 0, n=votes))
        except FatalBackendError:
            raise
        except (TransientError, BackendError) as exc:
            # Annotated, not subscripted: calling Answer[...] sets __orig_class__, which a slots dataclass refuses.
            failed: Answer[tuple[int, ...]] = Answer(None, "", f"endpoint failed: {exc}", CallStats.failed(exc))
            return [failed] + [Answer(None, "", failed.error, CallStats()) for _ in range(votes - 1)]
        c = resp.completion
        # The request's cost is carried by the first answer only, so sums over votes count it once.
        shared = CallStats.of(resp)
        texts = list(c.texts[:votes]) + [""] * (votes - len(c.texts))
        answers: list[Answer[tuple[int, ...]]] = []
        for v, raw in enumerate(texts):
            stats = shared if v == 0 else CallStats()
            try:
                answers.append(Answer(parse(raw), raw, None, stats))
                continue
            except ValueError as exc:
                reason = str(exc)
            if self.settings.format_retries == 0:
                answers.append(Answer(None, raw, f"unreadable reply: {reason}", stats))
                continue
            fix = (
                *messages,
                {"role": "assistant", "content": raw},
                {"role": "user", "content": f"{REASK_PREFIX}{reason}. Reply again with only the JSON object."},
            )
            again = await ask(self.chat, self._request(fix, n_steps, v), parse, self.settings.format_retries - 1)
            answers.append(Answer(again.value, again.raw, again.error, stats + again.stats))
        return answers

    async def label(self, trajectory: Trajectory, votes: int, outcome: int | None = None) -> HindsightResult:
        """Sample ``votes`` hindsight judgements concurrently and take the majority (Eq. 3).

        Failed votes are counted with their reasons; with no valid vote the majority is empty.
        ``outcome`` is shown to the labeller (:func:`hindsight_context`).
        """
        messages = self.messages(trajectory, outcome)
        n = len(trajectory.steps)

        slots: list[Answer[tuple[int, ...]] | None] = [None] * votes

        async def run(v: int) -> None:
            slots[v] = await self._one_vote(messages, n, v)

        if self.settings.sampling == "n" and votes > 1:
            slots = list(await self._shared_votes(messages, n, votes))
        else:
            # The votes are independent requests: they go out together and the scheduler spreads them.
            async with anyio.create_task_group() as tg:
                for v in range(votes):
                    tg.start_soon(run, v)
        results = [r for r in slots if r is not None]
        valid = [r.value for r in results if r.value is not None]
        stats = CallStats()
        for r in results:
            stats += r.stats
        soft, labels = majority_vote(valid) if valid else ((), ())
        return HindsightResult(
            votes=tuple(valid),
            soft_votes=soft,
            pseudo_labels=labels,
            failed_votes=votes - len(valid),
            errors=tuple(r.error for r in results if r.error is not None),
            raws=tuple(r.raw for r in results if r.value is not None),
            stats=stats,
        )
