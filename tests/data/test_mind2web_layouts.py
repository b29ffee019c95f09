"""Mind2Web as people download it: the Hub's Multimodal-Mind2Web Parquet, MindAct's predictions, and streaming.

The fixtures are in the exact upstream layouts (tests/fixtures/mind2web*/README.md cite the cards and loaders).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.data.mind2web import convert_mind2web
from ceb.data.reader import read_stream
from ceb.errors import DataError
from tests.data.mind2web_layouts import MULTIMODAL_SCHEMA, multimodal_rows, write_multimodal

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RAW = FIXTURES / "mind2web"
RAW_TASKS = [RAW / "train_2.json", RAW / "train_10.json"]
PREDICTIONS = RAW / "predictions.jsonl"
MULTIMODAL = FIXTURES / "mind2web_multimodal"
PARQUET = MULTIMODAL / "test_task-00000-of-00001.parquet"
MINDACT = FIXTURES / "mind2web_mindact" / "test_task_predictions_top50.json"


def raw_tasks() -> list[dict[str, Any]]:
    return [task for path in RAW_TASKS for task in orjson.loads(path.read_bytes())]


def steps_of(path: Path) -> list[tuple[str, tuple[int | None, ...], list[tuple[str, str, str]]]]:
    return [(t.id, t.labels, [(s.state, s.action, s.observation) for s in t.steps]) for t in read_stream([path])]


def rows_file(tmp_path: Path, edit: Any, name: str = "test_task-00000-of-00001.parquet") -> Path:
    rows = list(multimodal_rows(raw_tasks()))
    edit(rows)
    path = tmp_path / name
    pq.write_table(pa.Table.from_pylist(rows, schema=MULTIMODAL_SCHEMA), path)
    return path


# --- the Multimodal-Mind2Web Parquet layout ---------------------------------------------------------------


def test_the_committed_parquet_fixture_is_the_raw_fixture_in_the_hub_layout() -> None:
    table = pq.read_table(PARQUET)

    assert table.schema.equals(MULTIMODAL_SCHEMA)
    assert table.to_pylist() == list(multimodal_rows(raw_tasks()))


def test_the_parquet_layout_converts_to_the_same_streams_as_the_raw_json(tmp_path: Path) -> None:
    raw = convert_mind2web(RAW_TASKS, PREDICTIONS, tmp_path / "raw")
    hub = convert_mind2web(MULTIMODAL, PREDICTIONS, tmp_path / "hub")

    assert [s.path.name for s in hub] == ["mind2web-gpt-4.1.jsonl", "mind2web-qwen_qwen3.jsonl"]
    assert hub[0].sources == (str(PARQUET), str(PREDICTIONS))
    for r, h in zip(raw, hub, strict=True):
        assert steps_of(h.path) == steps_of(r.path)
    assert [t.labels for t in read_stream([hub[0].path])] == [(1, 0, 0), (1, 0)]


def test_step_order_follows_target_action_index_and_row_order_without_it(tmp_path: Path) -> None:
    def swap_first_two(rows: list[dict[str, Any]]) -> None:
        rows[0], rows[1] = rows[1], rows[0]

    swapped = rows_file(tmp_path, swap_first_two)
    (stream, _) = convert_mind2web(swapped, PREDICTIONS, tmp_path / "out")
    assert read_stream([stream.path])[0].labels == (1, 0, 0)

    table = pq.read_table(PARQUET).drop_columns(["target_action_index", "target_action_reprs"])
    older = tmp_path / "older.parquet"  # the card's first revision had neither column
    pq.write_table(table, older)
    (stream, _) = convert_mind2web(older, PREDICTIONS, tmp_path / "older")
    assert steps_of(stream.path) == steps_of(convert_mind2web(PARQUET, PREDICTIONS, tmp_path / "new")[0].path)


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        (lambda rows: rows[1].update(operation="{oops"), "row[1].operation", "not a JSON-encoded object"),
        (lambda rows: rows[1].update(operation='{"value": ""}'), "row[1].operation", "'op' is missing"),
        (lambda rows: rows[2].update(cleaned_html=None), "row[2].cleaned_html", "missing or not a string"),
        (lambda rows: rows[0]["pos_candidates"].append('{"tag": "a"}'), "row[0].pos_candidates[1]", "backend_node_id"),
        (lambda rows: rows[2].update(target_action_index="7"), "row[2].target_action_index", "0..2"),
        (lambda rows: rows[0].update(confirmed_task=""), "row[0].confirmed_task", "non-empty string"),
    ],
)
def test_a_bad_row_is_named_by_file_row_and_field(tmp_path: Path, edit: Any, field: str, message: str) -> None:
    path = rows_file(tmp_path, edit)

    with pytest.raises(DataError, match=message) as info:
        convert_mind2web(path, PREDICTIONS, tmp_path / "out")

    assert (info.value.problem.path, info.value.problem.field) == (str(path), field)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


def test_a_missing_column_and_split_task_rows_are_refused(tmp_path: Path) -> None:
    no_ops = tmp_path / "no_ops.parquet"
    pq.write_table(pq.read_table(PARQUET).drop_columns(["operation"]), no_ops)
    with pytest.raises(DataError, match="column missing") as info:
        convert_mind2web(no_ops, PREDICTIONS, tmp_path / "out")
    assert (info.value.problem.path, info.value.problem.field) == (str(no_ops), "operation")

    def split_a1(rows: list[dict[str, Any]]) -> None:
        rows.insert(1, rows.pop(3))  # b2's first row between a1's rows

    with pytest.raises(
        DataError, match="lists 3 actions but the task has 1 rows here .a task.s rows must be consecutive"
    ):
        convert_mind2web(rows_file(tmp_path, split_a1), PREDICTIONS, tmp_path / "out")


def _reshard(tmp_path: Path, cuts: list[int]) -> Path:
    """The Parquet fixture as the ``datasets`` library shards a split: equal row counts, cut at ``cuts`` (row
    indices), whatever task a cut falls in; named like the Hub's shards."""
    table = pq.read_table(PARQUET)
    folder = tmp_path / "snapshot" / "data"
    folder.mkdir(parents=True)
    bounds = [0, *cuts, table.num_rows]
    for k, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        pq.write_table(table.slice(lo, hi - lo), folder / f"test_task-{k:05d}-of-{len(bounds) - 1:05d}-abc.parquet")
    return folder


