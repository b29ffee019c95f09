"""Two ``ceb score`` shards at once behind vLLM's router in front of two real vLLM replicas.

Two replicas of the real SmolLM2-135M-Instruct (:mod:`tests.support.real_model`), each its own vLLM CPU server
started here with ``--enable-log-requests``: the session's ``vllm_server`` fixture is not reused, because the
check reads which replica served which lane from both replicas' logs, and that server logs no requests (and under
``CEB_VLLM_URL`` its log is not even on this machine). ``vllm-router`` (:mod:`tests.support.vllm_router`) sits in
front of them; ceb is given the router as its one endpoint, so the choice of replica is the router's alone.

With ``--policy consistent_hash`` the router keys on ``X-Session-ID``, which carries ceb's lane key: every lane's
requests must land on one replica. The same workload under ``round_robin`` is the contrast that shows the check
can fail: lanes of several requests are split between the replicas.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from ceb.backends.scheduling import lane_tag
from ceb.data import convert_intercode
from ceb.pipeline.rundir import RunDir
from ceb.pipeline.shard import lane_id, shard_of
from tests.support.paths import INTERCODE
from tests.support.real_model import real_model_dir
from tests.support.vllm_router import ROUTER_BIN, replica_lanes, serve_router
from tests.support.vllm_server import REAL_MODEL_NAME, VLLMServer, serve_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]

LIMIT = 1
"""Trajectories scored per stream: the first one of each of the 7 InterCode-Bash streams (37 steps)."""

METHOD = "static"
"""One critic request per step: a lane is a chain of requests sharing its trajectory's history."""


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, VLLMServer]]:
    """Two real-model vLLM replicas logging every request, started one after the other."""
    if not ROUTER_BIN.is_file():
        pytest.fail(f"{ROUTER_BIN} is missing: run .ci/install-vllm (it installs vllm-router)")
    logs = tmp_path_factory.mktemp("replicas")
    model = real_model_dir()
    with contextlib.ExitStack() as stack:
        servers = {
            name: stack.enter_context(
                serve_vllm(
                    model,
                    logs / f"{name}.log",
                    load_format="auto",
                    model_name=REAL_MODEL_NAME,
                    ready_timeout_s=900,
                    # --enforce-eager: see tests/vllm/conftest.py (torch.compile of the model takes minutes on 2 cores).
                    extra_args=("--enforce-eager", "--enable-log-requests"),
                    # One core each: vLLM's CPU build otherwise binds both engines to the same first core.
                    env={"VLLM_CPU_OMP_THREADS_BIND": str(i % (os.cpu_count() or 1))},
                )
            )
            for i, name in enumerate(("a", "b"))
        }
        print("replicas ready after " + ", ".join(f"{n} {s.start_s:.0f} s" for n, s in servers.items()))
        yield servers


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("streams")
    return [c.path for c in convert_intercode(INTERCODE, out, datasets=("bash",))]


def _shards(base_url: str, streams: list[Path], work: Path) -> list[Path]:
    """Run ``ceb score --shard 0/2`` and ``1/2`` at once against ``base_url``; the two run directories."""
    runs = [work / f"shard-{i}" for i in range(2)]
    cli = [sys.executable, "-c", "from ceb.cli import main; main()", "--progress", "off", "score"]
    common = ["--backend", "openai", "--base-url", base_url, "--model", REAL_MODEL_NAME]
    common += ["--methods", METHOD, "--limit", str(LIMIT), "--max-concurrency", "8"]
    procs = [
        subprocess.Popen(
            [*cli, *map(str, streams), "--out", str(run), "--shard", f"{i}/2", *common],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for i, run in enumerate(runs)
    ]
    outputs = [p.communicate(timeout=900)[0].decode(errors="replace") for p in procs]
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out[-3000:]
    return runs


def _run_under(
    policy: str, replicas: Mapping[str, VLLMServer], streams: list[Path], work: Path
) -> tuple[dict[str, dict[str, int]], dict[str, int], dict[str, str], float]:
    """Both shards behind the router under ``policy``.

    Returns lane tag -> replica -> requests (this run's log lines only), lane tag -> requests the rows count,
    lane tag -> lane id for every lane scored, and the wall time.
    """
    offsets = {name: s.log.stat().st_size for name, s in replicas.items()}
    workers = [s.base_url for s in replicas.values()]
    with serve_router(workers, work / f"router-{policy}.log", policy=policy) as router:
        started = time.monotonic()
        runs = _shards(router.base_url, streams, work / policy)
        wall = time.monotonic() - started
    lanes: dict[str, str] = {}
    sent: dict[str, int] = {}
    for i, run in enumerate(runs):
        rows = list(RunDir(run).step_rows())
        assert rows and all(r.status == "scored" for r in rows), [r.error for r in rows if r.error]
        for r in rows:
            key = (r.stream, r.order, r.method, r.critic)
            assert shard_of(key, 2) == i  # each shard scored its own lanes only
            tag = lane_tag(lane_id(key))
            lanes[tag] = lane_id(key)
            sent[tag] = sent.get(tag, 0) + r.requests
    return replica_lanes({n: s.log for n, s in replicas.items()}, since=offsets), sent, lanes, wall


def test_consistent_hash_keeps_every_lane_of_two_shards_on_one_replica_and_round_robin_does_not(
    replicas: dict[str, VLLMServer], streams: list[Path], tmp_path: Path
) -> None:
    hashed, sent, lanes, hashed_s = _run_under("consistent_hash", replicas, streams, tmp_path)
    robin, _, _, robin_s = _run_under("round_robin", replicas, streams, tmp_path)
    print(f"consistent_hash {hashed_s:.0f} s: {hashed}\nround_robin {robin_s:.0f} s: {robin}")

    # Every lane of both shards reached the replicas under its own tag, each request it counts seen once.
    assert set(hashed) == set(lanes) == set(robin) and len(lanes) == 7
    assert {t: sum(per.values()) for t, per in hashed.items()} == sent
    split = {lanes[t]: per for t, per in hashed.items() if len(per) != 1}
    assert not split, f"lanes split between replicas under consistent_hash: {split}"
    # The contrast, so the check above can fail: round-robin spreads lanes of several requests over both replicas
    # (each lane of 6 or more requests staying whole by chance has odds of 1 in 32 or less).
    assert any(len(per) == 2 for per in robin.values()), robin
