"""One writer for every tool's typed result: the benchmark's name first, the record's fields, the machine last."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from ceb.bench.result_files import save_results


@dataclass(frozen=True, slots=True)
class _Row:
    size: int
    p50_ms: float


@dataclass(frozen=True, slots=True)
class _Result:
    rows: tuple[_Row, ...]
    ratio: float | None


def test_a_typed_result_is_written_with_its_nested_rows_and_the_machine(tmp_path: Path) -> None:
    result = _Result((_Row(10, 0.5), _Row(100, float(np.float64(1.25)))), None)

    path = save_results(tmp_path / "out", "demo", result, {"cpu": "test"})

    assert path.parent == tmp_path / "out" and path.name.startswith("demo-") and path.suffix == ".json"
    doc = orjson.loads(path.read_bytes())
    assert list(doc) == ["benchmark", "rows", "ratio", "machine"]
    assert doc["benchmark"] == "demo" and doc["machine"] == {"cpu": "test"} and doc["ratio"] is None
    assert doc["rows"] == [{"size": 10, "p50_ms": 0.5}, {"size": 100, "p50_ms": 1.25}]


def test_a_checkout_scripts_mapping_is_written_as_it_is(tmp_path: Path) -> None:
    path = save_results(tmp_path, "study", {"figures": np.array([1.0, 2.0])}, path=tmp_path / "fixed.json")

    assert path == tmp_path / "fixed.json"
    assert orjson.loads(path.read_bytes()) == {"benchmark": "study", "figures": [1.0, 2.0]}