def _without_file(path: Path) -> list[bytes]:
    """The stream's lines with each trajectory's ``meta.file`` left out (it names the file(s) a task came from)."""
    lines = []
    for line in path.read_bytes().splitlines():
        record = orjson.loads(line)
        record.get("meta", {}).pop("file", None)
        lines.append(orjson.dumps(record))
    return lines


def test_hub_shards_cut_inside_a_task_convert_as_the_unsharded_file(tmp_path: Path) -> None:
    """The ``datasets`` library cuts a split at equal row counts (test_task: 5 shards of about 268 rows), ignoring
    task boundaries: a task's rows that run on into the next shard are joined (issue 34.1)."""
    whole = convert_mind2web(PARQUET, PREDICTIONS, tmp_path / "whole")
    # Rows: task a1 is rows 0-2, c3 row 3, b2 rows 4-5: cut inside a1 and inside b2.
    sharded = _reshard(tmp_path, [1, 5])
    hub = convert_mind2web(sharded, PREDICTIONS, tmp_path / "hub")
    for w, h in zip(whole, hub, strict=True):
        assert h.path.name == w.path.name
        assert _without_file(h.path) == _without_file(w.path)
        assert (h.trajectories, h.steps, h.positive_rate) == (w.trajectories, w.steps, w.positive_rate)
    shards = sorted(str(p) for p in sharded.iterdir())
    a1, b2 = read_stream([hub[0].path])
    assert a1.meta["file"] == shards[:2] and b2.meta["file"] == shards[1:]
    # A task whose rows are not consecutive is still refused, across shards too.
    with pytest.raises(DataError, match="repeats"):
        convert_mind2web([sharded, sharded], PREDICTIONS, tmp_path / "twice")


