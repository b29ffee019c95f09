"""Run-level behaviour: ordering inside a lane, failure budget, fatal errors, cancellation, wiring checks."""

import anyio
import orjson
import pytest

from ceb.backends.base import ChatBackend, ChatRequest
from ceb.backends.scripted import ScriptedChat, ScriptedTransport
from ceb.bank import Bank
from ceb.config import load_config
from ceb.errors import ConfigError, FatalBackendError, RunError
from ceb.pipeline import read_rows, run_scoring
from ceb.stages import LLMCritic, LLMHindsight, PromptSet, assembly
from ceb.stages.assembly import Stages
from ceb.stages.offline import OfflineCritic, OfflineHindsight
from tests.support.builders import default_reply, n_steps_of, step, trajectory

pytestmark = pytest.mark.anyio


def stream(n: int = 4, steps: int = 3) -> list:
    return [
        trajectory(f"t{i}", *(step(f"cmd {i} {t}", f"out {i} {t}", label=t % 2) for t in range(steps)))
        for i in range(n)
    ]


def llm_stages(responder, config=None) -> tuple[Stages, ScriptedChat]:
    """LLM stages over a scripted endpoint, with the decoding settings of ``config``."""
    chat = ScriptedChat(responder)
    return assembly.llm_stages(config or load_config(), chat), chat


def scored(request: ChatRequest) -> str:
    """Critic score = 0.1 * (step number); hindsight labels alternate 1, 0, 1, ..."""
    if request.stage == "critic":
        t = int(request.messages[-1]["content"].split("command: cmd ")[-1].split()[1])
        return orjson.dumps({"score": round(0.1 * (t + 1), 2), "reason": ""}).decode()
    return orjson.dumps({"labels": [(t + 1) % 2 for t in range(n_steps_of(request))]}).decode()


async def test_each_prompt_holds_the_critics_own_earlier_scores_and_records_carry_them(tmp_path):
    config = load_config(overrides={"methods": ["ceb"], "ceb": {"votes": 3}})
    stages, chat = llm_stages(scored, config)
    await run_scoring({"s": stream()}, config, tmp_path, stages=stages)
    critic = [r for r in chat.requests if r.stage == "critic"]
    assert len(critic) >= 12
    for r in critic:  # in any order: trajectories scored ahead of the bank (speculation) interleave
        user = r.messages[-1]["content"]
        i, t = map(int, user.split("command: cmd ")[-1].split()[:2])
        for earlier in range(t):
            assert (
                f"Step {earlier + 1}: cmd {i} {earlier}\n  your score before it ran: {0.1 * (earlier + 1):.2f}" in user
            )
    bank = Bank.load(tmp_path / "banks" / "s__ceb.json")
    assert len(bank) == 12
    for r in bank.records:
        z = round(0.1 * (r.step + 1), 2)
        y = (r.step + 1) % 2
        assert r.score == z and r.pseudo_label == y and r.soft_vote == float(y)
        assert r.agreement == ((z >= 0.5) == bool(y))
        assert r.observation == f"out {r.trajectory_id[1:]} {r.step}"


async def test_a_trajectory_without_a_majority_of_valid_votes_is_not_banked(tmp_path):
    calls = {"n": 0}

    def few_votes(request: ChatRequest) -> str:
        if request.stage == "critic":
            return default_reply(request)
        calls["n"] += 1
        return default_reply(request) if calls["n"] % 5 == 1 else "unreadable"  # 1 valid vote in 5

    config = load_config(overrides={"methods": ["ceb"], "hindsight": {"format_retries": 0}})
    stages, _ = llm_stages(few_votes, config)
    summary = await run_scoring({"s": stream(2)}, config, tmp_path, stages=stages)
    assert summary.trajectories_not_banked == 2
    assert not Bank.load(tmp_path / "banks" / "s__ceb.json").records
    rows = list(read_rows(tmp_path / "hindsight.jsonl"))
    # One valid vote of V = 5 is short of the majority a trajectory needs (ceil(5 / 2) = 3 by default).
    assert config.ceb.votes == 5 and config.ceb.min_valid_votes is None
    assert all(len(r["votes"]) == 1 and r["failed_votes"] == 4 and r["records_added"] == 0 for r in rows)


