"""One step of Algorithm 1 (``score_step``): what it reads of its trajectory's history and what it shows the critic."""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import pytest

from ceb.bank import Bank
from ceb.config import RunConfig
from ceb.stages.base import CriticInput, CriticResult, HistoryItem
from ceb.stages.critic import critic_context
from ceb.stages.methods import resolve_method
from ceb.stages.step import score_step
from ceb.stages.templates import PromptSet
from tests.support.builders import step

pytestmark = pytest.mark.anyio


class CountedHistory(Sequence[HistoryItem]):
    """A history that counts the items read from it (through indexing, slicing or iteration)."""

    def __init__(self, items: list[HistoryItem]) -> None:
        self.items = items
        self.read = 0

    def __len__(self) -> int:
        return len(self.items)

    @overload
    def __getitem__(self, i: int) -> HistoryItem: ...
    @overload
    def __getitem__(self, i: slice) -> list[HistoryItem]: ...
    def __getitem__(self, i: int | slice) -> HistoryItem | list[HistoryItem]:
        got = self.items[i]
        self.read += len(got) if isinstance(got, list) else 1
        return got


class Recorder:
    def __init__(self) -> None:
        self.inputs: list[CriticInput] = []

    async def score(self, inp: CriticInput) -> CriticResult:
        self.inputs.append(inp)
        return CriticResult(score=0.5, raw="")


async def score_at(t: int, config: RunConfig, critic: Recorder) -> CountedHistory:
    history = CountedHistory([HistoryItem(f"cmd {i}", f"out {i}", 0.5) for i in range(t)])
    await score_step(
        step=step(f"cmd {t}"),
        t=t,
        task="q",
        domain="shell",
        history=history,
        bank=Bank(),
        method=resolve_method("ceb"),
        config=config,
        critic=critic,
    )
    return history


async def test_a_step_reads_a_bounded_part_of_its_history():
    """A step's work does not grow with its trajectory: it reads the repetition window and the prompt's window."""
    config = RunConfig()
    bound = config.ceb.repetition_window + config.prompts.history_steps
    critic = Recorder()
    reads = [(await score_at(t, config, critic)).read for t in (10, 1_000, 20_000)]
    assert reads[0] == 10 + 3
    assert reads[1] == reads[2] == bound


async def test_a_long_history_shows_the_latest_steps_with_their_numbers():
    config = RunConfig.model_validate({"prompts": {"history_steps": 4}})
    critic = Recorder()
    await score_at(10, config, critic)
    await score_at(4, config, critic)
    long, short = critic.inputs
    assert long.history_start == 6
    assert [h.action for h in long.history] == ["cmd 6", "cmd 7", "cmd 8", "cmd 9"]
    assert (short.history_start, len(short.history)) == (0, 4)

    prompts = PromptSet(limits=config.prompts)
    text = prompts.messages("shell", "critic", critic_context(long))[-1]["content"]
    assert "(steps 1 to 6 are left out; the latest 4 follow)\nStep 7: cmd 6\n" in text
    assert "Step 10: cmd 9\n" in text and "Step 6:" not in text
    # A trajectory within the window shows its whole history, with no such line: the paper's prompt as before.
    text = prompts.messages("shell", "critic", critic_context(short))[-1]["content"]
    assert "left out" not in text and "Step 1: cmd 0\n" in text
