"""``ceb export``: a run's rows as Parquet (fixed schema) and CSV, equal to what the one reader reads."""

from __future__ import annotations

import csv
import subprocess
import sys
from dataclasses import asdict, fields
from functools import partial
from pathlib import Path
from typing import Any, get_args

import anyio
import orjson
import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from ceb.bank import BankRecord
from ceb.cli import app
from ceb.config import load_config
from ceb.data import write_stream
from ceb.errors import ConfigError, RunError
from ceb.eval.export import FORMATS, TABLES, TEXT_CHARS, TEXT_COLUMNS, arrow_schema, export_table
from ceb.pipeline import HindsightRow, StepRow, read_hindsight_rows, read_rows, read_step_rows, run_scoring
from tests.support.builders import step, trajectory

runner = CliRunner()


def _stream(n: int) -> list:
    return [
        trajectory(
            f"t{i}",
            step(f"ls /d{i}", "x", label=1),
            step(f"cat /d{i}/f", "no such file" if i % 2 else "ok", label=i % 2),
            meta={"alt_labels": {"judge": [1, None if i == 2 else 0]}} if i % 3 else {},
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three streams x two orders, CEB (precedents, hindsight records) and Static; some steps carry alt labels,
    and the web stream's empty observations make the offline labeler abstain (hindsight ``abstained``)."""
    out = tmp_path_factory.mktemp("run")
    config = load_config(overrides={"methods": ["ceb", "static"], "orders": 2})
    web = [trajectory(f"w{i}", step("click [a] Next", "", label=1), domain="web") for i in range(2)]
    anyio.run(partial(run_scoring, {"a": _stream(5), "b": _stream(3), "w": web}, config, out))
    return out


def _reader_rows(run: Path, table: str) -> list[dict[str, Any]]:
    read = read_step_rows if table == "scores" else read_hindsight_rows
    return [asdict(row) for row in read(run / f"{table}.jsonl")]


def test_abstentions_export_as_a_list_of_structs(run: Path, tmp_path: Path) -> None:
    rows = pq.read_table(export_table(run, tmp_path / "h.parquet", table="hindsight").path).to_pylist()
    abstained = [a for r in rows if r["stream"] == "w" for a in r["abstained"]]
    assert abstained and all(a["step"] == 0 and a["reason"] for a in abstained)


def test_the_schema_has_a_column_per_row_field_in_order() -> None:
    assert arrow_schema("scores").names == [f.name for f in fields(StepRow)]
    assert arrow_schema("hindsight").names == [f.name for f in fields(HindsightRow)]
    record = arrow_schema("hindsight").field("records").type.value_type
    assert [f.name for f in record] == [f.name for f in fields(BankRecord)]


@pytest.mark.parametrize("table", TABLES)
def test_written_rows_load_into_the_fixed_arrow_schema(run: Path, table: str) -> None:
    options = pj.ParseOptions(explicit_schema=arrow_schema(table), unexpected_field_behavior="error")
    loaded = pj.read_json(run / f"{table}.jsonl", parse_options=options)
    # The JSON reader makes every field nullable; the cast checks no null sits where the schema forbids one.
    assert loaded.cast(arrow_schema(table)).to_pylist() == _reader_rows(run, table)


@pytest.mark.parametrize("table", TABLES)
def test_parquet_holds_the_readers_rows_under_the_fixed_schema(run: Path, tmp_path: Path, table: str) -> None:
    result = export_table(run, tmp_path / "out" / f"{table}.parquet", table=table, fmt="parquet", text_chars=None)
    written = pq.read_table(result.path)
    assert written.schema.equals(arrow_schema(table), check_metadata=True)
    rows = _reader_rows(run, table)
    assert result.rows == len(rows) > 0
    assert written.to_pylist() == rows


def test_the_order_is_a_column_of_its_own(run: Path, tmp_path: Path) -> None:
    written = pq.read_table(export_table(run, tmp_path / "s.parquet").path)
    assert set(written.column("order").to_pylist()) == {0, 1}
    assert set(written.column("stream").to_pylist()) == {"a", "b", "w"}
    # Nested values stay typed: precedents and alt labels are lists of structs.
    retrieved = [p for ps in written.column("retrieved").to_pylist() for p in ps]
    assert retrieved and set(retrieved[0]) == {"trajectory", "step", "pseudo_label", "similarity"}
    alt = written.column("alt_labels").to_pylist()
    assert [{"name": "judge", "label": 1}] in alt and [] in alt and [{"name": "judge", "label": None}] in alt


def _csv_rows(path: Path, table: str) -> list[dict[str, Any]]:
    """CSV cells back to values: the documented encoding (empty: null, JSON text for non-string columns)."""
    schema = arrow_schema(table)
    out = []
    with path.open(encoding="utf-8", newline="") as f:
        for raw in csv.DictReader(f):
            row: dict[str, Any] = {}
            for name, cell in raw.items():
                field = schema.field(name)
                if pa.types.is_string(field.type):
                    row[name] = None if cell == "" and field.nullable else cell
                else:
                    row[name] = None if cell == "" else orjson.loads(cell)
            out.append(row)
    return out


@pytest.mark.parametrize("table", TABLES)
def test_csv_holds_the_readers_rows(run: Path, tmp_path: Path, table: str) -> None:
    result = export_table(run, tmp_path / f"{table}.csv", table=table, fmt="csv", text_chars=None)
    with result.path.open(encoding="utf-8", newline="") as f:
        assert next(csv.reader(f)) == arrow_schema(table).names
    assert _csv_rows(result.path, table) == _reader_rows(run, table)


def test_csv_cells_are_flat_text(run: Path, tmp_path: Path) -> None:
    path = export_table(run, tmp_path / "s.csv", fmt="csv").path
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    with_precedents = next(r for r in rows if r["retrieved"] != "[]")
    assert orjson.loads(with_precedents["retrieved"])[0]["trajectory"].startswith("t")
    assert {r["clipped"] for r in rows} == {"false"} and {r["order"] for r in rows} == {"0", "1"}
    assert {r["error"] for r in rows} == {""}  # null


def test_rows_of_an_older_layout_export_as_the_current_one(run: Path, tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    layout_2 = [
        r | {"schema": 2, "alt_labels": {a["name"]: a["label"] for a in r["alt_labels"]}}
        for r in read_rows(run / "scores.jsonl")
    ]
    (old / "scores.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in layout_2))
    a = pq.read_table(export_table(old, tmp_path / "old.parquet").path)
    b = pq.read_table(export_table(run, tmp_path / "new.parquet").path)
    assert a.equals(b)


def _hide_pyarrow(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("pyarrow", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, name, None)  # `import pyarrow` now raises ImportError


def test_parquet_without_pyarrow_is_one_line_naming_the_extra(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hide_pyarrow(monkeypatch)
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[parquet\]'"):
        export_table(run, tmp_path / "s.parquet")
    result = runner.invoke(app, ["export", str(run), "--out", str(tmp_path / "s.parquet")])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: Parquet export needs pyarrow, which is not installed: pip install -e '.[parquet]' in ceb's checkout"
    ]
    assert list(tmp_path.iterdir()) == []  # nothing half-written
    # CSV needs nothing beyond the standard library.
    assert runner.invoke(app, ["export", str(run), "--format", "csv", "--out", str(tmp_path / "s.csv")]).exit_code == 0


def test_the_command_defaults_to_parquet_next_to_the_rows_and_reads_the_suffix(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    copy.mkdir()
    (copy / "hindsight.jsonl").write_bytes((run / "hindsight.jsonl").read_bytes())
    (copy / "scores.jsonl").write_bytes((run / "scores.jsonl").read_bytes())
    result = runner.invoke(app, ["export", str(copy)])
    assert result.exit_code == 0, result.output
    assert pq.read_table(copy / "scores.parquet").num_rows == len(_reader_rows(run, "scores"))
    assert f"rows written to {copy / 'scores.parquet'}" in result.stdout
    result = runner.invoke(app, ["export", str(copy), "--table", "hindsight", "--out", str(tmp_path / "h.csv")])
    assert result.exit_code == 0, result.output
    assert _csv_rows(tmp_path / "h.csv", "hindsight") == _reader_rows(run, "hindsight")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{tmp}/nope"], "error: {tmp}/nope does not exist; give a run directory written by `ceb score`"),
        (["{tmp}"], "error: {tmp} has no scores.jsonl; is it a run directory written by `ceb score`?"),
        (["{run}", "--out", "{tmp}"], "error: {tmp} is a directory; name the parquet file to write"),
        (["{run}", "--table", "hindsight", "--format", "csv", "--out", "{tmp}"], "error: {tmp} is a directory; "),
        (["{run}", "--out", "{run}/scores.jsonl/x.csv"], "error: cannot write {run}/scores.jsonl/x.csv: {run}/"),
    ],
)
def test_command_errors_are_one_line_naming_the_path(run: Path, tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["export", *(a.format(tmp=tmp_path, run=run) for a in args)])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(message.format(tmp=tmp_path, run=run))
    assert "Traceback" not in result.output


def test_a_format_the_out_suffix_contradicts_is_refused(run: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["export", str(run), "--format", "parquet", "--out", str(tmp_path / "s.csv")])
    assert result.exit_code == 2 and "has the suffix of csv, not parquet" in result.output
    assert not (tmp_path / "s.csv").exists()


def test_a_bad_row_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "scores.jsonl").write_bytes(b"{not json\n{}\n")
    with pytest.raises(RunError, match=r"scores.jsonl:1: not a JSON row"):
        export_table(tmp_path, tmp_path / "s.csv", fmt="csv")
    assert not (tmp_path / "s.csv").exists()


def test_the_command_line_starts_without_the_export_module_or_pyarrow() -> None:
    probe = "import sys, ceb.cli; print(sorted(m for m in ('pyarrow', 'ceb.eval.export') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_command_offers_exactly_the_formats_and_tables_the_module_writes() -> None:
    from ceb.cli import export as export_cmd

    assert get_args(export_cmd.Format) == FORMATS
    assert get_args(export_cmd.Table) == TABLES


@pytest.fixture(scope="module")
def run_of_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run scored by the command from stream files, which its config.json names (the texts' source)."""
    tmp = tmp_path_factory.mktemp("files")
    long_obs = "total 12\n" + "drwxr-xr-x 2 root root 4096 a-file-name\n" * 30
    trajs = [trajectory(f"t{i}", step(f"ls -la /d{i}", long_obs, label=1), task=f"list /d{i}") for i in range(3)]
    stream = write_stream(tmp / "s.jsonl", trajs)
    assert runner.invoke(app, ["score", str(stream), "--out", str(tmp / "run")]).exit_code == 0
    return tmp / "run"


@pytest.mark.parametrize("fmt", FORMATS)
def test_scores_carry_each_steps_task_state_action_and_observation_cut_to_the_stated_length(
    run_of_files: Path, tmp_path: Path, fmt: str
) -> None:
    """Reading which action got which score needed a join back to the stream files."""
    done = runner.invoke(app, ["export", str(run_of_files), "-o", str(tmp_path / f"s.{fmt}"), "--text-chars", "40"])
    assert done.exit_code == 0, done.output
    if fmt == "parquet":
        rows = pq.read_table(tmp_path / "s.parquet").to_pylist()
        assert pq.read_schema(tmp_path / "s.parquet").names[-4:] == list(TEXT_COLUMNS)
    else:
        with (tmp_path / "s.csv").open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    first = next(r for r in rows if r["trajectory"] == "t1" and r["method"] == "ceb")
    assert (first["task"], first["action"], first["state"]) == ("list /d1", "ls -la /d1", "")
    assert first["observation"] == ("total 12\n" + "drwxr-xr-x 2 root root 4096 a-file-name\n")[:40]


def test_no_text_leaves_the_text_columns_out_and_unreadable_streams_are_named(
    run: Path, run_of_files: Path, tmp_path: Path
) -> None:
    done = runner.invoke(app, ["export", str(run_of_files), "-o", str(tmp_path / "s.csv"), "--no-text"])
    assert done.exit_code == 0, done.output
    with (tmp_path / "s.csv").open(encoding="utf-8", newline="") as f:
        assert next(csv.reader(f)) == arrow_schema("scores").names  # no text columns
    # The library-scored run recorded no stream files: its steps get empty texts and the result says why.
    result = export_table(run, tmp_path / "r.csv", fmt="csv")
    assert result.texts_missing is not None
    with (tmp_path / "r.csv").open(encoding="utf-8", newline="") as f:
        assert {r["action"] for r in csv.DictReader(f)} == {""}


def test_the_commands_text_length_is_the_modules() -> None:
    import inspect

    from ceb.cli.export import export

    assert inspect.signature(export).parameters["text_chars"].default == TEXT_CHARS
