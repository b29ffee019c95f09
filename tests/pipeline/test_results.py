"""Result rows: one type per field in every written row, and older layouts read through the one reader."""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import orjson
import pyarrow.json as pj
import pyarrow.parquet as pq
import pytest

from ceb.bank import BankRecord, Hit, Retrieval
from ceb.errors import RunError
from ceb.pipeline.results import ROW_SCHEMA, AltLabel, HindsightRow, StepRow, read_rows, read_step_rows
from ceb.pipeline.rundir import RunDir
from ceb.stages.base import CallStats, CriticInput, CriticResult
from ceb.stages.step import ScoredStep
from ceb.stages.tokens import PromptTokens
from tests.support.builders import step_rows


def _rows() -> list[StepRow]:
    """Rows that vary in every way a field's JSON could: with and without alt labels, precedents and counts."""
    precedent = {"trajectory": "t0", "step": 1, "pseudo_label": 0, "similarity": 0.25}
    return step_rows(
        [
            {"stream": "s", "method": "ceb", "trajectory": "t0", "step": 0, "score": 0.5, "label": 1},
            {
                "stream": "s",
                "method": "ceb",
                "trajectory": "t1",
                "step": 0,
                "score": 1.0,
                "label": None,
                "retrieved": [precedent],
                "alt_labels": [{"name": "judge", "label": 1}, {"name": "zq", "label": None}],
                "prompt_tokens": 120,
                "input_tokens": 90,
                "bank_tokens": 30,
            },
            {"stream": "s", "method": "ceb", "trajectory": "t1", "step": 1, "score": None, "label": 0, "error": "x"},
        ]
    )


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def test_every_field_of_the_written_rows_has_one_json_type(tmp_path: Path) -> None:
    with RunDir(tmp_path).writer() as writer:
        for row in _rows():
            writer.write(row)
    kinds: dict[str, set[str]] = {}
    for raw in read_rows(tmp_path / "scores.jsonl"):
        for name, value in raw.items():
            if value is not None:
                kinds.setdefault(name, set()).add(type(value).__name__)
    assert {name: k for name, k in kinds.items() if len(k) > 1} == {}
    assert kinds["alt_labels"] == {"list"} and kinds["retrieved"] == {"list"}


def test_written_rows_load_into_arrow_and_parquet_as_they_are(tmp_path: Path) -> None:
    # What the user did: pyarrow infers a schema from scores.jsonl and writes Parquet. Layout 2 wrote
    # alt_labels as an object keyed by label names: `{}` on every row of a run without them, a struct with
    # no field, which Parquet refuses.
    with RunDir(tmp_path).writer() as writer:
        for row in _rows():
            writer.write(row)
        writer.write(HindsightRow("s", "ceb", "t0", [[1, 0]], [1.0, 0.0], [1, 0], 0, [], 2, 0.1, 1, None, None))
    for name in ("scores", "hindsight"):
        table = pj.read_json(tmp_path / f"{name}.jsonl")
        pq.write_table(table, tmp_path / f"{name}.parquet")
        assert pq.read_table(tmp_path / f"{name}.parquet").num_rows == table.num_rows
    alt = pj.read_json(tmp_path / "scores.jsonl").column("alt_labels").to_pylist()
    assert alt == [[], [{"name": "judge", "label": 1}, {"name": "zq", "label": None}], []]


def test_layout_1_rows_are_upgraded(tmp_path: Path) -> None:
    old = {
        "stream": "s",
        "method": "ceb",
        "trajectory": "t1",
        "step": 0,
        "score": None,
        "label": 1,
        "error": "not available: no logprobs",
        "clipped": False,
        "raw": "",
        "latency_s": 0.0,
        "queue_s": 0.0,
        "requests": 0,
        "prompt_tokens": None,
        "completion_tokens": None,
        "bank_size": 1,
        "repetition_flag": False,
        "retrieved": [["t0", 2, 1, 0.5]],
        "alt_labels": {"zq": 0, "judge": 1},
    }
    _write(tmp_path / "scores.jsonl", [old])
    (row,) = read_step_rows(tmp_path / "scores.jsonl")
    assert row.status == "not_available" and row.schema == ROW_SCHEMA
    assert row.retrieved == [{"trajectory": "t0", "step": 2, "pseudo_label": 1, "similarity": 0.5}]
    assert row.alt_labels == [{"name": "judge", "label": 1}, {"name": "zq", "label": 0}]


def test_layout_2_alt_labels_are_upgraded_and_the_rest_is_kept(tmp_path: Path) -> None:
    (new,) = _rows()[1:2]
    old = asdict(new) | {"schema": 2, "alt_labels": {"zq": None, "judge": 1}}
    _write(tmp_path / "scores.jsonl", [old])
    assert list(read_step_rows(tmp_path / "scores.jsonl")) == [new]


def test_a_row_of_a_newer_layout_is_refused_with_file_and_line(tmp_path: Path) -> None:
    (row,) = _rows()[:1]
    _write(tmp_path / "scores.jsonl", [asdict(row), asdict(row) | {"schema": ROW_SCHEMA + 1}])
    with pytest.raises(RunError, match=rf"scores.jsonl:2: row layout {ROW_SCHEMA + 1} is newer"):
        list(read_step_rows(tmp_path / "scores.jsonl"))


def _scored_step() -> ScoredStep:
    """A step as score_step returns it, every part of it away from its default."""
    record = BankRecord("task", "s", "ls", "o", 0, 0.25, 0.75, False, "t0", 2)
    stats = CallStats(
        latency_s=1.5, queue_s=0.5, requests=3, prompt_tokens=120, completion_tokens=9, retries=1, retry_reason="x"
    )
    result = CriticResult(None, "{", "endpoint failed: 503", clipped=True, stats=stats, readout="text")
    return ScoredStep(
        state_summary="s",
        retrieval=Retrieval(negatives=(Hit(record, 0.3333333333),)),
        repetition_flag=True,
        input=CriticInput(domain="shell", task="task", step=4, state="s", action="ls"),
        result=result,
        bank_size=7,
        tokens=PromptTokens(input=90, bank=30),
    )


def test_a_step_row_holds_what_the_step_returned_and_where_the_lane_is() -> None:
    alt = [AltLabel(name="judge", label=1)]
    row = StepRow.from_step(
        _scored_step(),
        stream="s",
        method="ceb",
        trajectory="t1",
        label=0,
        order=2,
        position=5,
        critic="q",
        alt_labels=alt,
    )

    assert row == StepRow(
        stream="s",
        method="ceb",
        trajectory="t1",
        step=4,
        score=None,
        label=0,
        error="endpoint failed: 503",
        clipped=True,
        raw="{",
        latency_s=1.5,
        queue_s=0.5,
        requests=3,
        prompt_tokens=120,
        completion_tokens=9,
        bank_size=7,
        repetition_flag=True,
        retrieved=[{"trajectory": "t0", "step": 2, "pseudo_label": 0, "similarity": 0.333333}],
        order=2,
        position=5,
        critic="q",
        alt_labels=alt,
        input_tokens=90,
        bank_tokens=30,
        status="failed",
        retries=1,
        retry_reason="x",
        readout="text",
    )
    # A field added to the row with a default must be filled here too (or be one a scored step never sets).
    never_from_a_step = {"reused_from", "schema"}
    left = [f.name for f in fields(StepRow) if f.name not in never_from_a_step and getattr(row, f.name) == f.default]
    assert left == []
