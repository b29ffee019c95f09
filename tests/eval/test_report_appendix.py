"""``build_report``'s appendix and ablation sections on tiny run directories."""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from ceb.eval.report import build_report
from ceb.pipeline.results import StepRow

APPENDIX = ("abl", "gt-oracle", "vsweep", "topk", "token-cost", "retrieval")


def _row(method: str, traj: str, score: float | None, label: int, tokens: tuple[int, int] | None) -> dict[str, Any]:
    row = StepRow(
        stream="web",
        method=method,
        trajectory=traj,
        step=0,
        score=score,
        label=label,
        error=None if score is not None else "timeout",
        clipped=False,
        raw="",
        latency_s=0.0,
        queue_s=0.0,
        requests=1,
        prompt_tokens=None,
        completion_tokens=None,
        bank_size=0,
        repetition_flag=False,
        retrieved=[],
        input_tokens=None if tokens is None else tokens[0],
        bank_tokens=None if tokens is None else tokens[1],
        status="scored" if score is not None else "failed",
    )
    return asdict(row)


def _write_run(run: Path, methods: dict[str, tuple[float, float, tuple[int, int] | None]], config: Any) -> None:
    """Per method: trajectory A (label 1) scored ``a``, B (label 0) scored ``b``, both with ``tokens``."""
    rows = [
        _row(method, traj, score, label, tokens)
        for method, (a, b, tokens) in methods.items()
        for traj, score, label in (("A", a, 1), ("B", b, 0))
    ]
    run.mkdir(parents=True)
    (run / "scores.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    if config is not None:  # a recorded run, finished: its summary counts its rows (RunDir.require_readable)
        (run / "config.json").write_bytes(orjson.dumps(config))
        (run / "summary.json").write_bytes(orjson.dumps({"status": "finished", "steps_scored": len(rows)}))


def _links(md: str) -> list[str]:
    return re.findall(r"\]\(([^)]+)\)", md)


def test_report_writes_every_appendix_table(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(
        run,
        {
            "static": (0.85, 0.85, (1400, 0)),  # ECE 0.35
            "ceb": (0.85, 0.25, (2100, 700)),  # ECE 0.20, V=5, k=2 (config)
            "ceb-positives-only": (0.7, 0.3, None),  # ECE 0.30
            "ceb-gt-oracle": (0.95, 0.15, None),  # ECE 0.10
            "ceb-V1": (0.85, 0.35, None),  # ECE 0.25
            "ceb-k1": (0.75, 0.25, (1750, 350)),  # ECE 0.25
            "ceb-random-retrieval": (0.65, 0.35, None),  # ECE 0.35
            "ppl": (0.5, 0.5, None),
        },
        {"config": {"ceb": {"votes": 5, "k": 2, "retriever": "tfidf"}}},
    )
    path = build_report(run, n_boot=0)
    out = run / "report"
    md = path.read_text(encoding="utf-8")
    links = _links(md)
    for stem in APPENDIX:
        assert f"{stem}.md" in links and f"{stem}.tex" in links
        assert (out / f"{stem}.md").is_file()
        assert rf"\label{{tab:{stem}}}" in (out / f"{stem}.tex").read_text()
    assert "V=5, k=2, retriever `tfidf` (config.json)" in md
    for title in ("Component ablation", "ground-truth oracle", "vote count sweep", "depth sweep", "Token cost"):
        assert title in md
    assert "tiktoken `cl100k_base`" in md and "chat-template tokens excluded" in md
    assert "**ORACLE:**" in md

    data = orjson.loads((out / "report.json").read_bytes())
    abl = {r["method"]: r for r in data["ablation"]}
    assert list(abl) == ["ceb", "ceb-positives-only", "ceb-random-retrieval", "static"]
    assert abl["ceb-positives-only"]["delta_ece"] == pytest.approx(0.10)
    assert abl["static"]["delta_ece"] == pytest.approx(0.15)
    (gap,) = data["gt_oracle"]
    assert gap["closed"] == pytest.approx(0.60)  # (0.35 - 0.20) / (0.35 - 0.10)
    assert data["v_sweep"]["k"] == 2 and data["v_sweep"]["values"] == [1, 5]
    assert data["k_sweep"]["votes"] == 5 and [c["method"] for c in data["k_sweep"]["cells"]] == ["ceb-k1", "ceb"]
    cost = {t["method"]: t for t in data["token_cost"]}
    assert list(cost) == ["static", "ceb-k1", "ceb"]
    assert cost["ceb"]["delta_vs_k1"] == pytest.approx(0.20) and cost["ceb"]["reference"] == "ceb-k1"
    assert [r["retriever"] for r in data["retrieval"]] == ["random", "tfidf"]
    assert "| CEB | 5 | 2 | 700 | 2100 | +20% |" in (out / "token-cost.md").read_text()
    assert "| Random | 0.350 |" in (out / "retrieval.md").read_text()


def test_report_notes_missing_methods_and_writes_no_appendix_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(run, {"ceb": (0.85, 0.25, None), "ppl": (0.5, 0.5, None)}, None)
    md = build_report(run, n_boot=0).read_text(encoding="utf-8")
    out = run / "report"
    for stem in APPENDIX:
        assert not (out / f"{stem}.md").exists() and not (out / f"{stem}.tex").exists()
    assert md.count("> Skipped:") >= 6
    assert "Skipped: needs `ceb` and at least one of" in md
    assert "Skipped: needs `static`, `ceb` and `ceb-gt-oracle`" in md
    assert "Skipped: no LLM-critic row carries `input_tokens`" in md
    assert "CEBConfig defaults: no readable config.json" in md
    data = orjson.loads((out / "report.json").read_bytes())
    assert data["ablation"] == data["gt_oracle"] == data["token_cost"] == data["retrieval"] == []
    assert data["v_sweep"] is None and data["k_sweep"] is None
    assert data["run"]["ceb"] == {"votes": 5, "k": 2, "retriever": "tfidf", "source": "defaults"}


def test_report_reads_v_and_k_from_config_and_lists_unknown_methods(tmp_path: Path) -> None:
    run = tmp_path / "run"
    # ceb.votes = 3: ceb is V=3, so ceb + ceb-V1 + ceb-V5 sweep V at k=1 in three groups.
    _write_run(
        run,
        {
            "ceb": (0.85, 0.25, None),
            "ceb-V1": (0.85, 0.35, None),
            "ceb-V5": (0.75, 0.25, None),
            "ceb-from-the-future": (0.5, 0.5, None),
        },
        {"config": {"ceb": {"votes": 3, "k": 1, "retriever": "tfidf"}}},
    )
    md = build_report(run, n_boot=0).read_text(encoding="utf-8")
    data = orjson.loads((run / "report" / "report.json").read_bytes())
    assert data["v_sweep"]["k"] == 1 and data["v_sweep"]["values"] == [1, 3, 5]
    assert data["run"]["unknown_methods"] == ["ceb-from-the-future"]
    assert "does not know" in md and "`ceb-from-the-future`" in md
    assert "Cells filled by V=1: `ceb-V1`, V=3: `ceb`, V=5: `ceb-V5`." in (run / "report" / "vsweep.md").read_text()


def test_figures_leave_out_sweep_cells_but_tables_keep_them(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(
        run,
        {
            "static": (0.85, 0.85, None),
            "ceb": (0.85, 0.25, None),
            "ceb-V1-k1": (0.8, 0.3, None),
            "ceb-V3-k1": (0.8, 0.3, None),
        },
        None,
    )
    md = build_report(run, n_boot=0).read_text()
    assert md.count("Figures leave out the 2 V / k sweep cells") == 3  # averaging, depth, reliability
    assert "ceb-V1-k1" in (run / "report" / "main.md").read_text()
    data = orjson.loads((run / "report" / "report.json").read_bytes())
    assert {r["method"] for r in data["reliability"]} >= {"ceb-V1-k1", "ceb-V3-k1"}  # numbers keep them too


def test_method_colors_are_distinct_for_a_large_grid() -> None:
    from ceb.eval.plots import method_colors

    for n in (3, 12, 31):
        colors = method_colors([f"ceb-V{i}-k1" for i in range(n)])
        assert len(colors) == n and len(set(colors.values())) == n


def test_an_oracle_below_static_and_an_empty_bank_are_said_not_hidden(tmp_path: Path) -> None:
    """Issue 41 item 10: no share of a gap that does not exist, no "-0%", and a bank that stayed empty is named."""
    run = tmp_path / "run"
    methods = {"static": (0.85, 0.25, None), "ceb": (0.85, 0.26, None), "ceb-gt-oracle": (0.95, 0.45, None)}
    _write_run(run, methods, {"config": {"ceb": {"votes": 5, "k": 2, "retriever": "tfidf"}}})
    md = build_report(run, n_boot=0).read_text(encoding="utf-8")
    table = (run / "report" / "gt-oracle.md").read_text()
    assert "oracle below static" in table and "-0%" not in table and "%" not in table.split("\n")[4]
    (gap,) = orjson.loads((run / "report" / "report.json").read_bytes())["gt_oracle"]
    assert gap["closed"] is None and gap["static_minus_oracle"] < 0
    # Every row has bank_size 0: each bank method's bank stayed empty, and the report says so, naming it.
    assert "warning: method ceb: its bank stayed empty on web" in md
    assert "warning: method ceb-gt-oracle: its bank stayed empty on web" in md and "method static:" not in md
