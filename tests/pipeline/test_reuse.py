"""Bank-free methods scored once for every stream order (the step pool): cost, rows, resume, metrics, report."""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from ceb.backends.base import ChatRequest
from ceb.backends.scripted import ScriptedChat
from ceb.errors import RunError
from ceb.eval.report import build_report
from ceb.eval.runs import run_metrics
from ceb.pipeline import read_rows
from ceb.pipeline.planning import stream_order
from ceb.pipeline.pool import share_orders
from ceb.pipeline.results import read_step_rows
from ceb.stages.assembly import llm_stages
from tests.pipeline.test_resume import CONFIG, STREAMS, reply, score
from tests.support.lane_order import comparable, lane_order_rows

pytestmark = pytest.mark.anyio

COST = ("requests", "latency_s", "queue_s", "prompt_tokens", "completion_tokens")
COPY = ("status", "reused_from")
STEPS = sum(len(t.steps) for trajs in STREAMS.values() for t in trajs)


def config(**update: Any):  # type: ignore[no-untyped-def]
    return CONFIG.model_copy(update=update)


class Asked:
    """A responder that counts the critic requests it answers."""

    def __init__(self) -> None:
        self.critic = 0

    def __call__(self, request: ChatRequest) -> str:
        self.critic += request.stage == "critic"
        return reply(request)


