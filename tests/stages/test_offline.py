"""The offline stand-ins: the critic's formula, the hindsight rules per domain and their abstentions."""

from pathlib import Path

import anyio
import orjson
import pytest

from ceb.bank import Bank, BankRecord, Hit, Retrieval
from ceb.config import HindsightConfig, load_config
from ceb.data import Step, Trajectory, convert_amex, convert_intercode, convert_mind2web, read_stream
from ceb.pipeline import read_rows, run_scoring
from ceb.stages import CriticInput
from ceb.stages.offline import NO_OBSERVATION_SHOWN, OfflineCritic, OfflineHindsight
from tests.support.builders import step, trajectory
from tests.support.paths import INTERCODE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
M2W = FIXTURES / "mind2web"
AMEX = FIXTURES / "amex"
SORTED = orjson.OPT_SORT_KEYS

pytestmark = pytest.mark.anyio

SHOWN = OfflineHindsight(HindsightConfig(gui_observations=True))
"""The labeller with web and mobile observations shown (``hindsight.gui_observations``); the default hides them."""


def hit(label: int, sim: float) -> Hit:
    r = BankRecord("q", "s", "a", "o", label, float(label), 0.5, None, "t", 0)
    return Hit(r, sim)


def inp(**kw) -> CriticInput:
    base = dict(domain="shell", task="q", step=0, state="s", action="a")
    return CriticInput(**(base | kw))


async def test_offline_critic_formula():
    # p0 = (3 + 1) / (8 + 2) = 0.4; weights 0.8^2 = 0.64 (y=1), 0.5^2 = 0.25 (y=1), 0.6^2 = 0.36 (y=0), 0 (y=0)
    # z = (0.64 + 0.25 + 1.0 * 0.4) / (0.64 + 0.25 + 0.36 + 0.0 + 1.0) = 1.29 / 2.25
    r = Retrieval(positives=(hit(1, 0.8), hit(1, 0.5)), negatives=(hit(0, 0.6), hit(0, 0.0)))
    res = await OfflineCritic().score(inp(retrieval=r, bank_size=8, bank_positive=3))
    assert res.score == pytest.approx(1.29 / 2.25)
    assert res.error is None and '"precedents":4' in res.raw


async def test_offline_critic_without_bank_is_the_prior_and_repetition_scales_it():
    assert (await OfflineCritic().score(inp())).score == pytest.approx(0.5)  # empty bank: p0 = 1/2
    static = inp(use_bank=False, retrieval=Retrieval(positives=(hit(1, 1.0),)), bank_size=10, bank_positive=10)
    assert (await OfflineCritic().score(static)).score == pytest.approx(0.5)  # static ignores the bank
    rep = await OfflineCritic(repetition_factor=0.6).score(inp(repetition_flag=True))
    assert rep.score == pytest.approx(0.3)


async def test_offline_critic_follows_the_closer_class():
    near_bad = Retrieval(positives=(hit(1, 0.1),), negatives=(hit(0, 0.9),))
    near_good = Retrieval(positives=(hit(1, 0.9),), negatives=(hit(0, 0.1),))
    bad = (await OfflineCritic().score(inp(retrieval=near_bad, bank_size=2, bank_positive=1))).score
    good = (await OfflineCritic().score(inp(retrieval=near_good, bank_size=2, bank_positive=1))).score
    assert bad < 0.5 < good


def test_offline_hindsight_rules():
    t = trajectory(
        "x",
        step("ls /testbed", "a.py b.py"),  # productive
        step("cat /nope", "cat: /nope: No such file or directory"),  # error
        step("ls /testbed", "a.py b.py"),  # repeat of step 1 (also no change)
        step("wc -l a.py", "3 a.py"),  # retried: the next action repeats it
        step("wc -l a.py ", "3 a.py"),  # repeat
        step("grep foo a.py", "foo"),  # productive
    )
    assert SHOWN.rules(t) == [(1, ""), (0, "error"), (0, "repeat"), (0, "retried"), (0, "repeat"), (1, "")]


async def test_offline_hindsight_votes_are_identical_copies():
    t = trajectory("x", step("ls", "a"), step("cat x", "cat: x: No such file or directory"))
    res = await OfflineHindsight().label(t, 5)
    assert len(res.votes) == 5 and res.soft_votes == (1.0, 0.0) and res.pseudo_labels == (1, 0)