def test_repeated_tasks_options_accumulate(tmp_path: Path) -> None:
    """``--tasks`` given twice reads both (a second one used to replace the first, silently)."""
    sharded = _reshard(tmp_path, [5])  # inside b2
    first, second = sorted(sharded.iterdir())
    result = CliRunner().invoke(
        app,
        ["convert", "mind2web", "--tasks", str(first), "--tasks", str(second), "--predictions", str(PREDICTIONS)]
        + ["--out", str(tmp_path / "out")],
    )
    assert result.exit_code == 0, result.output
    whole = convert_mind2web(PARQUET, PREDICTIONS, tmp_path / "whole")
    for w in whole:
        assert _without_file(tmp_path / "out" / w.path.name) == _without_file(w.path)
    only_second = CliRunner().invoke(
        app, ["convert", "mind2web", "--tasks", str(second), "--predictions", str(PREDICTIONS), "--out", "x"]
    )
    # Alone, the second shard holds the end of b2 only: refused, naming the file.
    assert only_second.exit_code == 2 and str(second) in only_second.output


def test_a_task_cut_at_the_edge_of_the_shards_given_names_the_shard_to_add(tmp_path: Path) -> None:
    sharded = _reshard(tmp_path, [1, 5])  # a1 runs from shard 0 into shard 1, b2 from shard 1 into shard 2
    first, middle, last = sorted(sharded.iterdir())
    with pytest.raises(DataError, match=r"began in the shard before test_task-00001-of-00003-abc.parquet") as info:
        convert_mind2web(middle, PREDICTIONS, tmp_path / "out")
    assert "add test_task-00000-of-00003-*.parquet to --tasks" in str(info.value)
    with pytest.raises(DataError, match=r"goes on in the shard after test_task-00001-of-00003-abc.parquet") as info:
        convert_mind2web([first, middle], PREDICTIONS, tmp_path / "out")
    assert "add test_task-00002-of-00003-*.parquet to --tasks" in str(info.value)
    assert not (tmp_path / "out").exists()


def test_a_revision_storing_target_action_index_as_a_list_of_one_is_read(tmp_path: Path) -> None:
    """The card's ``sequence: string`` revision: ``target_action_index`` and ``target_action_reprs`` as lists."""
    table = pq.read_table(PARQUET)
    for name in ("target_action_index", "target_action_reprs"):
        listed = pa.array([[v] for v in table[name].to_pylist()], pa.list_(pa.string()))
        table = table.set_column(table.schema.get_field_index(name), name, listed)
    listed_file = tmp_path / "listed.parquet"
    pq.write_table(table, listed_file)
    (stream, _) = convert_mind2web(listed_file, PREDICTIONS, tmp_path / "listed")
    (plain, _) = convert_mind2web(PARQUET, PREDICTIONS, tmp_path / "plain")
    assert steps_of(stream.path) == steps_of(plain.path)
    assert [t.meta["reference_actions"] for t in read_stream([stream.path])] == [
        t.meta["reference_actions"] for t in read_stream([plain.path])
    ]


def test_regenerate_reads_a_task_back_from_the_shards_it_spans(tmp_path: Path) -> None:
    """``ceb regenerate`` reads each trajectory's task again from the files its meta names: for a task cut across
    shards, those shards only, where the neighbouring tasks are cut too."""
    from ceb.data.references import mind2web_references

    sharded = _reshard(tmp_path, [1, 5])
    (stream, _) = convert_mind2web(sharded, PREDICTIONS, tmp_path / "hub")
    a1, b2 = read_stream([stream.path])
    refs = mind2web_references([a1])
    assert sorted(t for (tid, t) in refs if tid == a1.id) == [0, 1, 2]
    refs = mind2web_references([b2])
    assert sorted(t for (tid, t) in refs if tid == b2.id) == [0, 1]


