"""The method catalogue: one place knows every method, and a new method is one file.

The first test is that file: a critic and its registration, then a run and a report that pick it up with no
other change anywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog.testing

from ceb.bank import Bank
from ceb.config import BankConfig, CEBConfig, RunConfig, load_config
from ceb.errors import ConfigError
from ceb.eval.lanes import method_label, method_sort_key
from ceb.eval.report import build_report
from ceb.pipeline import read_step_rows, run_scoring
from ceb.stages import methods as catalogue
from ceb.stages.assembly import Stages
from ceb.stages.base import CriticInput, CriticResult
from ceb.stages.methods import (
    CAPABILITIES,
    GROUPS,
    MethodSpec,
    all_methods,
    method_names,
    register_method,
    resolve_method,
    sweep_methods,
)
from ceb.stages.step import new_bank
from tests.support.builders import step, trajectory

pytestmark = pytest.mark.anyio


class ShortActionCritic:
    """A toy baseline: shorter actions are more likely productive."""

    async def score(self, inp: CriticInput) -> CriticResult:
        return CriticResult(score=1.0 / (1.0 + len(inp.action) / 10.0), raw="")


def build_short_action(config: RunConfig, stages: Stages) -> ShortActionCritic:
    return ShortActionCritic()


@pytest.fixture
def isolated_catalogue() -> Iterator[None]:
    """Registrations made by a test end with it."""
    before = set(catalogue.METHODS.names())
    yield
    for name in set(catalogue.METHODS.names()) - before:
        catalogue.METHODS.unregister(name)


async def test_a_new_method_is_one_registration_and_runs_and_reports(tmp_path: Path, isolated_catalogue: None) -> None:
    register_method(
        MethodSpec(
            "short-action",
            label="Short action",
            group="baseline",
            order=1,
            description="1 / (1 + len(action) / 10)",
            use_bank=False,
            use_repetition_flag=False,
            critic=build_short_action,
            needs=(),
        )
    )
    steps = (step("ls", "a", label=1), step("cat a-long-file-name", "b", label=0))
    stream = [trajectory(f"t{i}", *steps) for i in range(3)]
    config = load_config(overrides={"methods": ["short-action", "static"]})  # the offline backend

    summary = await run_scoring({"s": stream}, config, tmp_path)

    rows = [r for r in read_step_rows(tmp_path / "scores.jsonl") if r.method == "short-action"]
    assert summary.steps_failed == 0 and len(rows) == 6
    assert {r.status for r in rows} == {"scored"}
    assert [r.score for r in rows[:2]] == pytest.approx([1 / 1.2, 1 / 3.0])
    # The report names it by its label, among the baselines before Static.
    assert method_label("short-action") == "Short action"
    assert method_sort_key("short-action") < method_sort_key("static")
    main = (build_report(tmp_path, n_boot=0).parent / "main.md").read_text(encoding="utf-8")
    assert main.index("| Short action |") < main.index("| Static |")


def test_every_registered_method_is_complete_and_uniquely_labelled() -> None:
    specs = list(all_methods())
    assert {"ceb", "static", "ppl", "me", "ptrue", "cot", "verbalized", "pro", "ceb-gt-oracle"} <= {
        m.name for m in specs
    }
    labels = [m.display for m in specs]
    assert len(set(labels)) == len(labels)
    for m in specs:
        assert m.description and m.label, m.name
        assert set(m.needs) <= set(CAPABILITIES) and m.group in GROUPS
        assert m.uses_llm_critic or callable(m.critic_factory())
        assert m.oracle_labels == (m.group == "oracle")
    # Table order: baselines (Static last of them), CEB, ablations, oracle.
    names = [m.name for m in specs]
    assert names.index("static") < names.index("ceb") < names.index("ceb-positives-only") < names.index("ceb-gt-oracle")


def test_sweep_cells_resolve_against_the_run_config() -> None:
    ceb = load_config(overrides={"ceb": {"votes": 3, "k": 4, "retriever": "random"}}).ceb
    cell = resolve_method("ceb-V2")
    assert cell.group == "sweep" and cell.behaviour == resolve_method("ceb").behaviour
    assert (cell.resolve(ceb).votes, cell.resolve(ceb).k, cell.resolve(ceb).retriever) == (2, 4, "random")
    assert resolve_method("ceb-single-vote").resolve(ceb).votes == 1  # an ablation, not a sweep cell: V fixed at 1
    assert resolve_method("ceb-single-vote").group == "ablation"


def test_unknown_and_reserved_names_are_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"unknown method 'cbe'.*ceb, .*ceb-V<v>-k<k>"):
        resolve_method("cbe")
    with pytest.raises(ConfigError, match="reserved for V / k sweep cells"):
        register_method(MethodSpec("ceb-V3-k1"))
    with pytest.raises(ConfigError, match="unknown capabilities"):
        MethodSpec("x", needs=("telepathy",))


def test_no_two_method_names_differ_by_case_only() -> None:
    names = [*method_names(), *sweep_methods([1, 3], [1, 2]), "ceb-V1", "ceb-k1"]
    folded = [n.casefold() for n in set(names)]
    assert len(folded) == len(set(folded)), sorted(names)
    for name in method_names():
        assert name == "ceb" or resolve_method(name).group != "sweep"
    with pytest.raises(ConfigError, match="reserved for V / k sweep cells"):
        register_method(MethodSpec("ceb-v2"))  # a case away from the sweep cell ceb-V2


def test_an_old_method_name_still_resolves_under_its_own_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalogue, "_NOTED", set())
    with structlog.testing.capture_logs() as logs:
        old = resolve_method("ceb-v1")
        resolve_method("ceb-v1")
    assert [e["use"] for e in logs if e["event"] == "method.renamed"] == ["ceb-single-vote"]  # noted once
    assert old.name == "ceb-v1" and old.group == "ablation" and old.votes == 1
    assert old.label == resolve_method("ceb-single-vote").label


def test_the_usefulness_k_of_a_lanes_bank_is_its_methods_k_unless_set() -> None:
    bank = {"policy": "usefulness", "max_records": 9}
    config = load_config(overrides={"ceb": {"k": 3}, "bank": bank})
    assert config.bank.usefulness_k is None  # recorded as derived, not as a copy of ceb.k
    assert new_bank(resolve_method("ceb"), config).settings.usefulness_k == 3
    assert new_bank(resolve_method("ceb-k1"), config).settings.usefulness_k == 1  # the sweep cell's own k
    assert new_bank(resolve_method("ceb"), config.model_copy(update={"ceb": CEBConfig(k=0)})).settings.usefulness_k == 1
    pinned = load_config(overrides={"ceb": {"k": 3}, "bank": {**bank, "usefulness_k": 2}})
    assert new_bank(resolve_method("ceb"), pinned).settings.usefulness_k == 2
    with pytest.raises(ConfigError, match="usefulness_k"):
        Bank(settings=BankConfig(policy="usefulness", max_records=9))
