"""What each method sends, rendered with no endpoint (``ceb prompts``), and the reference actions it must not hold.

Issue 32 item 1: on Mind2Web and AMEX the ground-truth label is computed from the human's recorded action, so no
prompt of any method (critic, hindsight, every baseline; the judge aside) may show it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import orjson
import pytest
from typer.testing import CliRunner

from ceb.bank import RETRIEVERS
from ceb.cli import app
from ceb.config import load_config
from ceb.data import convert_amex, convert_mind2web, read_stream
from ceb.data.converters import Observation
from ceb.data.trajectory import Trajectory
from ceb.errors import ConfigError
from ceb.pipeline.prompts import RenderedRequest, render_prompts
from ceb.stages.judge import first_without_reference, judge_context
from ceb.stages.methods import METHODS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
M2W = FIXTURES / "mind2web"
AMEX = FIXTURES / "amex"


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def mind2web_references() -> dict[str, list[list[str]]]:
    """Per annotation id, per step: the strings that give the human's action away, read from the task files."""
    out: dict[str, list[list[str]]] = {}
    for path in (M2W / "train_2.json", M2W / "train_10.json"):
        for task in json.loads(path.read_text()):
            steps = []
            for repr_, action in zip(task["action_reprs"], task["actions"], strict=True):
                role_free = repr_.split("]", 1)[1].strip()  # "Where from? -> TYPE: New York"
                op, value = action["operation"]["op"], action["operation"].get("value") or ""
                steps.append([repr_, role_free, f"-> {op}: {value}" if value else f"-> {op}"])
            out[task["annotation_id"]] = steps
    return out


def amex_references() -> dict[str, list[list[str]]]:
    """Per episode, per step: the human's action as the converter renders it and, for a tap, the touched point."""
    out: dict[str, list[list[str]]] = {}
    for path in sorted((AMEX / "instruction_anno").glob("*.json")):
        episode = json.loads(path.read_text())
        steps = []
        for s in episode["steps"]:
            x, y = s["touch_coord"]
            steps.append([f"({x}, {y})"] if s["action"] == "TAP" else [])
        out[episode["episode_id"]] = steps
    return out


def convert(kind: str, tmp_path: Path, observation: Observation | None = None) -> list[Trajectory]:
    """The fixture's streams, with the converter's default observation unless one is named."""
    mode = {"observation": observation} if observation is not None else {}
    if kind == "mind2web":
        written = convert_mind2web(M2W, M2W / "predictions.jsonl", tmp_path, **mode)
    else:
        written = convert_amex(
            AMEX / "instruction_anno", AMEX / "predictions.jsonl", tmp_path, elements=AMEX / "element_anno", **mode
        )
    return [t for s in written for t in read_stream([s.path])]


def references(kind: str, trajectory: Trajectory) -> list[list[str]]:
    """Each step's giveaway strings: the human's action as ``meta`` keeps it, plus the dataset's own forms."""
    key = trajectory.meta["annotation_id" if kind == "mind2web" else "episode_id"]
    extra = (mind2web_references() if kind == "mind2web" else amex_references())[key]
    kept = trajectory.meta["reference_actions"]
    assert len(kept) == len(extra) == len(trajectory.steps)
    # The agent's own words reveal nothing: a reference the agent wrote itself (a correct tap) is not a leak.
    own = " ".join(f"{s.action} {s.element or ''} {s.value or ''} {s.reasoning or ''}" for s in trajectory.steps)
    return [
        [r for r in (k, *forms, "reference action executed") if r and _fold(r) not in _fold(own)]
        for k, forms in zip(kept, extra, strict=True)
    ]


def leaks(kind: str, trajectories: list[Trajectory], rendered: list[RenderedRequest]) -> list[str]:
    by_id = {t.id: t for t in trajectories}
    found = []
    for r in rendered:
        text = _fold("\n".join(m["content"] for m in r.messages))
        for t, giveaways in enumerate(references(kind, by_id[r.trajectory])):
            found += [
                f"{r.stage} of {r.trajectory} step {r.step}: step {t}'s {g!r}" for g in giveaways if _fold(g) in text
            ]
    return found