def test_offline_stages_never_read_labels_or_rewards():
    a = trajectory("x", step("ls", "a", label=1, reward=1.0), step("pwd", "/", label=0, reward=0.0))
    b = trajectory("x", step("ls", "a", label=0, reward=0.0), step("pwd", "/", label=1, reward=0.9))
    assert SHOWN.rules(a) == SHOWN.rules(b)


# --- abstention --------------------------------------------------------------------------------------


def web(tid: str, *steps: Step, task: str = "Find one-way flights from New York to Boston.") -> Trajectory:
    return trajectory(tid, *steps, task=task, domain="web")


def mobile(tid: str, *steps: Step, task: str = "Turn on dark mode in Settings.") -> Trajectory:
    return trajectory(tid, *steps, task=task, domain="mobile")


def test_web_and_mobile_steps_without_an_observation_get_no_label():
    # Two empty observations are equal: the shell "no change" rule used to call every later step unproductive.
    t = web("w", step("[CLICK] <button> Search flights", ""), step("[TYPE] <input> From -> Boston", " \n"))
    assert SHOWN.rules(t) == [(None, "no observation"), (None, "no observation")]
    m = mobile("m", step("[TAP] (540, 300) on [1] Display", ""), step("[PRESS_BACK]", ""))
    assert [v.label for v in SHOWN.rules(m)] == [None, None]


def test_other_domains_abstain_on_empty_observations_and_keep_the_text_rules():
    t = trajectory(
        "g",
        step("search flights", ""),
        step("open result 1", "ERROR: result 1 does not exist"),
        step("open result 2", "Flight JB 123"),
        domain="travel",
    )
    assert SHOWN.rules(t) == [(None, "no observation"), (0, "error"), (1, "")]


async def test_label_leaves_abstained_steps_out_of_the_votes_and_says_why():
    t = web(
        "w",
        step("[CLICK] <button> Search flights", ""),
        step("[CLICK] <a> Deals", "reference action executed: [link]  Deals -> CLICK"),
        step("[CLICK] <a> Sign in", "reference action executed: [button]  Search -> CLICK"),
    )
    res = await SHOWN.label(t, 5)
    assert res.votes == ((1, 0),) * 5 and res.pseudo_labels == (1, 0) and res.failed_votes == 0
    assert res.abstained == ({"step": 0, "reason": "no observation"},)
    assert res.labelled_steps(3) == [1, 2]
    none = await SHOWN.label(web("e", step("[CLICK] <a> Deals", "")), 3)
    assert none.votes == ((), (), ()) and none.pseudo_labels == () and none.labelled_steps(1) == []


def empty_web_stream(n: int = 6) -> list[Trajectory]:
    """Mind2Web-style trajectories whose observations are empty, as the converter's ``observation="empty"``."""
    return [
        web(
            f"m2w/{i}",
            step(f"[CLICK] <a> Flights {i % 3}", "", label=1),
            step("[TYPE] <input> Where from? -> New York", "", label=i % 2),
            step("[CLICK] <button> Search", "", label=0),
        )
        for i in range(n)
    ]


async def test_a_stream_without_evidence_banks_nothing_and_the_critic_keeps_its_prior(tmp_path):
    config = load_config(overrides={"methods": ["ceb"], "ceb": {"votes": 3}, "hindsight": {"gui_observations": True}})
    summary = await run_scoring({"s": empty_web_stream()}, config, tmp_path)
    assert summary.trajectories_not_banked == 6 and summary.steps_abstained == 18 and summary.votes_failed == 0
    assert not Bank.load(tmp_path / "banks" / "s__ceb.json").records
    rows = list(read_rows(tmp_path / "hindsight.jsonl"))
    assert len(rows) == 6
    for r in rows:
        assert r["records_added"] == 0 and r["records"] == [] and r["pseudo_labels"] == [] and r["errors"] == []
        assert r["abstained"] == [{"step": t, "reason": "no observation"} for t in range(3)]
    # The repetition flag is the only thing left that moves a score: 0.5, or 0.5 * 0.6 when it is raised.
    for r in read_rows(tmp_path / "scores.jsonl"):
        assert r["score"] == pytest.approx(0.3 if r["repetition_flag"] else 0.5) and r["bank_size"] == 0


