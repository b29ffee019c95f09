"""``[cache]`` in a ``ceb score`` run: a second identical run sends no request and writes the same rows."""

import anyio
import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from tests.pipeline.test_hindsight_endpoint import N_STEPS, critic_only, labeller_only, toml, write_stream
from tests.support.openai_server import Reply

pytestmark = pytest.mark.anyio

TIMING = ("latency_s", "queue_s")
"""The fields a row answered from the cache does not repeat: this run's time in the server and in the slot queue
(a hit spends about 0 of both). Every other field, ``requests`` and the token counts included, is the answer's
record and comes back byte for byte."""


def both(body: dict, i: int) -> Reply:
    return labeller_only(body, i) if N_STEPS.search(body["messages"][-1]["content"]) else critic_only(body, i)


def rows(path) -> list[bytes]:
    """The rows of a result file without their timing fields, each as JSON bytes, sorted (lanes interleave)."""
    out = []
    for line in path.read_bytes().splitlines():
        row = orjson.loads(line)
        for name in TIMING:
            row.pop(name, None)
        out.append(orjson.dumps(row))
    return sorted(out)


async def test_a_second_identical_run_is_answered_from_the_cache(openai_server, tmp_path):
    openai_server.responder = both
    settings = {
        "backend": {"name": "openai", "base_url": openai_server.base_url, "model": openai_server.model},
        "hindsight": {"seed": 7},  # seeded votes are repeatable, so they are cached like the critic's temperature 0
        "ceb": {"votes": 3},
        "cache": {"mode": "read-write", "path": str(tmp_path / "replies.sqlite")},
        "speculation": 0,  # what is asked ahead and discarded depends on timing: these count every request
    }
    config = tmp_path / "run.toml"
    config.write_text(toml(settings))
    stream = write_stream(tmp_path / "bash.jsonl")

    async def score(run: str):
        args = ["score", str(stream), "--out", str(tmp_path / run), "--config", str(config)]
        result = await anyio.to_thread.run_sync(CliRunner().invoke, app, args)
        assert result.exit_code == 0, result.output
        return result.output, orjson.loads((tmp_path / run / "summary.json").read_bytes())

    out1, first = await score("first")
    asked = len(openai_server.requests)
    assert asked == 12 + 9 and first["cache"]["misses"] == asked and first["cache"]["stored"] == asked
    out2, second = await score("second")
    assert len(openai_server.requests) == asked  # the run's own requests: none (the preflight check still goes)
    assert second["cache"] == {
        "mode": "read-write",
        "path": settings["cache"]["path"],
        "hits": asked,
        "misses": 0,
        "uncacheable": 0,
        "stored": 0,
        "sent": 0,
        "failed_reads": 0,
        "failed_writes": 0,
    }
    assert f"{asked} hits, 0 misses" in out2 and "0 requests sent" in out2
    for name in ("scores.jsonl", "hindsight.jsonl"):
        assert rows(tmp_path / "second" / name) == rows(tmp_path / "first" / name)
    assert second["requests"] == first["requests"]  # the answers' recorded cost; cache.sent is what was sent


async def test_sampled_votes_are_asked_again_unless_the_cache_takes_them(openai_server, tmp_path):
    openai_server.responder = both
    base = {
        "backend": {"name": "openai", "base_url": openai_server.base_url, "model": openai_server.model},
        "ceb": {"votes": 3},
        "methods": ["ceb"],
        "cache": {"mode": "read-write", "path": str(tmp_path / "replies.sqlite")},
        "speculation": 0,  # what is asked ahead and discarded depends on timing: these count every request
    }
    stream = write_stream(tmp_path / "bash.jsonl")
    for run in ("a", "b"):
        config = tmp_path / f"{run}.toml"
        config.write_text(toml(base))
        args = ["score", str(stream), "--out", str(tmp_path / run), "--config", str(config)]
        result = await anyio.to_thread.run_sync(CliRunner().invoke, app, args)
        assert result.exit_code == 0, result.output
    # the critic's 6 requests are cached after run a; the 9 votes at tau = 0.7 without a seed are sampled anew
    assert len(openai_server.requests) == 6 + 9 + 9


async def test_opted_in_sampled_votes_replay_one_for_one_so_the_rows_repeat(openai_server, tmp_path):
    def varying(body: dict, i: int) -> Reply:
        if not N_STEPS.search(body["messages"][-1]["content"]):
            return critic_only(body, i)
        n = int(N_STEPS.search(body["messages"][-1]["content"]).group(1))  # type: ignore[union-attr]
        return Reply(orjson.dumps({"labels": [(i + s) % 2 for s in range(n)]}).decode())  # each vote differs

    openai_server.responder = varying
    settings = {
        "backend": {"name": "openai", "base_url": openai_server.base_url, "model": openai_server.model},
        "ceb": {"votes": 3},
        "methods": ["ceb"],
        "cache": {"mode": "read-write", "path": str(tmp_path / "replies.sqlite"), "nondeterministic": True},
        "speculation": 0,  # what is asked ahead and discarded depends on timing: these count every request
    }
    config = tmp_path / "run.toml"
    config.write_text(toml(settings))
    stream = write_stream(tmp_path / "bash.jsonl")
    for run in ("first", "second"):
        args = ["score", str(stream), "--out", str(tmp_path / run), "--config", str(config)]
        result = await anyio.to_thread.run_sync(CliRunner().invoke, app, args)
        assert result.exit_code == 0, result.output
    assert len(openai_server.requests) == 6 + 9  # the second run sent none
    first = [orjson.loads(r) for r in rows(tmp_path / "first" / "hindsight.jsonl")]
    assert any(len({tuple(v) for v in row["votes"]}) > 1 for row in first)  # the votes did differ
    for name in ("scores.jsonl", "hindsight.jsonl"):
        assert rows(tmp_path / "second" / name) == rows(tmp_path / "first" / name)
