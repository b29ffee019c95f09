"""The trajectory limit (``max_trajectories``): a limited run is the start of the full one, and resume keeps it."""

from __future__ import annotations

import orjson
import pytest

from ceb.errors import RunError
from ceb.pipeline import read_rows
from ceb.pipeline.planning import stream_order
from ceb.pipeline.resume import limit_may_follow
from tests.pipeline.test_resume import CONFIG, STREAMS, rows, score

pytestmark = pytest.mark.anyio


def limited(n: int | None):  # type: ignore[no-untyped-def]
    return CONFIG.model_copy(update={"max_trajectories": n})


def lane_trajectories(run_dir, stream: str, order: int, method: str = "ceb") -> list[str]:
    seen: list[str] = []
    for r in read_rows(run_dir / "scores.jsonl"):
        if (r["stream"], r["order"], r["method"]) == (stream, order, method) and r["trajectory"] not in seen:
            seen.append(r["trajectory"])
    return seen


async def test_a_limited_run_scores_the_first_n_trajectories_of_each_order_and_records_the_limit(tmp_path):
    planned: list[int] = []
    summary = await score(tmp_path, config=limited(2), on_start=planned.append)
    for name, trajs in STREAMS.items():
        for order in range(CONFIG.orders):
            first = [t.id for t in stream_order(trajs, order, CONFIG.order_seed)[:2]]
            assert lane_trajectories(tmp_path, name, order) == first
            # static is scored once for both orders (ceb.pipeline.pool): each order still gets its own first N,
            # at their positions in that order.
            placed = {
                (r["position"], r["trajectory"])
                for r in read_rows(tmp_path / "scores.jsonl")
                if (r["stream"], r["order"], r["method"]) == (name, order, "static")
            }
            assert sorted(placed) == list(enumerate(first))
    steps = sum(len(t.steps) for t in STREAMS["a"][:2]) + sum(len(t.steps) for t in STREAMS["b"][:2])
    # 2 methods x 2 orders; the permuted orders pick other trajectories, of the same length in these streams.
    assert planned == [steps * 2 * 2] and summary is not None
    assert summary.steps_scored + summary.steps_reused == steps * 2 * 2
    recorded = orjson.loads((tmp_path / "config.json").read_bytes())
    assert recorded["config"]["max_trajectories"] == 2


async def test_raising_the_limit_on_resume_equals_a_run_with_the_higher_limit(tmp_path):
    await score(tmp_path / "four", config=limited(4))
    await score(tmp_path / "grown", config=limited(2))
    planned: list[int] = []
    summary = await score(tmp_path / "grown", config=limited(4), resume=True, on_start=planned.append)
    assert summary is not None and summary.steps_resumed > 0
    # Rows written by this call: static's copies are all written again from their kept sources.
    assert planned == [summary.steps_scored + summary.steps_reused - summary.steps_resumed]
    # A trajectory that a raised limit adds to order 0 may already have its rows (static's) in order 1: those
    # stay the source and order 0 gets copies, so which row is the copy may differ, not what any row says.
    copy = ("status", "reused_from", "requests", "prompt_tokens", "completion_tokens")
    assert rows(tmp_path / "grown", "scores.jsonl", copy) == rows(tmp_path / "four", "scores.jsonl", copy)
    assert rows(tmp_path / "grown", "hindsight.jsonl") == rows(tmp_path / "four", "hindsight.jsonl")
    recorded = orjson.loads((tmp_path / "grown" / "config.json").read_bytes())
    assert recorded["config"]["max_trajectories"] == 4  # the next resume starts from the raised limit


async def test_lowering_or_dropping_the_limit_the_wrong_way_is_refused_on_resume(tmp_path):
    await score(tmp_path, config=limited(3))
    with pytest.raises(RunError, match=r"max_trajectories: 3 -> 2 \(a resume may raise the limit, not lower it\)"):
        await score(tmp_path, config=limited(2), resume=True)
    unlimited = tmp_path / "all"
    await score(unlimited)
    with pytest.raises(RunError, match=r"max_trajectories: None -> 1"):
        await score(unlimited, config=limited(1), resume=True)


async def test_lifting_the_limit_on_resume_finishes_the_whole_stream(tmp_path):
    await score(tmp_path / "full")
    await score(tmp_path / "part", config=limited(1))
    await score(tmp_path / "part", config=limited(None), resume=True)
    # As above: static's kept rows of order 1's first trajectory stay its source (the pool keeps every finished
    # trajectory), so only which row is the copy may differ.
    copy = ("status", "reused_from", "requests", "prompt_tokens", "completion_tokens")
    assert rows(tmp_path / "part", "scores.jsonl", copy) == rows(tmp_path / "full", "scores.jsonl", copy)
    assert rows(tmp_path / "part", "hindsight.jsonl") == rows(tmp_path / "full", "hindsight.jsonl")


def test_limit_may_follow_is_monotone() -> None:
    assert limit_may_follow(None, None) and limit_may_follow(2, None) and limit_may_follow(2, 2)
    assert limit_may_follow(2, 5) and not limit_may_follow(5, 2) and not limit_may_follow(None, 5)
