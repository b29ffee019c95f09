"""The AMEX converter: TAP label rule, element-list states and actions on hand-computed fixtures, and errors."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from ceb.data.amex import (
    DEFAULT_STATE_CHARS,
    amex_step_label,
    convert_amex,
    render_elements,
    touched_box,
)
from ceb.data.reader import read_stream
from ceb.errors import ConfigError, DataError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "amex"
EPISODES = FIXTURES / "instruction_anno"
ELEMENTS = FIXTURES / "element_anno"
PREDICTIONS = FIXTURES / "predictions.jsonl"


def load(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def dump(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(data))
    return path


def prediction_lines() -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in PREDICTIONS.read_text().splitlines() if line.strip()]


def write_lines(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    return path


def copy_dataset(tmp_path: Path) -> Path:
    """A writable copy of the fixture dataset (instruction_anno and element_anno side by side)."""
    root = tmp_path / "amex"
    shutil.copytree(FIXTURES, root)
    return root


# --- the label rule (paper appendix "Experimental Details") -----------------------------------------

BOX = (50.0, 50.0, 150.0, 150.0)


@pytest.mark.parametrize(
    ("gold", "box", "predicted", "point", "label"),
    [
        ("TAP", BOX, "TAP", (100.0, 100.0), 1),  # inside
        ("TAP", BOX, "TAP", (150.0, 100.0), 1),  # on the right edge: edges count as inside
        ("TAP", BOX, "TAP", (50.0, 50.0), 1),  # on a corner
        ("TAP", BOX, "TAP", (150.5, 100.0), 0),  # just outside
        ("TAP", BOX, "tap", (100.0, 49.0), 0),
        ("TAP", BOX, "TYPE", (100.0, 100.0), 0),  # right place, wrong action type
        ("TAP", BOX, "PRESS_BACK", None, 0),
        ("TAP", None, "TAP", (100.0, 100.0), None),  # the human touched no clickable box
        ("TYPE", BOX, "TYPE", None, None),  # only TAP steps are scored
        ("SWIPE", BOX, "SWIPE", (100.0, 100.0), None),
        ("TASK_COMPLETE", None, "TASK_COMPLETE", None, None),
    ],
)
def test_only_tap_steps_are_scored_by_the_touch_box(
    gold: str, box: Any, predicted: str, point: Any, label: int | None
) -> None:
    assert amex_step_label(gold, box, predicted, point) == label


def test_the_touched_box_is_the_smallest_holding_the_point() -> None:
    boxes = [(0.0, 0.0, 1080.0, 600.0), (40.0, 250.0, 1040.0, 350.0), (40.0, 250.0, 1040.0, 350.0)]

    assert touched_box((540.0, 300.0), boxes) == 1  # nested: the inner box; a tie keeps the first
    assert touched_box((540.0, 500.0), boxes) == 0
    assert touched_box((1040.0, 350.0), boxes) == 1  # edge
    assert touched_box((2000.0, 300.0), boxes) is None
    assert touched_box((1.0, 1.0), []) is None


# --- the fixtures, converted ------------------------------------------------------------------------


def test_converts_the_fixture_episodes(tmp_path: Path) -> None:
    (stream,) = convert_amex(EPISODES, PREDICTIONS, tmp_path / "out")

    assert (stream.dataset, stream.actor, stream.trajectories, stream.steps) == ("amex", "gpt-4.1", 2, 8)
    assert stream.path.name == "amex-gpt-4.1.jsonl"
    # labelled steps: alpha 0 (1), alpha 2 (1), beta 0 (0), beta 2 (0)
    assert stream.positive_rate == pytest.approx(2 / 4)
    assert stream.sources == (str(EPISODES / "ep_alpha.json"), str(EPISODES / "ep_beta.json"), str(PREDICTIONS))

    alpha, beta = read_stream([stream.path])
    assert (alpha.id, alpha.domain, alpha.actor, alpha.env) == (
        "amex/gpt-4.1/ep_alpha",
        "mobile",
        "gpt-4.1",
        "com.google.android.apps.maps",
    )
    assert alpha.task == "Search for pizza places nearby in Google Maps."
    assert alpha.meta.keys() == {"episode_id", "file", "reference_actions"}
    assert (alpha.meta["episode_id"], alpha.meta["file"]) == ("ep_alpha", str(EPISODES / "ep_alpha.json"))
    # TAP inside the search bar; TYPE is not scored; TAP exactly on the result card's corner
    assert alpha.labels == (1, None, 1)
    # 1 px outside; the human's point is in no clickable box; PRESS_BACK for a TAP; SWIPE and
    # TASK_COMPLETE are not scored
    assert beta.labels == (0, None, 0, None, None)


def test_state_is_the_clickable_element_list(tmp_path: Path) -> None:
    (stream,) = convert_amex(EPISODES, PREDICTIONS, tmp_path / "out")
    alpha, beta = read_stream([stream.path])

    assert alpha.steps[0].state == (
        "screen 1080x2400 px; clickable elements:\n"
        '[0] text="Search panel" function="Top panel" bbox=[0,200,1080,600]\n'
        '[1] text="Search here" function="Opens the search box" bbox=[40,250,1040,350]'
    )
    # repeated xml_desc strings collapse; an empty functionality is left out; scrollables are not listed
    assert alpha.steps[2].state == (
        "screen 1080x2400 px; clickable elements:\n"
        '[0] text="Joe\'s Pizza | 4.5 stars" function="Opens the place details" bbox=[100,900,300,1100]\n'
        '[1] text="Pizza Hut" bbox=[320,900,520,1100]'
    )
    assert beta.steps[4].state == "screen 1080x2400 px; clickable elements: (none)"


def test_actions_name_the_element_under_the_predicted_point(tmp_path: Path) -> None:
    (stream,) = convert_amex(EPISODES, PREDICTIONS, tmp_path / "out")
    alpha, beta = read_stream([stream.path])

    assert [s.action for s in alpha.steps] == [
        "[TAP] (600, 320) on [1] Search here",
        '[TYPE] "pizza"',
        "[TAP] (300, 1100) on [0] Joe's Pizza | 4.5 stars",
    ]
    assert [(s.op, s.element, s.value) for s in alpha.steps] == [
        ("TAP", "[1] Search here", None),
        ("TYPE", None, "pizza"),
        ("TAP", "[0] Joe's Pizza | 4.5 stars", None),
    ]
    assert alpha.steps[0].reasoning == "Tap the search bar."
    assert alpha.steps[2].actor_logprobs == (-0.5, -0.01)
    assert [s.action for s in beta.steps] == [
        "[TAP] (151, 100)",
        "[TAP] (900, 2000)",
        "[PRESS_BACK]",
        "[SWIPE] (540, 1800) -> (540, 600)",
        "[TASK_COMPLETE]",
    ]


def test_observation_is_the_next_screen_and_the_reference_an_explicit_option(tmp_path: Path) -> None:
    (stream,) = convert_amex(EPISODES, PREDICTIONS, tmp_path / "out")
    alpha, beta = read_stream([stream.path])
    humans = [
        "[TAP] (540, 300) on [1] Search here",
        '[TYPE] "pizza"',
        "[TAP] (200, 1000) on [0] Joe's Pizza | 4.5 stars",
    ]

    # o_t is the screen after the step ran (step t+1's state), empty after the last one
    assert [s.observation for s in alpha.steps] == [alpha.steps[1].state, alpha.steps[2].state, ""]
    assert alpha.steps[1].state.startswith("screen 1080x2400 px; clickable elements:")
    assert all("reference action" not in s.observation for t in (alpha, beta) for s in t.steps)
    # the human's actions are kept for the judge in meta, which no stage sees
    assert alpha.meta["reference_actions"] == humans

    (ref,) = convert_amex(EPISODES, PREDICTIONS, tmp_path / "ref", observation="reference")
    alpha, beta = read_stream([ref.path])
    assert [s.observation for s in alpha.steps] == ["reference action executed: " + h for h in humans]
    assert beta.steps[2].observation == "reference action executed: [TAP] (540, 700) on [0] Dark theme"

    (empty,) = convert_amex(EPISODES, PREDICTIONS, tmp_path / "empty", observation="empty")
    assert all(s.observation == "" for t in read_stream([empty.path]) for s in t.steps)


@pytest.mark.parametrize(
    ("coords", "first", "last"),
    [
        ("permille", [500, 137.5], [500, 500]),
        ("unit", [0.5, 0.1375], [0.5, 0.5]),
        ("pixel", [540, 330], [540, 1200]),
    ],
)
def test_predicted_points_are_scaled_to_pixels(tmp_path: Path, coords: Any, first: Any, last: Any) -> None:
    records = [
        {"actor": "vlm", "episode_id": "ep_alpha", "step_id": 0, "action": "TAP", "touch_coord": first},
        {"actor": "vlm", "episode_id": "ep_alpha", "step_id": 1, "action": "TYPE", "type_text": "pizza"},
        {"actor": "vlm", "episode_id": "ep_alpha", "step_id": 2, "action": "TAP", "touch_coord": last},
    ]
    preds = write_lines(tmp_path / "p.jsonl", records)

    (stream,) = convert_amex(EPISODES / "ep_alpha.json", preds, tmp_path / "out", coords=coords)

    (alpha,) = read_stream([stream.path])
    # (540, 330) is in the search bar; (540, 1200) is below both result cards
    assert alpha.labels == (1, None, 0)
    assert alpha.steps[0].action == "[TAP] (540, 330) on [1] Search here"
    assert alpha.steps[2].action == "[TAP] (540, 1200)"


def test_a_tap_on_the_enclosing_panel_misses_the_touched_element(tmp_path: Path) -> None:
    records = prediction_lines()[:3]
    records[0]["touch_coord"] = [540, 500]  # inside the search panel [0,200,1080,600], below the bar
    preds = write_lines(tmp_path / "p.jsonl", records)

    (stream,) = convert_amex(EPISODES / "ep_alpha.json", preds, tmp_path / "out")

    (alpha,) = read_stream([stream.path])
    assert alpha.labels == (0, None, 1)
    assert alpha.steps[0].action == "[TAP] (540, 500) on [0] Search panel"


def test_a_stream_per_actor_holds_only_the_predicted_episodes(tmp_path: Path) -> None:
    records = [
        *prediction_lines(),
        {"actor": "other", "episode_id": "ep_beta", "step_id": 0, "action": "TAP", "touch_coord": [60, 60]},
        {"actor": "other", "episode_id": "ep_beta", "step_id": 1, "action": "PRESS_HOME"},
        {"actor": "other", "episode_id": "ep_beta", "step_id": 2, "action": "TAP", "touch_coord": [0, 600]},
        {"actor": "other", "episode_id": "ep_beta", "step_id": 3, "action": "PRESS_BACK"},
        {"actor": "other", "episode_id": "ep_beta", "step_id": 4, "action": "TASK_IMPOSSIBLE"},
    ]
    preds = write_lines(tmp_path / "p.jsonl", records)

    first, other = convert_amex(EPISODES, preds, tmp_path / "out", elements=ELEMENTS)

    assert (first.actor, other.actor) == ("gpt-4.1", "other")
    (beta,) = read_stream([other.path])
    assert beta.id == "amex/other/ep_beta"
    assert beta.labels == (1, None, 1, None, None)
    assert other.positive_rate == 1.0


def test_a_stream_without_labelled_steps_has_a_nan_positive_rate(tmp_path: Path) -> None:
    preds = write_lines(
        tmp_path / "p.jsonl",
        [
            {"actor": "m", "episode_id": "ep_alpha", "step_id": 0, "action": "TAP", "touch_coord": [1, 1]},
            {"actor": "m", "episode_id": "ep_alpha", "step_id": 1, "action": "TYPE", "type_text": "x"},
            {"actor": "m", "episode_id": "ep_alpha", "step_id": 2, "action": "TAP", "touch_coord": [1, 1]},
        ],
    )
    root = copy_dataset(tmp_path)
    episode = load(root / "instruction_anno" / "ep_alpha.json")
    for step in episode["steps"]:
        step["action"] = "PRESS_ENTER"
    dump(root / "instruction_anno" / "ep_alpha.json", episode)

    (stream,) = convert_amex(root / "instruction_anno" / "ep_alpha.json", preds, tmp_path / "out")

    assert math.isnan(stream.positive_rate)
    assert read_stream([stream.path])[0].labels == (None, None, None)


# --- the element list budget ------------------------------------------------------------------------


def test_element_list_keeps_within_its_budget_and_counts_what_it_leaves_out() -> None:
    elements = [{"bbox": [0, 10 * i, 100, 10 * i + 10], "xml_desc": [f"Item {i}"]} for i in range(40)]

    text = render_elements(elements, (1080, 2400), 300)

    assert len(text) <= 300
    lines = text.split("\n")
    assert lines[0] == "screen 1080x2400 px; clickable elements:"
    assert lines[1] == '[0] text="Item 0" bbox=[0,0,100,10]'
    shown = len(lines) - 2
    assert lines[-1] == f"... {40 - shown} more elements not shown"
    assert DEFAULT_STATE_CHARS == 2000
    assert render_elements(elements, None, 5000).count("\n") == 40  # all fit: header plus 40 lines


def test_element_list_refuses_a_tiny_budget_and_a_bad_box() -> None:
    with pytest.raises(ConfigError, match="at least 200"):
        render_elements([], None, 20)
    with pytest.raises(ValueError, match="element 0 has no valid bbox"):
        render_elements([{"bbox": [1, 2, 3]}])


# --- wrong layouts: every error names the file, the record and the field ----------------------------


@pytest.mark.parametrize(
    ("edit", "field", "step"),
    [
        (lambda e: e.pop("instruction"), "instruction", None),
        (lambda e: e.pop("steps"), "steps", None),
        (lambda e: e["steps"][0].pop("touch_coord"), "steps[0].touch_coord", 0),
        (lambda e: e["steps"][2].pop("action"), "steps[2].action", 2),
        (lambda e: e["steps"][1].pop("image_path"), "steps[1].image_path", 1),
        (lambda e: e["steps"][1].pop("step_id"), "steps[1].step_id", 1),
        (lambda e: e["steps"][2].update(touch_coord=[200]), "steps[2].touch_coord", 2),
        (lambda e: e["steps"][2].update(step_id=0), "steps[2].step_id", 2),
    ],
)
def test_a_bad_episode_field_is_named_with_file_episode_and_step(
    tmp_path: Path, edit: Any, field: str, step: int | None
) -> None:
    root = copy_dataset(tmp_path)
    path = root / "instruction_anno" / "ep_alpha.json"
    episode = load(path)
    edit(episode)
    dump(path, episode)

    with pytest.raises(DataError) as info:
        convert_amex(root / "instruction_anno", PREDICTIONS, tmp_path / "out")

    problem = info.value.problem
    assert (problem.path, problem.field, problem.trajectory_id, problem.step) == (str(path), field, "ep_alpha", step)
    assert str(path) in str(info.value) and field in str(info.value)
    assert not (tmp_path / "out").exists()


def test_a_missing_episode_id_is_named(tmp_path: Path) -> None:
    root = copy_dataset(tmp_path)
    path = root / "instruction_anno" / "ep_beta.json"
    episode = load(path)
    del episode["episode_id"]
    dump(path, episode)

    with pytest.raises(DataError) as info:
        convert_amex(root / "instruction_anno", PREDICTIONS, tmp_path / "out")

    assert (info.value.problem.path, info.value.problem.field) == (str(path), "episode_id")


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda a: a.pop("clickable_elements"), "clickable_elements"),
        (lambda a: a["clickable_elements"][1].pop("bbox"), "clickable_elements[1].bbox"),
        (lambda a: a["clickable_elements"][0].update(bbox=[0, 200, "1080", 600]), "clickable_elements[0].bbox"),
    ],
)
def test_a_bad_element_annotation_is_named(tmp_path: Path, edit: Any, field: str) -> None:
    root = copy_dataset(tmp_path)
    path = root / "element_anno" / "ep_alpha_0.json"
    annotation = load(path)
    edit(annotation)
    dump(path, annotation)

    with pytest.raises(DataError) as info:
        convert_amex(root / "instruction_anno", PREDICTIONS, tmp_path / "out")

    problem = info.value.problem
    assert (problem.path, problem.field, problem.trajectory_id, problem.step) == (str(path), field, "ep_alpha", 0)


def test_a_missing_element_annotation_names_the_expected_file(tmp_path: Path) -> None:
    root = copy_dataset(tmp_path)
    (root / "element_anno" / "ep_beta_3.json").unlink()

    with pytest.raises(DataError, match="no element annotation for image_path 'ep_beta_3.png'") as info:
        convert_amex(root / "instruction_anno", PREDICTIONS, tmp_path / "out")

    problem = info.value.problem
    assert (problem.path, problem.trajectory_id, problem.step) == (
        str(root / "element_anno" / "ep_beta_3.json"),
        "ep_beta",
        3,
    )


def test_a_missing_element_directory_is_explained(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="pass elements= explicitly"):
        convert_amex(EPISODES, PREDICTIONS, tmp_path / "out", elements=tmp_path / "nowhere")


def test_a_step_without_a_prediction_is_named(tmp_path: Path) -> None:
    records = [p for p in prediction_lines() if not (p["episode_id"] == "ep_beta" and p["step_id"] == 3)]
    preds = write_lines(tmp_path / "p.jsonl", records)

    with pytest.raises(DataError) as info:
        convert_amex(EPISODES, preds, tmp_path / "out")

    problem = info.value.problem
    assert (problem.path, problem.field, problem.trajectory_id, problem.step) == (str(preds), "step_id", "ep_beta", 3)
    assert "step_id 3" in problem.message


def test_an_unknown_episode_or_step_names_the_predictions_line(tmp_path: Path) -> None:
    extra = {"actor": "gpt-4.1", "episode_id": "ep_gamma", "step_id": 0, "action": "PRESS_BACK"}
    preds = write_lines(tmp_path / "p.jsonl", [*prediction_lines(), extra])
    with pytest.raises(DataError, match="unknown episode_id 'ep_gamma'") as info:
        convert_amex(EPISODES, preds, tmp_path / "out")
    assert (info.value.problem.path, info.value.problem.line, info.value.problem.field) == (str(preds), 9, "episode_id")

    extra = {"actor": "gpt-4.1", "episode_id": "ep_alpha", "step_id": 7, "action": "PRESS_BACK"}
    preds = write_lines(tmp_path / "p.jsonl", [*prediction_lines(), extra])
    with pytest.raises(DataError, match="unknown step_id 7") as info:
        convert_amex(EPISODES, preds, tmp_path / "out")
    assert (info.value.problem.line, info.value.problem.field) == (9, "step_id")


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r.pop("touch_coord"), "touch_coord"),  # a TAP needs its point
        (lambda r: r.update(touch_coord=[1, 2, 3]), "touch_coord"),
        (lambda r: r.pop("action"), "action"),
        (lambda r: r.update(step_id="0"), "step_id"),
        (lambda r: r.pop("actor"), "actor"),
        (lambda r: r.update(touch=[1, 2]), "touch"),
    ],
)
def test_a_bad_prediction_names_its_line_and_field(tmp_path: Path, edit: Any, field: str) -> None:
    records = prediction_lines()
    edit(records[0])
    preds = write_lines(tmp_path / "p.jsonl", records)

    with pytest.raises(DataError) as info:
        convert_amex(EPISODES, preds, tmp_path / "out")

    assert (info.value.problem.path, info.value.problem.line, info.value.problem.field) == (str(preds), 1, field)


def test_scaled_points_need_the_screen_size(tmp_path: Path) -> None:
    root = copy_dataset(tmp_path)
    path = root / "instruction_anno" / "ep_alpha.json"
    episode = load(path)
    del episode["steps"][2]["device_dim"]
    dump(path, episode)

    with pytest.raises(DataError, match="need the screen size") as info:
        convert_amex(path, PREDICTIONS, tmp_path / "out", coords="unit")

    problem = info.value.problem
    assert (problem.path, problem.field, problem.step) == (str(path), "steps[2].device_dim", 2)


def test_unknown_modes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown coords"):
        convert_amex(EPISODES, PREDICTIONS, tmp_path / "out", coords="inches")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown observation mode"):
        convert_amex(EPISODES, PREDICTIONS, tmp_path / "out", observation="next")  # type: ignore[arg-type]


def test_the_command_line_converts_the_fixture(tmp_path):
    from typer.testing import CliRunner

    from ceb.cli import app

    fixtures = Path(__file__).parents[1] / "fixtures" / "amex"
    result = CliRunner().invoke(
        app,
        [
            "convert",
            "amex",
            "--episodes",
            str(fixtures / "instruction_anno"),
            "--elements",
            str(fixtures / "element_anno"),
            "--predictions",
            str(fixtures / "predictions.jsonl"),
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert list(tmp_path.glob("amex-*.jsonl"))


# --- archives that unpack into nested folders ---------------------------------------------------------


def test_episodes_and_screens_in_nested_folders_are_found_in_a_fixed_order(tmp_path: Path) -> None:
    flat = convert_amex(EPISODES, PREDICTIONS, tmp_path / "flat")[0]
    root = tmp_path / "amex"
    # as an unpacked archive may lay them out: one folder per part, folders inside folders
    shutil.copy(EPISODES / "ep_beta.json", dump(root / "instruction_anno" / "part_10" / "x.json", {}))
    shutil.copy(EPISODES / "ep_alpha.json", dump(root / "instruction_anno" / "part_2" / "deep" / "y.json", {}))
    for i, screen in enumerate(sorted(ELEMENTS.glob("*.json"))):
        shutil.copy(screen, dump(root / "element_anno" / f"batch_{i % 3}" / screen.name, {}))

    (nested,) = convert_amex(root / "instruction_anno", PREDICTIONS, tmp_path / "out")

    # part_2 before part_10 (natural order per folder), whatever order the file system lists them in
    assert nested.sources == (
        str(root / "instruction_anno" / "part_2" / "deep" / "y.json"),
        str(root / "instruction_anno" / "part_10" / "x.json"),
        str(PREDICTIONS),
    )
    as_read = [(t.id, t.labels, [s.state for s in t.steps]) for t in read_stream([nested.path])]
    assert as_read == [(t.id, t.labels, [s.state for s in t.steps]) for t in read_stream([flat.path])]


def test_two_element_files_for_one_screen_are_refused(tmp_path: Path) -> None:
    root = copy_dataset(tmp_path)
    again = dump(root / "element_anno" / "more" / "ep_alpha_1.json", {"clickable_elements": []})

    with pytest.raises(DataError, match="a second element file for screenshot 'ep_alpha_1'") as info:
        convert_amex(root / "instruction_anno", PREDICTIONS, tmp_path / "out")

    assert info.value.problem.path == str(again)