def test_the_layout_is_told_by_suffix_or_given(tmp_path: Path) -> None:
    odd = tmp_path / "tasks.data"
    odd.write_bytes(PARQUET.read_bytes())
    with pytest.raises(DataError, match="pass --layout raw or multimodal") as info:
        convert_mind2web(odd, PREDICTIONS, tmp_path / "out")
    assert info.value.problem.path == str(odd)

    (stream, _) = convert_mind2web(odd, PREDICTIONS, tmp_path / "out", layout="multimodal")
    assert read_stream([stream.path])[0].labels == (1, 0, 0)

    both = tmp_path / "both"
    both.mkdir()
    (both / "a.json").write_bytes(RAW_TASKS[0].read_bytes())
    (both / "b.parquet").write_bytes(PARQUET.read_bytes())
    with pytest.raises(DataError, match="holds both"):
        convert_mind2web(both, PREDICTIONS, tmp_path / "out")
    (stream, _) = convert_mind2web(both, PREDICTIONS, tmp_path / "only", layout="multimodal")
    assert stream.sources[0] == str(both / "b.parquet")


# --- MindAct's predictions ----------------------------------------------------------------------------------


def test_mindact_rows_are_read_as_predictions(tmp_path: Path) -> None:
    (stream,) = convert_mind2web(MULTIMODAL, MINDACT, tmp_path / "out", actor="mindact")

    a1, b2 = read_stream([stream.path])
    assert stream.path.name == "mind2web-mindact.jsonl"
    assert (a1.labels, b2.labels) == ((1, 0, 0), (1, 0))
    assert [s.action for s in a1.steps] == [
        "[CLICK] <button> Search flights",
        "[TYPE] <input> Where to? -> New York",
        "[CLICK] <select> Economy Business",
    ]
    # ["b2_b2-1", "", ""]: MindAct chose nothing ("None of the above")
    assert (b2.steps[1].action, b2.steps[1].op, b2.steps[1].element) == ("[NONE] (no element)", "NONE", None)


def test_mindact_rows_need_an_actor_and_well_formed_ids(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="names no agent: pass --actor"):
        convert_mind2web(MULTIMODAL, MINDACT, tmp_path / "out")

    rows = orjson.loads(MINDACT.read_bytes())
    bad = tmp_path / "bad_predictions_top50.json"
    bad.write_bytes(orjson.dumps([*rows[:2], ["a1-a1-2", "301", "CLICK "]]))
    with pytest.raises(DataError, match="must be '<annotation_id>_<action_uid>'") as info:
        convert_mind2web(MULTIMODAL, bad, tmp_path / "out", actor="m")
    assert (info.value.problem.path, info.value.problem.field) == (str(bad), "[2][0]")

    bad.write_bytes(orjson.dumps([*rows, rows[0]]))
    with pytest.raises(DataError, match=r"repeats the prediction at item \[0\]"):
        convert_mind2web(MULTIMODAL, bad, tmp_path / "out", actor="m")


def test_the_command_converts_each_upstream_layout(tmp_path: Path) -> None:
    runner = CliRunner()
    hub = runner.invoke(
        app,
        ["convert", "mind2web", "--tasks", str(MULTIMODAL), "--predictions", str(MINDACT)]
        + ["--actor", "mindact", "--out", str(tmp_path / "hub")],
    )
    assert hub.exit_code == 0, hub.output
    assert "mind2web-mindact.jsonl" in hub.output and "0.400" in hub.output

    forced = runner.invoke(
        app,
        ["convert", "mind2web", "--tasks", str(PARQUET), "--predictions", str(MINDACT), "--actor", "m"]
        + ["--layout", "raw", "--out", str(tmp_path / "forced")],
    )
    assert forced.exit_code == 2
    assert str(PARQUET) in forced.output and "must be a JSON list" in forced.output

    wrong = runner.invoke(
        app,
        ["convert", "mind2web", "--tasks", str(MULTIMODAL), "--predictions", str(MINDACT)]
        + ["--predictions-format", "ceb", "--out", str(tmp_path / "wrong")],
    )
    assert wrong.exit_code == 2
    assert str(MINDACT) in wrong.output and "[0].<line>" in wrong.output


