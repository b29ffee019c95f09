"""One aggregator: metrics.json, the CLI and the report pool the same way (within one order, across streams)."""

from __future__ import annotations

import statistics
from pathlib import Path

import orjson
import pytest

from ceb.config import load_config
from ceb.eval import POOLED, run_metrics
from ceb.eval.report import build_report
from ceb.pipeline import run_scoring
from tests.support.builders import step, trajectory

pytestmark = pytest.mark.anyio


def _stream(prefix: str, n: int) -> list:
    return [
        trajectory(
            f"{prefix}{i}",
            step(f"ls /d{i}", "x", label=1),
            step(f"cat /d{i}/f", "error: no such file" if i % 2 else "ok", label=i % 2 == 0),
            step(f"ls /d{i}", "x", label=0),
        )
        for i in range(n)
    ]


async def test_pooled_entries_pool_within_an_order_and_average_over_orders(tmp_path: Path) -> None:
    config = load_config(overrides={"methods": ["ceb", "static"], "orders": 3})
    await run_scoring({"a": _stream("a", 6), "b": _stream("b", 4)}, config, tmp_path)

    m = run_metrics(tmp_path)
    results = m["results"]
    assert m["orders"] == 3 and "within one stream order" in m["pooling"]
    # The order is a column of its own, never folded into the stream name.
    assert {(r["stream"], r["order"]) for r in results if r["method"] == "ceb"} == {
        *((s, o) for s in ("a", "b") for o in range(3)),
        *((POOLED, o) for o in range(3)),
        (POOLED, None),
    }
    assert not any("@" in r["stream"] for r in results)
    # Pooled within one order: each step once (30 steps), not once per order (90).
    per_order = [r for r in results if r["method"] == "ceb" and r["stream"] == POOLED and r["order"] is not None]
    assert [r["n"] for r in per_order] == [30, 30, 30]
    # Over orders: the mean and sd of the per-order pooled values.
    (mean,) = (r for r in results if r["method"] == "ceb" and r["order"] is None)
    assert mean["orders"] == 3
    assert mean["ece"] == pytest.approx(statistics.fmean(r["ece"] for r in per_order))
    assert mean["ece_sd"] == pytest.approx(statistics.stdev(r["ece"] for r in per_order))
    # The report's pooled row is the order-0 pooled entry, number for number.
    build_report(tmp_path, n_boot=0)
    report = orjson.loads((tmp_path / "report" / "report.json").read_bytes())
    (row,) = (r for r in report["main"] if r["method"] == "ceb" and r["stream"] == POOLED)
    assert row["n"] == per_order[0]["n"]
    assert row["metrics"]["ece"] == pytest.approx(per_order[0]["ece"])
    assert row["metrics"]["brier"] == pytest.approx(per_order[0]["brier"])
