"""``ceb regenerate`` with the real model as the actor, on the Mind2Web fixture: structure and validity only.

SmolLM2-135M picks elements about as well as chance; the test checks that vLLM's schema enforcement gives a
readable action for every flagged step, that each step is asked once, and that the table and figure are
whole, never the quality of the regenerations.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.data import convert_mind2web, read_stream
from ceb.data.mind2web_dom import element_ids
from ceb.data.references import ACTION_SPACES
from ceb.pipeline.regenerate import ORACLE, RANDOM
from tests.support.vllm_server import VLLMServer

pytestmark = [pytest.mark.vllm, pytest.mark.anyio, pytest.mark.timeout(900)]

runner = CliRunner()
M2W = Path(__file__).resolve().parents[1] / "fixtures" / "mind2web"


async def test_regenerate_on_the_mind2web_fixture_with_the_real_actor(tmp_path: Path, vllm_server: VLLMServer) -> None:
    convert_mind2web(M2W, M2W / "predictions.jsonl", tmp_path / "streams")
    streams = sorted(str(p) for p in (tmp_path / "streams").glob("*.jsonl"))
    run = tmp_path / "run"
    scored = await anyio.to_thread.run_sync(runner.invoke, app, ["score", *streams, "--out", str(run)])
    assert scored.exit_code == 0, scored.output
    args = ["regenerate", str(run), "--base-url", vllm_server.base_url, "--model", vllm_server.model]
    result = await anyio.to_thread.run_sync(runner.invoke, app, args)
    print(result.output)
    assert result.exit_code == 0, result.output

    out = run / "regeneration"
    records = [orjson.loads(line) for line in (out / "regenerations.jsonl").read_bytes().splitlines()]
    keys = [(r["trajectory"], r["step"]) for r in records]
    assert records and len(keys) == len(set(keys))  # one record per distinct flagged step
    steps = {(t.id, i): s for t in read_stream(streams) for i, s in enumerate(t.steps)}
    for r in records:  # the server enforces the schema: every reply is an action the reference rule can judge
        assert r["error"] is None, r
        assert r["op"] in ACTION_SPACES["web"].operations and r["label"] in (0, 1) and isinstance(r["value"], str)
        # ... naming an element of the page it was shown (the schema's enum), or none
        assert r["element_id"] is None or r["element_id"] in element_ids(steps[(r["trajectory"], r["step"])].state)
    doc = orjson.loads((out / "regeneration.json").read_bytes())
    assert doc["steps"] == 7 and doc["about"]["backend"].endswith(vllm_server.base_url)
    curves = {c["selection"]: c for c in doc["curves"]}
    assert {"ceb", "static", RANDOM, ORACLE} <= set(curves)
    for c in curves.values():
        assert len(c["positive_rate"]) == len(c["task_accuracy"]) == 4
        assert all(0 <= v <= 1 for v in c["positive_rate"] + c["task_accuracy"])
        assert c["positive_rate"][0] == pytest.approx(2 / 7)  # the baseline is the logged actions' rate
    assert (out / "regeneration.png").stat().st_size > 0 and "Oracle" in (out / "regeneration.md").read_text()