# --- bounded memory: peak memory flat as the input grows ---------------------------------------------------

_MEASURE = """
import sys, tracemalloc
import pyarrow as pa
from ceb.data.mind2web import convert_mind2web
tasks, predictions, out = sys.argv[1:4]
tracemalloc.start()
convert_mind2web(tasks, predictions, out)
print(tracemalloc.get_traced_memory()[1], pa.default_memory_pool().max_memory())
"""


def big_tasks(n: int, page_chars: int = 200_000) -> list[dict[str, Any]]:
    """``n`` tasks of 3 actions whose pages (``raw_html`` and ``cleaned_html``) hold ``page_chars`` each."""
    filler = "".join(f'<div backend_node_id="{i}">item {i}</div>' for i in range(1000, 1000 + page_chars // 40))
    tasks = []
    for k in range(n):
        base = raw_tasks()[0]
        base["annotation_id"] = f"t{k}"
        for t, action in enumerate(base["actions"]):
            action["action_uid"] = f"t{k}-{t}"
            action["raw_html"] = filler + f"<p>{k}</p>"
            action["cleaned_html"] = action["cleaned_html"].replace("</body>", filler + f"<p>{k}</p></body>")
        tasks.append(base)
    return tasks


def measure(tmp_path: Path, n: int, layout: str) -> tuple[int, int, int]:
    """``(Python peak, Arrow peak, page bytes)`` of converting ``n`` big tasks in a fresh process.

    The page bytes are the characters of every ``raw_html`` and ``cleaned_html``: what a whole-file load
    holds at least (the Parquet file itself is smaller, compressed).
    """
    work = tmp_path / f"{layout}-{n}"
    work.mkdir()
    tasks = big_tasks(n)
    pages = sum(len(a["raw_html"]) + len(a["cleaned_html"]) for task in tasks for a in task["actions"])
    if layout == "raw":
        source = work / "train_0.json"
        source.write_bytes(orjson.dumps(tasks))
    else:
        source = write_multimodal(tasks, work / "train-00000-of-00001.parquet", row_group_rows=16)
    predictions = work / "p.jsonl"
    predictions.write_bytes(
        b"\n".join(
            orjson.dumps({"actor": "m", "annotation_id": f"t{k}", "action_uid": f"t{k}-{t}", "element_id": "101"})[:-1]
            + b', "op": "CLICK"}'
            for k in range(n)
            for t in range(3)
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(source), str(predictions), str(work / "out")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    python_peak, arrow_peak = (int(x) for x in done.stdout.splitlines()[-1].split())
    return python_peak, arrow_peak, pages


@pytest.mark.parametrize("layout", ["raw", "multimodal"])
def test_peak_memory_stays_flat_as_the_task_file_grows(tmp_path: Path, layout: str) -> None:
    # 16 tasks fill three 16-row row groups: Arrow's share is at its steady size from there on
    small = measure(tmp_path, 16, layout)
    large = measure(tmp_path, 64, layout)
    print(f"\n{layout}: N=16 {small}, N=64 {large} (python peak, arrow peak, page bytes)")

    assert large[2] > 3.9 * small[2]  # the input did grow four-fold
    # memory did not: within a small factor, and far below the pages (a whole-file load holds all of them)
    assert large[0] + large[1] < 1.25 * (small[0] + small[1])
    assert large[0] + large[1] < large[2] / 3