def render_all(trajectories: list[Trajectory], method: str) -> list[RenderedRequest]:
    ids = {t.id for t in trajectories}
    out: list[RenderedRequest] = []
    for actor in sorted({t.actor for t in trajectories}, key=str):  # one stream per actor, as converted
        stream = [t for t in trajectories if t.actor == actor]
        out += anyio.run(
            lambda s=stream: render_prompts(s, load_config(), method, trajectory_ids=ids & {t.id for t in s})
        )
    return out


# Without the dense extra ``ceb-dense-retrieval`` cannot be built; tests/bank/test_dense.py skips, saying so.
METHOD_NAMES = [m for m in METHODS.names() if m != "ceb-dense-retrieval" or not RETRIEVERS.missing("dense")]


@pytest.mark.parametrize("kind", ["mind2web", "amex"])
def test_no_prompt_of_any_method_shows_a_reference_action(kind: str, tmp_path: Path) -> None:
    trajectories = convert(kind, tmp_path)  # the defaults: converter, prompts, config
    stages = set()
    for method in METHOD_NAMES:
        rendered = render_all(trajectories, method)
        stages |= {(method, r.stage) for r in rendered}
        assert leaks(kind, trajectories, rendered) == [], method
    # Guards the check: every method was rendered, the critic for each and the labeller for the bank methods.
    assert {m for m, _ in stages} == set(METHOD_NAMES)
    assert ("ceb", "hindsight") in stages and ("static", "hindsight") not in stages


@pytest.mark.parametrize("kind", ["mind2web", "amex"])
def test_the_check_finds_the_reference_when_the_converter_is_told_to_show_it(kind: str, tmp_path: Path) -> None:
    trajectories = convert(kind, tmp_path, "reference")
    for method in ("ceb", "static", "cot"):
        assert leaks(kind, trajectories, render_all(trajectories, method)), method


def test_hindsight_shows_web_observations_only_when_asked(tmp_path: Path) -> None:
    trajectories = convert("mind2web", tmp_path, "reference")
    stream = [t for t in trajectories if t.actor == "gpt-4.1"]
    shown = load_config(overrides={"hindsight": {"gui_observations": True}})
    for config, expect in ((load_config(), False), (shown, True)):
        rendered = anyio.run(lambda c=config: render_prompts(stream, c, "ceb", steps=()))
        users = [r.messages[1]["content"] for r in rendered if r.stage == "hindsight"]
        assert users and all(("what happened: reference action executed" in u) is expect for u in users)
    # the appendix template: operation, element, value and reasoning on the step's line, the operation once
    assert "Step 2: [TYPE] (no element) = bread | reason: No search box is visible." in users[0]


@pytest.mark.parametrize(
    ("kind", "critic_lines", "hindsight_line"),
    [
        # a Mind2Web TYPE with no element: the appendix's Operation / Element lines, the value on its own
        (
            "mind2web",
            "  operation: TYPE\n  element: (no element)\n  value: bread\n",
            "Step 2: [TYPE] (no element) = bread",
        ),
        # an AMEX tap that hits an element keeps its tap point; one that hits none shows the point alone
        (
            "amex",
            "  type: TAP\n  target: (600, 320) on [1] Search here\n",
            "Step 1: [TAP] (600, 320) on [1] Search here |",
        ),
        ("amex", "  type: TAP\n  target: (151, 100)\n", "Step 1: [TAP] (151, 100) |"),
    ],
)
def test_critic_and_hindsight_show_the_operation_once_and_what_it_acts_on(
    kind: str, critic_lines: str, hindsight_line: str, tmp_path: Path
) -> None:
    rendered = render_all(convert(kind, tmp_path), "ceb")
    critic = [r.messages[1]["content"] for r in rendered if r.stage == "critic"]
    hindsight = [r.messages[1]["content"] for r in rendered if r.stage == "hindsight"]
    assert any(critic_lines in c for c in critic)
    assert any(hindsight_line in h for h in hindsight)
    for text in critic + hindsight:  # never the operation twice, as the old fallback to the action text did
        assert not re.search(r"\[(TYPE|TAP|CLICK|SELECT|HOVER)\] \[\1\]|(element|target): \[[A-Z_]+\]", text)