async def test_failures_past_the_budget_stop_the_run_with_a_clear_error(tmp_path):
    config = load_config(overrides={"methods": ["static"], "fail_on_error": 3, "critic": {"format_retries": 0}})
    stages, _ = llm_stages(lambda r: "no json" if r.stage == "critic" else default_reply(r), config)
    with pytest.raises(RunError, match=r"stopping: 4 of 4 steps failed \(fail_on_error = 3\).*unreadable reply"):
        await run_scoring({"s": stream(5)}, config, tmp_path, stages=stages)
    assert len(list(read_rows(tmp_path / "scores.jsonl"))) >= 4  # what was finished is on disk


async def test_a_failure_fraction_is_judged_after_enough_steps(tmp_path):
    n = {"i": 0}

    def one_in_three(request: ChatRequest) -> str:
        n["i"] += 1
        return "bad" if request.stage == "critic" and n["i"] % 3 == 0 else default_reply(request)

    ok = load_config(overrides={"methods": ["static"], "fail_on_error": 0.5, "critic": {"format_retries": 0}})
    stages, _ = llm_stages(one_in_three, ok)
    summary = await run_scoring({"s": stream(10)}, ok, tmp_path / "a", stages=stages)
    assert summary.steps_failed == 10 and summary.steps_scored == 20
    strict = load_config(overrides={"methods": ["static"], "fail_on_error": 0.2, "critic": {"format_retries": 0}})
    with pytest.raises(RunError, match="fail_on_error = 0.2"):
        await run_scoring({"s": stream(10)}, strict, tmp_path / "b", stages=stages)


async def test_a_fatal_endpoint_error_stops_the_run_as_itself(tmp_path):
    def refuse(request: ChatRequest) -> str:
        raise FatalBackendError("401 from server: bad key", backend="scripted")

    stages, _ = llm_stages(refuse)
    with pytest.raises(FatalBackendError, match="401"):
        await run_scoring({"s": stream(2), "s2": stream(2)}, load_config(), tmp_path, stages=stages)


async def test_cancellation_keeps_finished_rows_and_saves_banks(tmp_path):
    class Slow(ScriptedTransport):
        async def send(self, request, endpoint):
            await anyio.sleep(0.002)
            return await super().send(request, endpoint)

    chat = ChatBackend(Slow(default_reply))
    prompts = PromptSet()
    stages = Stages(critic=LLMCritic(chat, prompts), hindsight=LLMHindsight(chat, prompts))
    # Long enough for the first rows on a loaded machine, with trajectories scored ahead (speculation) in flight.
    with anyio.move_on_after(1.0):
        await run_scoring({"s": stream(1000)}, load_config(overrides={"methods": ["ceb"]}), tmp_path, stages=stages)
    rows = list(read_rows(tmp_path / "scores.jsonl"))
    hrows = list(read_rows(tmp_path / "hindsight.jsonl"))
    assert 0 < len(rows) < 3000
    bank = Bank.load(tmp_path / "banks" / "s__ceb.json")
    assert len(bank) == 3 * len(hrows)  # the bank as of the last completed trajectory


async def test_a_template_that_breaks_only_with_precedents_fails_before_any_work(tmp_path):
    prompts = tmp_path / "prompts" / "shell"
    prompts.mkdir(parents=True)
    for kind in ("critic_system", "hindsight_system", "hindsight_user"):
        (prompts / f"{kind}.j2").write_text("{{ task }}")
    (prompts / "critic_user.j2").write_text("{% for e in precedents %}{{ e.no_such_field }}{% endfor %}{{ task }}")
    config = load_config(overrides={"prompts": {"prompt_dir": str(tmp_path / "prompts")}})
    stages = Stages(critic=OfflineCritic(), hindsight=OfflineHindsight())
    with pytest.raises(ConfigError, match="shell/critic_user.j2"):
        await run_scoring({"s": stream(2)}, config, tmp_path / "run", stages=stages)
    assert not (tmp_path / "run").exists()


