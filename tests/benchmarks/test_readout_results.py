"""``python benchmarks/readout.py results``: the real-model results table (issue 23 item 4) read from a run."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from benchmarks.readout import results
from ceb.backends.base import ChatRequest
from ceb.backends.scripted import ScriptedChat
from ceb.config import load_config
from ceb.pipeline import run_scoring
from ceb.stages import assembly
from tests.support.builders import n_steps_of, step, trajectory

pytestmark = pytest.mark.anyio


def _reply(request: ChatRequest) -> str:
    if request.stage == "critic":  # 0.9 for the first step of a trajectory, 0.2 for later ones
        later = "Step 1:" in request.messages[-1]["content"]
        return orjson.dumps({"score": 0.2 if later else 0.9, "reason": ""}).decode()
    return orjson.dumps({"labels": [1] + [0] * (n_steps_of(request) - 1)}).decode()


async def test_the_table_counts_scores_metrics_tokens_and_votes_per_stream_and_method(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = [
        trajectory(f"t{i}", step(f"cmd {i}", "out", label=1), step(f"cmd {i} b", "out", label=0)) for i in range(6)
    ]
    config = load_config(overrides={"methods": ["ceb", "static"], "ceb": {"votes": 3}})
    chat = ScriptedChat(_reply)
    await run_scoring({"s": stream}, config, tmp_path / "run", stages=assembly.llm_stages(config, chat))
    results([tmp_path / "run"], n_boot=50)
    lines = capsys.readouterr().out.splitlines()
    ceb_row = next(x for x in lines if x.startswith("| run | s | ceb |")).split(" | ")
    # 12 steps scored, none failed or not available, 6 positives, two distinct scores ranking perfectly.
    assert ceb_row[3:8] == ["12", "0", "0", "6", "2"]
    assert ceb_row[10].startswith("1.000 [1.00, 1.00]")  # AUROC with its bootstrap interval
    assert ceb_row[8].startswith("0.150 [")  # ECE: |0.9 - 1| and |0.2 - 0| over the two bins
    votes = next(x for x in lines if x.startswith("| run | s | ceb | ") and x.count("|") == 10).split(" | ")
    # 6 trajectories x 3 votes x 2 steps: one 1 and one 0 per vote; every vote valid.
    assert votes[3:9] == ["18", "18", "0", "1.00", "6", "6 |"]