async def test_only_the_steps_with_evidence_enter_the_bank(tmp_path):
    t = web(
        "w",
        step("[CLICK] <button> Search flights", "", label=1),
        step("[CLICK] <a> Deals", "reference action executed: [link]  Deals -> CLICK", label=1),
    )
    config = load_config(overrides={"methods": ["ceb"], "ceb": {"votes": 3}, "hindsight": {"gui_observations": True}})
    summary = await run_scoring({"s": [t]}, config, tmp_path)
    assert summary.trajectories_not_banked == 0 and summary.steps_abstained == 1
    bank = Bank.load(tmp_path / "banks" / "s__ceb.json")
    assert [(r.step, r.pseudo_label) for r in bank.records] == [(1, 1)]
    (row,) = read_rows(tmp_path / "hindsight.jsonl")
    assert row["records_added"] == 1 and row["abstained"] == [{"step": 0, "reason": "no observation"}]


def mixed_web_stream() -> list[Trajectory]:
    """Each kind of web step: no observation, the reference action, URLs, an error page."""
    out = []
    for i in range(8):
        out.append(
            web(
                f"w{i}",
                step("[CLICK] <a> Flights", "" if i % 2 else "https://www.jetblue.com/", label=1),
                step(f"[CLICK] <a> Deal {i}", f"https://www.jetblue.com/deals/{i % 3}", label=i % 2),
                step("[TYPE] <input> From -> Boston", f"https://www.jetblue.com/deals/{i % 3}", label=1),
                step("[CLICK] <button> Search", "reference action executed: [button]  Search -> CLICK", label=1),
                step("[CLICK] <a> Book", "https://www.jetblue.com/error?code=500", label=0),
            )
        )
    return out


async def test_resumed_runs_reproduce_abstentions_and_banks(tmp_path):
    config = load_config(
        overrides={
            "methods": ["ceb", "static"],
            "ceb": {"votes": 3},
            "orders": 2,
            "hindsight": {"gui_observations": True},
        }
    )
    streams = {"web": mixed_web_stream(), "empty": empty_web_stream(4)}
    await run_scoring(streams, config, tmp_path / "full")
    full = {name: sorted_rows(tmp_path / "full" / name) for name in ("scores.jsonl", "hindsight.jsonl")}
    assert any(r["abstained"] and r["records_added"] for r in read_rows(tmp_path / "full" / "hindsight.jsonl"))
    for stop in (3, 40, 90):
        part = tmp_path / f"part{stop}"
        await run_until(streams, config, part, stop)
        await run_scoring(streams, config, part, resume=True)
        for name, rows in full.items():
            assert sorted_rows(part / name) == rows, f"stop {stop}: {name} differs"
        for bank in (tmp_path / "full" / "banks").glob("*.json"):
            assert Bank.load(part / "banks" / bank.name).records == Bank.load(bank).records


async def run_until(streams, config, run_dir, stop: int) -> None:
    """Run, and cancel the run once ``stop`` rows are on disk (an interruption)."""
    seen = 0
    with anyio.CancelScope() as scope:

        def on_row(row: object) -> None:
            nonlocal seen
            seen += 1
            if seen >= stop:
                scope.cancel()

        await run_scoring(streams, config, run_dir, on_row=on_row)


def sorted_rows(path) -> list[bytes]:
    out = []
    for r in read_rows(path):
        out.append(orjson.dumps({k: v for k, v in r.items() if k not in ("latency_s", "queue_s")}, option=SORTED))
    return sorted(out)


# --- web and mobile rules on converted fixtures ----------------------------------------------------------


def test_web_and_mobile_steps_abstain_by_default_as_the_prompt_shows_no_observation(tmp_path):
    # The converters' default observation is the next page or screen; the paper's web hindsight template shows no
    # observation, so the offline labeller must not read one either: nothing is banked.
    convert_mind2web(M2W, M2W / "predictions.jsonl", tmp_path)
    convert_amex(AMEX / "instruction_anno", AMEX / "predictions.jsonl", tmp_path, elements=AMEX / "element_anno")
    default = OfflineHindsight()
    verdicts = [v for t in read_stream(sorted(tmp_path.glob("*.jsonl"))) for v in default.rules(t.blinded())]
    assert len(verdicts) == 15 and set(verdicts) == {(None, NO_OBSERVATION_SHOWN)}
    # Shell keeps its rules: a command's output is what its hindsight prompt shows.
    assert default.rules(trajectory("s", step("ls", "error: no such file"))) == [(0, "error")]


def test_web_rules_read_the_next_page_when_observations_are_shown(tmp_path):
    convert_mind2web(M2W, M2W / "predictions.jsonl", tmp_path)
    (a1, b2, qwen) = read_stream(sorted(tmp_path.glob("*.jsonl")))
    # o_t is step t+1's page: a page that changed is progress, the last step has no page after it.
    assert [v.label for v in SHOWN.rules(a1.blinded())] == [None, 1, None]
    assert SHOWN.rules(a1.blinded())[2] == (None, "no observation")


