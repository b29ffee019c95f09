"""The LLM hindsight labeler ``g_phi`` and the majority vote (Eq. 3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from ceb.backends.base import ChatBackend, ChatRequest
from ceb.data.trajectory import Trajectory
from ceb.stages.asking import Answer, ask
from ceb.stages.base import CallStats, HindsightResult
from ceb.stages.parsing import parse_labels
from ceb.stages.templates import PromptSet

__all__ = ["HindsightSettings", "LLMHindsight", "hindsight_context", "labels_schema", "majority_vote"]


def majority_vote(votes: Sequence[Sequence[int]]) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """Soft vote ``y~_t = mean_v y^(v)_t`` and pseudo-label ``y^_t = 1[y~_t >= 1/2]`` (Eq. 3).

    A tie (for an even number of votes) counts as productive, as ``>= 1/2`` says.

    Args:
        votes: ``V`` votes, each one 0/1 label per step; shape ``(V, T)``.

    Returns:
        ``(soft_votes, pseudo_labels)``, each of shape ``(T,)``.

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


def hindsight_context(trajectory: Trajectory) -> dict[str, Any]:
    """The template variables of the hindsight prompt: the task and every executed step."""
    return {
        "task": trajectory.task,
        "n_steps": len(trajectory.steps),
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


@dataclass(frozen=True, slots=True)
class HindsightSettings:
    """Sampling settings of the hindsight labeler.

    Attributes:
        temperature: ``tau`` (paper: 0.7); must be > 0 for the votes to differ.
        max_tokens: Output budget per vote, in tokens.
        format_retries: Re-asks of one vote whose reply is not exactly one 0/1 per step.
        seed: Base sampling seed; vote ``v`` uses ``seed + v``. ``None`` leaves seeding to the server.
    """

    temperature: float = 0.7
    max_tokens: int = 512
    format_retries: int = 2
    seed: int | None = None


class LLMHindsight:
    """Votes ``V`` times on a finished trajectory with an LLM, as independent requests.

    Args:
        chat: The endpoint.
        prompts: Templates to render the hindsight prompt with.
        settings: Sampling settings.
    """

    def __init__(self, chat: ChatBackend, prompts: PromptSet, settings: HindsightSettings | None = None) -> None:
        self.chat = chat
        self.prompts = prompts
        self.settings = settings or HindsightSettings()

    def messages(self, trajectory: Trajectory) -> tuple[dict[str, str], ...]:
        """The ``(system, user)`` messages for ``trajectory``."""
        return self.prompts.messages(trajectory.domain, "hindsight", hindsight_context(trajectory))

    async def _one_vote(self, messages: tuple[dict[str, str], ...], n_steps: int, v: int) -> Answer[tuple[int, ...]]:
        seed = None if self.settings.seed is None else self.settings.seed + v
        request = ChatRequest(
            messages=messages,
            temperature=self.settings.temperature,
            max_tokens=self.settings.max_tokens,
            json_schema=labels_schema(n_steps),
            schema_name="hindsight_labels",
            seed=seed,
            stage="hindsight",
        )
        return await ask(self.chat, request, lambda raw: parse_labels(raw, n_steps), self.settings.format_retries)

    async def label(self, trajectory: Trajectory, votes: int) -> HindsightResult:
        """Sample ``votes`` hindsight judgements concurrently and take the majority (Eq. 3).

        Returns:
            The valid votes and their majority; failed votes are counted with their reasons. When no vote
            is valid, ``soft_votes`` and ``pseudo_labels`` are empty, and the trajectory adds nothing to the
            bank.
        """
        messages = self.messages(trajectory)
        n = len(trajectory.steps)

        slots: list[Answer[tuple[int, ...]] | None] = [None] * votes

        async def run(v: int) -> None:
            slots[v] = await self._one_vote(messages, n, v)

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