def by_place(run_dir: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    out = {}
    for r in read_rows(run_dir / "scores.jsonl"):
        key = (r["stream"], r["order"], r["method"], r["critic"], r["trajectory"], r["step"])
        assert key not in out, f"two rows for {key}"
        out[key] = r
    return out


def without(row: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in names}


async def asked_every_order(on: Path, out: Path) -> Path:
    """A copy of run ``on`` whose bank-free rows are those of the strict lane order, every order asked."""
    asked = await lane_order_rows(STREAMS, CONFIG, llm_stages(CONFIG, ScriptedChat(reply)))
    shutil.copytree(on, out)
    place = {(r.stream, r.order, r.method, r.critic, r.trajectory, r.step): asdict(r) for r in asked}
    # The same rows in the same file order (the report lists lanes as they first appear), the asked ones replacing
    # the pool's.
    lines = [
        orjson.dumps(place.get((r["stream"], r["order"], r["method"], r["critic"], r["trajectory"], r["step"]), r))
        for r in read_rows(on / "scores.jsonl")
    ]
    (out / "scores.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    return out


async def test_three_orders_of_static_ask_what_one_order_asks(tmp_path):
    asked = {}
    for name, cfg in {
        "one": config(methods=("static",), orders=1),
        "three": config(methods=("static",), orders=3),
    }.items():
        asked[name] = Asked()
        summary = await score(tmp_path / name, config=cfg, responder=asked[name])
        assert summary is not None
        assert (
            summary.requests
            == asked[name].critic
            == sum(r.requests for r in read_step_rows(tmp_path / name / "scores.jsonl"))
        )
    assert asked["one"].critic == STEPS
    assert asked["three"].critic == STEPS
    # The strict lane order asks every order.
    lanes = Asked()
    await lane_order_rows(STREAMS, config(methods=("static",), orders=3), llm_stages(CONFIG, ScriptedChat(lanes)))
    assert lanes.critic == 3 * STEPS


async def test_copied_rows_equal_asked_rows_apart_from_status_and_cost(tmp_path):
    planned: list[int] = []
    on = await score(tmp_path / "on", on_start=planned.append)
    assert on is not None
    rows_on = by_place(tmp_path / "on")
    off = await asked_every_order(tmp_path / "on", tmp_path / "off")
    rows_off = by_place(off)
    assert rows_on.keys() == rows_off.keys()
    assert planned == [len(rows_on)]
    copied = 0
    for key, row in rows_on.items():
        assert comparable(row) == comparable(rows_off[key])
        stream, order, method = key[:3]
        if method == "static" and order > 0:
            copied += 1
            assert row["status"] == "reused" and row["reused_from"] == 0
            assert row["requests"] == 0 and row["latency_s"] == 0
        else:
            assert row["status"] == "scored" and row["reused_from"] is None
    assert copied == STEPS == on.steps_reused  # static in order 1 of both streams
    assert on.steps_scored == 3 * STEPS
    assert sum(r["requests"] for r in rows_on.values()) == sum(r["requests"] for r in rows_off.values()) - STEPS
    # Each order's numbers are those of the run that asked every order.
    assert run_metrics(tmp_path / "on") == run_metrics(off)
    doc = orjson.loads((tmp_path / "on" / "summary.json").read_bytes())
    assert doc["steps_reused"] == STEPS and doc["requests"] == on.requests
    banks = Counter((b["stream"], b["method"]) for b in doc["banks"])
    assert banks == {(s, m): 2 for s in STREAMS for m in ("ceb", "static")}


async def test_a_run_resumed_anywhere_equals_an_uninterrupted_one_and_asks_only_what_is_missing(tmp_path):
    await score(tmp_path / "full")
    full = by_place(tmp_path / "full")
    for stop in (1, 2, 9, 30, 70):
        part = tmp_path / f"part{stop}"
        await score(part, stop_after=stop)
        assert 0 < len(list(read_rows(part / "scores.jsonl"))) < len(full)
        asked, planned = Asked(), []
        summary = await score(part, resume=True, responder=asked, on_start=planned.append)
        assert summary is not None
        assert {k: without(r, COST) for k, r in by_place(part).items()} == {
            k: without(r, COST) for k, r in full.items()
        }
        # Copies are written again from their kept sources: asked are only the steps without a kept source row.
        assert planned == [len(full) - summary.steps_resumed]
        assert asked.critic == 3 * STEPS - summary.steps_resumed + summary.discarded_requests  # CEB's speculation


async def test_sources_without_their_copies_get_them_on_resume_without_a_request(tmp_path):
    await score(tmp_path)
    full = by_place(tmp_path)
    kept = [r for r in read_rows(tmp_path / "scores.jsonl") if r["reused_from"] is None]
    (tmp_path / "scores.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in kept))
    asked = Asked()
    summary = await score(tmp_path, resume=True, responder=asked)
    assert summary is not None and asked.critic == 0 and summary.steps_reused == STEPS
    assert by_place(tmp_path) == full


async def test_copies_of_a_failed_source_step_follow_it_when_it_is_asked_again(tmp_path):
    await score(tmp_path)
    full = by_place(tmp_path)
    rows = list(read_rows(tmp_path / "scores.jsonl"))
    # The source of static's first step of trajectory t1 of stream a failed, and so did its copy.
    for r in rows:
        if (r["stream"], r["method"], r["trajectory"], r["step"]) == ("a", "static", "t1", 0):
            r |= {"score": None, "status": "failed", "error": "no readable score"}
    (tmp_path / "scores.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    asked = Asked()
    await score(tmp_path, resume=True, responder=asked)
    # From the failed step on, its trajectory is asked again (3 steps); the pool keeps the other trajectories, which
    # the strict lane order asked again too (trajectory t1 is at position 1: 5 trajectories of 3 steps).
    assert asked.critic == 3
    assert {k: without(r, COST) for k, r in by_place(tmp_path).items()} == {
        k: without(r, COST) for k, r in full.items()
    }


async def test_a_run_that_asked_every_order_is_not_resumed_with_copies(tmp_path):
    await score(tmp_path, stop_after=10)
    doc = orjson.loads((tmp_path / "config.json").read_bytes())
    doc["fingerprints"]["config"]["reuse_bank_free"] = False  # recorded by a run with the switch off
    (tmp_path / "config.json").write_bytes(orjson.dumps(doc))
    with pytest.raises(RunError, match="reuse_bank_free: False -> True"):
        await score(tmp_path, resume=True)


async def test_a_run_recorded_before_the_setting_resumes_where_it_changes_nothing(tmp_path):
    one = config(orders=1)
    await score(tmp_path, config=one, stop_after=10)
    doc = orjson.loads((tmp_path / "config.json").read_bytes())
    del doc["fingerprints"]["config"]["reuse_bank_free"]
    (tmp_path / "config.json").write_bytes(orjson.dumps(doc))
    summary = await score(tmp_path, config=one, resume=True)
    assert summary is not None and summary.steps_resumed > 0
    # With several orders the older run asked every order: resuming it with copies is refused, by name.
    await score(tmp_path / "old", stop_after=10)
    doc = orjson.loads((tmp_path / "old" / "config.json").read_bytes())
    del doc["fingerprints"]["config"]["reuse_bank_free"]
    (tmp_path / "old" / "config.json").write_bytes(orjson.dumps(doc))
    with pytest.raises(RunError, match="reuse_bank_free: False -> True"):
        await score(tmp_path / "old", resume=True)


async def test_the_report_counts_copies_and_reads_them_as_rows_of_their_order(tmp_path):
    await score(tmp_path / "on")
    off = await asked_every_order(tmp_path / "on", tmp_path / "off")
    text = build_report(tmp_path / "on", n_boot=0).read_text()
    assert f"Rows copied from another stream order: {STEPS}" in text
    assert "Rows copied" not in build_report(off, n_boot=0).read_text()
    on = orjson.loads((tmp_path / "on" / "report" / "report.json").read_bytes())
    off_doc = orjson.loads((off / "report" / "report.json").read_bytes())
    assert on["run"]["reused_rows"] == STEPS and off_doc["run"]["reused_rows"] == 0
    # Lanes are listed as they first appear in scores.jsonl, which differs; every number is the same.
    assert canonical({k: v for k, v in on.items() if k != "run"}) == canonical(
        {k: v for k, v in off_doc.items() if k != "run"}
    )


def canonical(doc: Any) -> Any:
    """``doc`` with every list sorted and floats to 12 digits, so that two listings of the same entries compare equal.

    Lanes are listed, and pooled, in the order they first appear in ``scores.jsonl``, which depends on how the
    concurrent lanes interleave: the order of a listing and the last bits of a pooled sum may differ.
    """
    if isinstance(doc, dict):
        return {k: canonical(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return sorted((canonical(v) for v in doc), key=lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS))
    if isinstance(doc, float):
        return round(doc, 12)
    return doc


def test_a_limited_stream_shares_the_union_of_each_orders_first_n():
    trajs = STREAMS["a"]
    orders = [stream_order(trajs, r, 0)[:2] for r in range(3)]
    shared = share_orders(orders)
    assert [t.id for t in shared.trajectories] == list(dict.fromkeys(t.id for o in orders for t in o))
    for r, order in enumerate(orders):
        for position, t in enumerate(order):
            assert (r, position) in shared.placements[t.id]
    assert sum(len(p) for p in shared.placements.values()) == 6