def test_web_rules_compare_the_agents_action_with_the_executed_reference(tmp_path):
    convert_mind2web(M2W, M2W / "predictions.jsonl", tmp_path, observation="reference")
    got = {t.id: [tuple(v) for v in SHOWN.rules(t.blinded())] for t in read_stream(sorted(tmp_path.glob("*.jsonl")))}
    assert got == {
        # CLICK on "Search flights" = the reference's CLICK on "Search flights".
        # TYPE into "Where to?", the reference typed into "Where from?".
        # CLICK on the cabin menu, the reference SELECTed in it.
        "mind2web/gpt-4.1/a1": [(1, "reference action"), (0, "other element"), (0, "other operation")],
        # HOVER on "Weekly Ad" = the reference's HOVER; TYPE with no element chosen.
        "mind2web/gpt-4.1/b2": [(1, "reference action"), (0, "no element")],
        # A <nav> with the reference <span>'s text ([span] is a tag, not a role); TYPE into a "Search" box.
        "mind2web/qwen/qwen3/b2": [(0, "other element"), (1, "reference action")],
    }


def test_web_rules_abstain_when_the_converter_writes_no_observation(tmp_path):
    convert_mind2web(M2W, M2W / "predictions.jsonl", tmp_path, observation="empty")
    verdicts = [v for t in read_stream(sorted(tmp_path.glob("*.jsonl"))) for v in SHOWN.rules(t)]
    assert len(verdicts) == 7 and set(verdicts) == {(None, "no observation")}


def test_web_reference_rule_edge_cases():
    ref = "reference action executed: "
    t = web(
        "w",
        step("[CLICK] <svg>", ref + "[svg]  -> CLICK"),  # the reference names no text
        step("[CLICK] <div> Sun, Apr 9", ref + "[div]  Sun, Apr 9 -> CLICK"),
        step(
            "[CLICK] <span> Lorem ipsum dolor sit amet, consectetur adipi...",
            ref + "[span]  Lorem ipsum dolor sit amet, consectetur adipiscing elit -> CLICK",
        ),  # the converter cut the element's text
        step("[SELECT] <select> Sort by -> Price", ref + "[combobox]  Sort by -> SELECT: Price: Low to High"),
        step("[CLICK] <button> Search", ref + "a free-text note"),
    )
    assert SHOWN.rules(t) == [
        (None, "reference names no element text"),
        (1, "reference action"),
        (1, "reference action"),
        (1, "reference action"),  # the value is not compared, as the dataset's label does not
        (None, "reference action not readable"),
    ]


def test_mobile_rules_compare_the_agents_action_with_the_executed_reference(tmp_path):
    convert_amex(
        AMEX / "instruction_anno",
        AMEX / "predictions.jsonl",
        tmp_path,
        elements=AMEX / "element_anno",
        observation="reference",
    )
    got = {t.id: [tuple(v) for v in SHOWN.rules(t.blinded())] for t in read_stream(sorted(tmp_path.glob("*.jsonl")))}
    assert got == {
        # A tap on element [1] like the human's; the same typed text; a tap on element [0] like the human's.
        "amex/gpt-4.1/ep_alpha": [(1, "reference action"), (1, "reference action"), (1, "reference action")],
        "amex/gpt-4.1/ep_beta": [
            (0, "no element"),  # the agent's point is in no clickable element; the human's is on [0]
            (None, "reference touched no element"),
            (0, "other operation"),  # PRESS_BACK where the human tapped
            (1, "reference action"),  # the same swipe
            (1, "reference action"),  # TASK_COMPLETE, as the human
        ],
    }


def test_mobile_reference_rule_reads_swipes_and_typing():
    ref = "reference action executed: "
    t = mobile(
        "m",
        step("[SWIPE] (540, 600) -> (540, 1800)", ref + "[SWIPE] (540, 1800) -> (540, 600)"),  # down, not up
        step("[SWIPE] (500, 1700) -> (560, 900)", ref + "[SWIPE] (540, 1800) -> (540, 600)"),  # up, shorter
        step('[TYPE] "dark mode"', ref + '[TYPE] "Dark Mode "'),
        step('[TYPE] "dark"', ref + '[TYPE] "dark mode"'),
        step("[TAP] (100, 100) on [3] Wi-Fi", ref + "[TAP] (100, 900) on [7] Display"),
    )
    assert SHOWN.rules(t) == [
        (0, "other direction"),
        (1, "reference action"),
        (1, "reference action"),
        (0, "other text"),
        (0, "other element"),
    ]


