"""The ceb approver inside an inspect_ai eval, run in-process and offline on inspect's ``mockllm`` model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("inspect_ai", reason="the ceb approver needs the inspect extra (inspect_ai)")

from inspect_ai import Task, eval_async
from inspect_ai.approval import ApprovalPolicy
from inspect_ai.dataset import Sample
from inspect_ai.log import read_eval_log
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import tool

from ceb import Gate
from ceb.gate.inspect_approver import ceb_approver

pytestmark = [
    pytest.mark.anyio,
    # inspect_ai 0.3.285's model retries pass tenacity an argument tenacity deprecates: theirs, not ours
    pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning"),
    # and its eval_async leaves memory streams unclosed (so does an eval with its own auto_approver alone)
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in.*MemoryObjectReceiveStream:pytest.PytestUnraisableExceptionWarning"
    ),
]

MODEL = "mockllm/model"


@tool
def add():  # type: ignore[no-untyped-def]  # noqa: ANN201
    async def execute(x: int, y: int) -> int:
        """Add two integers.

        Args:
            x: The first integer.
            y: The second integer.

        Returns:
            The sum.
        """
        return x + y

    return execute


def outputs() -> list[ModelOutput]:
    """Each of the two samples calls ``add(2, 3)``, then the same call again, then answers."""
    replies = []
    for k in (1, 2):
        replies += [
            ModelOutput.for_tool_call(MODEL, "add", {"x": 2, "y": 3}, tool_call_id=f"c{k}a", content="I add them."),
            ModelOutput.for_tool_call(MODEL, "add", {"x": 2, "y": 3}, tool_call_id=f"c{k}b"),
            ModelOutput.from_content(MODEL, "ANSWER: 5"),
        ]
    for reply in replies:  # given, so mockllm counts no tokens with a tokenizer it would download
        reply.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    return replies


def approvals(sample: Any) -> list[tuple[str, str, str, dict[str, Any] | None]]:
    return [(e.approver, e.decision, e.explanation, e.metadata) for e in sample.events if e.event == "approval"]


async def test_the_approver_decides_each_call_by_the_gate_and_banks_each_sample_as_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INSPECT_DISPLAY", "none")
    task = Task(
        dataset=[Sample(id="s1", input="What is 2 + 3?", target="5"), Sample(id="s2", input="2 + 3?", target="5")],
        solver=[use_tools(add()), generate()],
        name="add-task",
    )
    async with Gate() as gate:  # the offline critic and labeller: no model, no network
        approver = ceb_approver(gate, "add-eval")
        policy = [ApprovalPolicy(approver, "*")]
        model = get_model(MODEL, custom_outputs=outputs())
        [result] = await eval_async(task, model=model, approval=policy, log_dir=str(tmp_path), max_samples=1)
    assert result.status == "success", result.error

    s1, s2 = read_eval_log(result.location).samples or []  # the log on disk shows ceb's decisions
    first, repeat, fallback = approvals(s1)
    assert first[:3] == ("ceb", "approve", "ceb allow: score 0.50 (allow >= 0.5, block < 0.2)")
    assert first[3] is not None and first[3]["ceb_score"] == 0.5 and first[3]["ceb_step"] == 0
    # review -> escalate, with the reason; no approver is left, so inspect's policy rejects it
    assert repeat[:2] == ("ceb", "escalate") and "ceb review: score 0.30" in repeat[2]
    assert repeat[2].endswith("it repeats a recent call") and repeat[3]["ceb_repetition_flag"] is True
    assert fallback[:2] == ("policy", "reject")

    # s1 was banked when it ended, so s2's first call is scored against it: below the block threshold
    decisions = approvals(s2)
    assert [d[:2] for d in decisions] == [("ceb", "reject"), ("ceb", "reject")]
    assert decisions[0][2].startswith("ceb block: score ") and decisions[0][3]["ceb_bank_size"] == 2
    rejected = [m for m in s2.messages if m.role == "tool"]
    assert rejected and all(m.error is not None and m.error.message.startswith("ceb block") for m in rejected)

    banked = approver.banked  # type: ignore[attr-defined]
    assert [b.trajectory_id.split("/")[:2] for b in banked] == [["s1", "epoch-1"], ["s2", "epoch-1"]]
    assert [b.records_added for b in banked] == [2, 2] and [b.bank_version for b in banked] == [1, 2]
