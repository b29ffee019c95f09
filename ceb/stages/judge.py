"""The LLM-as-judge relabeller of ``ceb relabel``: a second, permissive label set for evaluation only.

The paper's appendix "LLM-as-Judge Label Analysis": per task, in one call at temperature 0, a judge sees every
step's action, the dataset's reference action and the agent's reasoning, and gives one binary label per step
(the policy is in ``prompts/base/judge_*.j2``). The labels never reach a scoring stage: they go into the stream's
``meta["alt_labels"]``, which only evaluation reads (``ceb report``'s label-shift table).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ceb.backends.base import ChatBackend, ChatRequest
from ceb.data.references import reference_actions
from ceb.data.trajectory import Trajectory
from ceb.stages.asking import Answer, ask
from ceb.stages.hindsight import labels_schema
from ceb.stages.parsing import parse_labels
from ceb.stages.templates import PromptSet

__all__ = [
    "JUDGE_FORMAT_RETRIES",
    "JUDGE_LABEL",
    "JUDGE_MAX_TOKENS",
    "JUDGE_TEMPERATURE",
    "LLMJudge",
    "first_without_reference",
    "judge_context",
]

JUDGE_LABEL = "llm_judge"
"""Default name of the judge's column in ``meta["alt_labels"]``."""

JUDGE_TEMPERATURE = 0.0
"""The paper's judge decodes greedily (appendix "LLM-as-Judge Label Analysis")."""

JUDGE_FORMAT_RETRIES = 1
"""An unreadable reply is re-asked once; after that the trajectory gets no judge label, never a guessed one."""

JUDGE_MAX_TOKENS = 1024
"""Output budget of one reply: ``{"labels": [...]}`` costs about two tokens a step, so this holds ~500 steps."""


def first_without_reference(trajectories: Sequence[Trajectory]) -> tuple[Trajectory, int] | None:
    """The first trajectory with a step that has no reference action, and that step (0-based); ``None`` if none."""
    for trajectory in trajectories:
        for t, reference in enumerate(reference_actions(trajectory)):
            if reference is None:
                return trajectory, t
    return None


def judge_context(trajectory: Trajectory) -> dict[str, Any]:
    """The judge prompt's variables: the task and, per step, the action, the reference and the reasoning.

    The reference (:func:`ceb.data.references.reference_actions`) is the human's action: only the judge sees it.

    Raises:
        ValueError: A step has no reference action (check with :func:`first_without_reference` first).
    """
    steps = []
    for i, (s, reference) in enumerate(zip(trajectory.steps, reference_actions(trajectory), strict=True)):
        if reference is None:
            raise ValueError(f"trajectory {trajectory.id!r} step {i} has no reference action")
        steps.append({"number": i + 1, "action": s.action, "reference": reference, "reasoning": s.reasoning})
    return {"task": trajectory.task, "n_steps": len(trajectory.steps), "steps": steps}


class LLMJudge:
    """Labels a whole trajectory in one request: one 0/1 per step, at temperature 0, schema-constrained.

    ``prompts``: ``judge_system.j2`` / ``judge_user.j2`` of the domain's family, else of ``base``.
    """

    def __init__(self, chat: ChatBackend, prompts: PromptSet) -> None:
        self.chat = chat
        self.prompts = prompts

    def messages(self, trajectory: Trajectory) -> tuple[dict[str, str], ...]:
        """The ``(system, user)`` messages for ``trajectory``."""
        context = judge_context(trajectory)
        return (
            {"role": "system", "content": self.prompts.render_or_base(trajectory.domain, "judge_system", context)},
            {"role": "user", "content": self.prompts.render_or_base(trajectory.domain, "judge_user", context)},
        )

    def request(self, trajectory: Trajectory) -> ChatRequest:
        """The one request for ``trajectory``: the labels schema fixes the reply to exactly one 0/1 per step."""
        return ChatRequest(
            messages=self.messages(trajectory),
            temperature=JUDGE_TEMPERATURE,
            max_tokens=JUDGE_MAX_TOKENS,
            json_schema=labels_schema(len(trajectory.steps)),
            schema_name="judge_labels",
            stage="judge",
        )

    async def label(self, trajectory: Trajectory) -> Answer[tuple[int, ...]]:
        """The labels of ``trajectory``, shape ``(T,)``, or ``value=None`` with ``error``; re-asked once.

        Raises:
            FatalBackendError: The endpoint refuses every request (bad key, unknown model).
        """
        n = len(trajectory.steps)
        return await ask(self.chat, self.request(trajectory), lambda raw: parse_labels(raw, n), JUDGE_FORMAT_RETRIES)