async def test_alt_label_columns_reach_the_rows_for_evaluation_only(tmp_path):
    judged = [
        trajectory(
            "t0", step("ls", "a", label=0), step("pwd", "/", label=1), meta={"alt_labels": {"relabel_zq": [1, 1]}}
        ),
        trajectory(
            "t1", step("ls", "b", label=1), meta={"alt_labels": {"relabel_zq": [0, 1]}}
        ),  # wrong length: ignored
    ]
    stages, chat = llm_stages(default_reply)
    await run_scoring({"s": judged}, load_config(overrides={"methods": ["static"]}), tmp_path, stages=stages)
    rows = {(r["trajectory"], r["step"]): r["alt_labels"] for r in read_rows(tmp_path / "scores.jsonl")}
    judged_1 = [{"name": "relabel_zq", "label": 1}]
    assert rows == {("t0", 0): judged_1, ("t0", 1): judged_1, ("t1", 0): []}
    assert not any("relabel_zq" in m["content"] for r in chat.requests for m in r.messages)


def all_productive(request: ChatRequest) -> str:
    """Hindsight votes every step productive (as SmolLM2-135M nearly did); the critic answers its default."""
    if request.stage == "critic":
        return default_reply(request)
    return orjson.dumps({"labels": [1] * n_steps_of(request)}).decode()


async def test_summary_counts_votes_per_stream_and_warns_when_the_pseudo_labels_are_one_class(tmp_path):
    config = load_config(overrides={"methods": ["ceb"], "ceb": {"votes": 3}})
    stages, _ = llm_stages(all_productive, config)
    # 8 trajectories x 3 steps = 24 pseudo-labels per stream, every one 1.
    summary = await run_scoring({"yes": stream(8), "also": stream(8)}, config, tmp_path, stages=stages)
    doc = orjson.loads((tmp_path / "summary.json").read_bytes())
    assert doc["hindsight_votes"]["yes"] == {
        "votes_1": 72, "votes_0": 0, "votes_failed": 0, "pseudo_1": 24, "pseudo_0": 0
    }  # fmt: skip
    # The critic's one default score on 48 steps first, then each stream's one-class pseudo-labels.
    heads = [w.split(":")[0] for w in doc["warnings"]]
    assert heads == ["method ceb", "stream also, method ceb", "stream yes, method ceb"]
    assert doc["warnings"][0].startswith("method ceb: its scores take 1 distinct value(s) (0.6) over 48 scored steps")
    assert doc["warnings"] == summary.warnings()

    stages, _ = llm_stages(scored, config)  # labels alternate 1, 0, 1 within each trajectory
    summary = await run_scoring({"mixed": stream(8)}, config, tmp_path / "b", stages=stages)
    assert summary.hindsight_votes["mixed"].pseudo_1 == 16 and summary.hindsight_votes["mixed"].pseudo_0 == 8
    assert summary.warnings() == []  # 0.1 to 0.3 by step: three distinct scores


@pytest.mark.parametrize(("steps", "flagged"), [(4, False), (5, True)])
async def test_a_small_run_is_flagged_one_class_from_5_pseudo_labels(tmp_path, steps, flagged):
    config = load_config(overrides={"methods": ["ceb"], "ceb": {"votes": 3}})
    stages, _ = llm_stages(all_productive, config)
    summary = await run_scoring({"s": stream(1, steps)}, config, tmp_path, stages=stages)
    assert summary.hindsight_votes["s"].pseudo_1 == steps
    assert [w.split(":")[0] for w in summary.warnings()] == (["stream s, method ceb"] if flagged else [])


async def test_a_run_freezes_the_collectors_heap_and_restores_the_collector_after(tmp_path):
    import gc

    from ceb.gc_tuning import RUN_GC_THRESHOLD

    before = gc.get_threshold()
    seen: list[tuple[tuple[int, ...], int]] = []
    config = load_config(overrides={"methods": ["static"]})
    stages, _ = llm_stages(default_reply, config)

    def during(_row: object) -> None:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))

    await run_scoring({"s": stream(2)}, config, tmp_path, stages=stages, on_row=during)
    assert seen and all(t == RUN_GC_THRESHOLD and frozen > 0 for t, frozen in seen)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with pytest.raises(RunError):  # a run refused at the start restores it too
        await run_scoring({"s": stream(2)}, config, tmp_path, stages=stages)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
