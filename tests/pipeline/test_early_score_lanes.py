"""A whole run with early critic scores gives the scores of a run that reads every reply whole."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from ceb.backends.base import ChatRequest
from ceb.backends.scripted import ScriptedChat
from ceb.config import load_config
from ceb.pipeline import run_scoring
from ceb.pipeline.results import read_rows
from ceb.stages.assembly import llm_stages
from tests.support.builders import n_steps_of, step, trajectory

pytestmark = pytest.mark.anyio


def _reply(request: ChatRequest) -> str:
    if request.stage == "critic":
        # The score depends on the prompt, so a lane whose history scores differed would drift.
        score = (len(request.messages[-1]["content"]) % 97) / 96
        return orjson.dumps({"score": score, "reason": "a reason long enough to be cut " * 3}).decode()
    return orjson.dumps({"labels": [1] * n_steps_of(request)}).decode()


@pytest.mark.parametrize("cap", [0, 2, None])
async def test_early_scores_equal_whole_reply_scores_over_a_run(tmp_path: Path, cap: int | None) -> None:
    streams = {
        f"s{k}": [
            trajectory(f"t{i}", step("ls", "a b"), step(f"cat a{i}", "x"), step("wc -l a", "1"), task=f"task {k} {i}")
            for i in range(3)
        ]
        for k in range(2)
    }
    scores = {}
    for arm, early in (("whole", {}), ("early", {"early_score": True, "reason_tokens_after_score": cap})):
        config = load_config(overrides={"methods": ["ceb", "static"], "orders": 1, "critic": early})
        chat = ScriptedChat(_reply, chunk_chars=4, chunk_delay_s=0.0005)
        async with llm_stages(config, chat) as stages:
            summary = await run_scoring(streams, config, tmp_path / arm, stages=stages, overwrite=True)
        rows = list(read_rows(tmp_path / arm / "scores.jsonl"))
        scores[arm] = {(r["stream"], r["method"], r["trajectory"], r["step"]): r["score"] for r in rows}
        if arm == "early":
            # the stored replies end where the score was taken (plus the cap), never at the reply's end
            assert not any(r["raw"].endswith("}") for r in rows)
            # every critic call was streamed, those speculation asked ahead and discarded too
            assert len(chat.streamed) == len(rows) + summary.discarded_requests
    assert len(scores["whole"]) == 36 and None not in scores["whole"].values()
    assert scores["early"] == scores["whole"]