def test_page_rules_read_urls_and_page_text():
    t = web(
        "u",
        step("[CLICK] <a> Flights", "https://www.jetblue.com/"),  # nothing earlier to compare with
        step("[CLICK] <a> Careers", "https://careers.jetblue.com/"),
        step("[TYPE] <input> Search jobs -> pilot", "https://careers.jetblue.com"),  # typing need not navigate
        step("[CLICK] <a> Pilots", "https://careers.jetblue.com/"),
        step("[CLICK] <a> Apply", "https://careers.jetblue.com/404"),
        step("[CLICK] <button> Next", ""),
        step("[CLICK] <a> Home", "https://www.jetblue.com/"),  # the previous page is unknown
    )
    assert SHOWN.rules(t) == [
        (None, "no earlier page to compare with"),
        (1, "navigated"),
        (None, "URL unchanged; the action need not navigate"),
        (0, "link did not navigate"),
        (0, "error page"),
        (None, "no observation"),
        (None, "no earlier page to compare with"),
    ]
    screens = mobile(
        "s",
        step("[TAP] (540, 300) on [1] Settings", "screen: Settings | Network | Display"),
        step("[TAP] (540, 900) on [2] Display", "screen: Display | Dark theme | Font size"),
        step("[TAP] (540, 2300) on [9] (no text)", "screen: Display | Dark theme | Font size"),
        step("[TAP] (540, 700) on [1] Dark theme", "Unfortunately, Settings has stopped."),
    )
    assert SHOWN.rules(screens) == [
        (None, "no earlier page to compare with"),
        (1, "page changed"),
        (0, "no change"),
        (0, "error page"),
    ]


# --- InterCode: the terminal rules, unchanged ------------------------------------------------------------


@pytest.fixture(scope="module")
def intercode(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Trajectory]:
    assert (INTERCODE / "data" / "results").is_dir(), f"the shared InterCode data is missing at {INTERCODE}"
    streams = convert_intercode(INTERCODE, tmp_path_factory.mktemp("intercode"))
    return {t.id: t for s in streams if "gpt-4" in s.path.name for t in read_stream([s.path])}


@pytest.mark.parametrize(
    ("tid", "expected"),
    [
        # Step 2 starts like step 1 (a retry); it equals step 1 once case is folded (-d / -D); step 3 is new.
        ("intercode-bash/gpt-4/fs_1/0", [(0, "retried"), (0, "repeat"), (1, "")]),
        # "xxd: command not found"; then a command that prints its answer.
        ("intercode-bash/gpt-4/fs_1/17", [(0, "error"), (1, "")]),
        # A silent command is a reading in a shell (it ran); the same silence again is no change.
        ("intercode-bash/gpt-4/fs_2/32", [(1, ""), (0, "no change")]),
        # SQL: "Table ... doesn't exist", then a query that returns rows.
        ("intercode-sql/gpt-4/128", [(0, "error"), (1, "")]),
    ],
)
def test_terminal_rules_label_real_intercode_trajectories_as_before(intercode, tid, expected):
    assert SHOWN.rules(intercode[tid].blinded()) == expected


async def test_the_repeat_rule_folds_each_action_once(monkeypatch):
    """The repeat rule reads each action once: linear in the trajectory's length, not one pass per earlier step."""
    import ceb.stages.offline as offline

    calls = 0
    fold = offline.normalize_action

    def counted(action: str) -> str:
        nonlocal calls
        calls += 1
        return fold(action)

    monkeypatch.setattr(offline, "normalize_action", counted)
    n = 2000
    steps = [step(f"cat file{t}", f"line {t}") for t in range(n)]
    fired = SHOWN.rules(trajectory("long", *steps))
    # The retried rule folds the next action for its 40-character prefix: two more folds per step at most.
    assert calls <= 3 * n
    assert [v.rule for v in fired] == [""] * n


def test_the_repeat_rule_flags_a_folded_repeat_of_any_earlier_action():
    t = trajectory(
        "r",
        step("ls -la", "a"),
        step("cat x", "b"),
        step("pwd", "c"),
        step("echo 1", "d"),
        step("LS   -LA", "e"),  # four steps later, folded: a repeat, however far back
        step("cat  X ", "f"),
    )
    assert [v.rule for v in SHOWN.rules(t)] == ["", "", "", "", "repeat", "repeat"]
