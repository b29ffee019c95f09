"""A broken prompt template fails before a run or a gate starts: every template rendered once on a small input."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ceb.bank import BankRecord, Hit, Retrieval
from ceb.config import RunConfig
from ceb.data.trajectory import Step, Trajectory
from ceb.stages.assembly import prompt_set
from ceb.stages.base import CriticInput, HistoryItem
from ceb.stages.critic import critic_context
from ceb.stages.hindsight import hindsight_context

__all__ = ["check_prompts"]


def check_prompts(config: RunConfig, domains: Sequence[str]) -> None:
    """Render every template each domain will use on a small input, so a broken template fails now.

    Raises:
        ConfigError: A template is missing or uses a variable the stages do not provide.
    """
    prompts = prompt_set(config)
    record = BankRecord("t", "s", "a", "o", 1, 1.0, 0.9, True, "probe", 0)
    full = Retrieval(
        positives=(Hit(record, 0.5),), negatives=(Hit(replace(record, pseudo_label=0, agreement=False), 0.4),)
    )
    step = Step(state="s", action="a", observation="o", reasoning="r", op="CLICK", element="e", value="v")
    for d in sorted(set(domains)):
        probe = Trajectory(id="probe", task="t", domain=d, steps=(step, step))
        for use_bank, retrieval, rho in ((True, full, True), (True, Retrieval(), False), (False, Retrieval(), False)):
            inp = CriticInput(
                domain=d,
                task="t",
                step=1,
                state="s",
                action="a",
                reasoning="r",
                op="CLICK",
                element="e",
                value="v",
                history=(HistoryItem("a", "o", 0.5), HistoryItem("b", "", None)),
                retrieval=retrieval,
                use_bank=use_bank,
                repetition_flag=rho,
            )
            prompts.messages(d, "critic", critic_context(inp))
        prompts.messages(d, "hindsight", hindsight_context(probe, config.hindsight))