def test_the_bank_stands_as_at_the_chosen_step_and_bodies_are_exact(tmp_path: Path) -> None:
    trajectories = convert("amex", tmp_path, "next-state")
    config = load_config(overrides={"backend": {"model": "m"}, "methods": ["ceb-gt-oracle"]})
    first, last = (
        anyio.run(lambda i=i: render_prompts(trajectories, config, "ceb-gt-oracle", trajectory_ids={i}))
        for i in (trajectories[0].id, trajectories[-1].id)
    )
    assert {r.bank_size for r in first} == {0}
    # the oracle banks the first episode's labelled steps (2 of 3) before the second is scored
    assert {r.bank_size for r in last} == {2}
    assert [r.step for r in last] == list(range(len(trajectories[-1].steps)))
    body = last[0].body
    assert body["model"] == "m" and body["messages"] == list(last[0].messages)
    assert "Precedents from earlier trajectories:\nPrecedent 1" in last[0].messages[1]["content"]


def test_an_unknown_trajectory_or_method_is_refused(tmp_path: Path) -> None:
    trajectories = convert("amex", tmp_path, "next-state")
    with pytest.raises(ConfigError, match="no trajectory 'nope'"):
        anyio.run(lambda: render_prompts(trajectories, load_config(), "ceb", trajectory_ids={"nope"}))
    with pytest.raises(ConfigError):
        anyio.run(lambda: render_prompts(trajectories, load_config(), "no-such-method"))


def test_the_command_prints_messages_or_json_bodies(tmp_path: Path) -> None:
    convert("amex", tmp_path, "next-state")
    stream = tmp_path / "amex-gpt-4.1.jsonl"
    runner = CliRunner()
    text = runner.invoke(app, ["prompts", str(stream), "--step", "0"])
    assert text.exit_code == 0, text.output
    assert text.output.startswith("=== ceb critic request: trajectory amex/gpt-4.1/ep_beta, step 0 (bank: 0 records)")
    assert re.search(r"=== ceb hindsight request: .*sent 5 times\)", text.output)
    lines = runner.invoke(app, ["prompts", str(stream), "--json", "--method", "static"])
    assert lines.exit_code == 0, lines.output
    rows = [orjson.loads(line) for line in lines.output.splitlines()]
    assert [(r["step"], r["stage"]) for r in rows] == [(t, "critic") for t in range(5)]
    assert all(r["body"]["messages"][0]["role"] == "system" for r in rows)
    bad = runner.invoke(app, ["prompts", str(stream), "--trajectory", "nope"])
    assert bad.exit_code == 2 and "error: no trajectory 'nope'" in bad.output


@pytest.mark.parametrize("kind", ["mind2web", "amex"])
def test_the_judge_still_gets_the_reference_from_meta(kind: str, tmp_path: Path) -> None:
    # The judge aside: it is shown the human's action on purpose, now from meta, as no observation holds it.
    trajectories = convert(kind, tmp_path)
    for t in trajectories:
        shown = [s["reference"] for s in judge_context(t)["steps"]]
        assert shown == t.meta["reference_actions"] and all(shown)
    assert first_without_reference(trajectories) is None
    # A stage's blinded copy carries no meta, and so no reference.
    assert first_without_reference([t.blinded() for t in trajectories]) == (trajectories[0].blinded(), 0)
