"""PPL and ME share one teacher-forcing request per step against a real model, with the rows of separate requests.

SmolLM2-135M-Instruct with its real weights on vLLM's CPU build (the session's ``vllm_server`` fixture). The two
methods score the first real InterCode-Bash trajectories twice: each with its own teacher-forcing request
(``baselines.share_statistics = false``), and sharing one (the default). The scores must agree: the requests are
the same, but the server may batch them differently, so a small difference in the log-probs is allowed.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from ceb.config import load_config
from ceb.data import convert_intercode, read_stream
from ceb.pipeline import read_rows, run_scoring
from tests.support.paths import INTERCODE
from tests.support.vllm_server import VLLMServer

pytestmark = [pytest.mark.vllm, pytest.mark.anyio, pytest.mark.timeout(1800)]


async def test_ppl_and_me_send_one_request_per_step_with_the_same_scores(
    tmp_path: Path, vllm_server: VLLMServer
) -> None:
    convert_intercode(INTERCODE, tmp_path / "streams", datasets=("bash",))
    trajectories = read_stream([tmp_path / "streams" / "intercode-bash-gpt-4.jsonl"])[:3]
    n_steps = sum(len(t.steps) for t in trajectories)
    scores: dict[bool, dict[tuple[str, str, int], float]] = {}
    requests: dict[bool, dict[str, int]] = {}
    for share in (False, True):
        config = load_config(
            overrides={
                "methods": ["ppl", "me"],
                "baselines": {"share_statistics": share},
                "backend": {"name": "openai", "base_url": vllm_server.base_url, "model": vllm_server.model},
            }
        )
        await run_scoring({"bash": trajectories}, config, tmp_path / f"share-{share}")
        rows = list(read_rows(tmp_path / f"share-{share}" / "scores.jsonl"))
        assert len(rows) == 2 * n_steps and all(r["score"] is not None for r in rows), [r["error"] for r in rows]
        scores[share] = {(r["method"], r["trajectory"], r["step"]): r["score"] for r in rows}
        per_method: dict[str, int] = defaultdict(int)
        for r in rows:
            per_method[r["method"]] += r["requests"]
        requests[share] = dict(per_method)
    print(f"{n_steps} steps; requests alone {requests[False]}, shared {requests[True]}")
    assert requests[False] == {"ppl": n_steps, "me": n_steps}
    assert sum(requests[True].values()) == n_steps
    assert scores[True].keys() == scores[False].keys()
    worst = max(abs(scores[True][k] - scores[False][k]) for k in scores[True])
    assert worst <= 0.02, f"largest difference {worst:.4f}"
