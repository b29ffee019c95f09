"""PPL, ME and PRO over the simulator: their shared teacher-forcing request is sent once per step (issue 35.2)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from ceb.config import load_config
from ceb.pipeline import read_rows, run_scoring
from ceb.sim import SimServer
from tests.support.builders import step, trajectory

pytestmark = pytest.mark.anyio


def _stream() -> list:
    return [
        trajectory(
            f"t{i}",
            step(f"ls /data/{i}", f"file{i}.txt", label=1),
            step(f"cat /data/{i}/file{i}.txt", "hello", label=i % 2),
            step(f"ls /data/{i}", f"file{i}.txt", label=0),
            task=f"print the file in /data/{i}",
        )
        for i in range(4)
    ]


_KEPT = ("stream", "method", "trajectory", "step", "score", "label", "raw", "error", "status", "order")


async def test_ppl_me_and_pro_send_one_teacher_forcing_request_per_step(tmp_path, sim_server: SimServer) -> None:
    """The three read the same teacher-forced log-probs. Shared, the rows are those of separate requests, and the
    run sends one teacher-forcing request per step between them (PRO's sampling request stays its own)."""
    backend = {"name": "openai", "base_url": sim_server.base_url, "model": sim_server.config.model}
    rows = {}
    requests: dict[bool, dict[str, int]] = {}
    for share in (False, True):
        config = load_config(
            overrides={"methods": ["ppl", "me", "pro"], "backend": backend, "baselines": {"share_statistics": share}}
        )
        sim_server.stats.reset()
        out = tmp_path / f"share-{share}"
        await run_scoring({"s": _stream()}, config, out)
        per_method: dict[str, int] = defaultdict(int)
        for r in read_rows(out / "scores.jsonl"):
            per_method[r["method"]] += r["requests"]
        # The rows' request counts add up to what the server received, and the run's one preflight request.
        assert sum(per_method.values()) + 1 == sim_server.stats.requests
        requests[share] = dict(per_method)
        rows[share] = sorted(tuple(r[k] for k in _KEPT) for r in read_rows(out / "scores.jsonl"))
    assert rows[True] == rows[False]
    steps = 4 * 3
    assert requests[False] == {"ppl": steps, "me": steps, "pro": 2 * steps}
    # One teacher-forcing request per step between the three, whichever lane sent it, plus PRO's samples.
    assert sum(requests[True].values()) == 2 * steps
