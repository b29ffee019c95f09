"""The benchmarks' child processes: simulated servers, and measurements in a fresh interpreter.

A simulator (:mod:`ceb.sim`) runs apart so that its CPU stays off the client's event loop; a measurement runs in a
fresh ``python -m ceb.bench.processes`` so that its peak memory is its own.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import json
import os
import select
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ceb.sim import SimConfig

__all__ = ["SimReplicas", "run_fresh", "run_fresh_many", "sim_process", "sim_replicas", "sim_stats"]


@contextmanager
def sim_process(config: SimConfig, *, port: int | None = None, start_timeout_s: float = 30.0) -> Iterator[str]:
    """One simulator on 127.0.0.1 ``port`` (``None`` or 0: a free one) in a child process; yields its base URL.

    Raises:
        RuntimeError: It did not listen within ``start_timeout_s`` seconds (its stderr included).
    """
    with sim_replicas(config, 1, port=port or 0, start_timeout_s=start_timeout_s) as reps:
        yield reps.base_urls[0]


def sim_stats(base_url: str, *, reset: bool = False) -> dict[str, Any]:
    """The simulator's counters (``GET /sim/stats``); with ``reset``, zero them afterwards."""
    root = base_url.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/sim/stats", timeout=10) as r:
        doc: dict[str, Any] = orjson.loads(r.read())
    stats: dict[str, Any] = doc.get("stats", doc)
    if reset:
        req = urllib.request.Request(f"{root}/sim/reset", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass
    return stats


# Each replica binds port 0 (unless one is asked for) and the child prints the ports it got on one line, once every
# replica listens: ports chosen by the parent beforehand could be taken meanwhile by the client's own outgoing
# connections (same ephemeral range).
_REPLICAS_SCRIPT = (
    "import sys, orjson, anyio\n"
    "from contextlib import AsyncExitStack\n"
    "from ceb.sim import SimConfig, serve_sim\n"
    "async def main(config, n, port):\n"
    "    async with AsyncExitStack() as stack:\n"
    "        servers = [await stack.enter_async_context(serve_sim(config, '127.0.0.1', port)) for _ in range(n)]\n"
    "        print('CEB_SIM_PORTS', orjson.dumps([s.port for s in servers]).decode(), flush=True)\n"
    "        await anyio.sleep_forever()\n"
    "anyio.run(main, SimConfig(**orjson.loads(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3]))\n"
)


@dataclass(frozen=True, slots=True)
class SimReplicas:
    """Simulated replicas: one ``http://127.0.0.1:<port>/v1`` each, and the ids of the processes serving them."""

    base_urls: tuple[str, ...]
    pids: tuple[int, ...]


@contextmanager
def sim_replicas(
    config: SimConfig,
    replicas: int,
    *,
    processes: int = 1,
    cpus: set[int] | None = None,
    port: int = 0,
    start_timeout_s: float = 30.0,
) -> Iterator[SimReplicas]:
    """Start ``replicas`` independent simulators (own port, own slots), shared out among ``processes`` children.

    ``cpus``: the CPU ids the children may run on (``None``: any); ``port``: the one replica's (0: free ones).

    Raises:
        ValueError: ``replicas`` or ``processes`` below 1, or a ``port`` for more than one replica.
        RuntimeError: A child did not report its ports within ``start_timeout_s`` seconds (its stderr included).
    """
    if replicas < 1 or processes < 1:
        raise ValueError(f"replicas and processes must be >= 1, got {replicas} and {processes}")
    if port and replicas > 1:
        raise ValueError(f"port {port} serves one replica, not {replicas}")
    counts = [len(range(i, replicas, processes)) for i in range(min(processes, replicas))]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _REPLICAS_SCRIPT, config.model_dump_json(), str(n), str(port)],
            bufsize=0,  # unbuffered: a line read must not pull the next one out of select()'s sight
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in counts
    ]
    try:
        if cpus is not None:
            for p in procs:
                os.sched_setaffinity(p.pid, cpus)
        deadline = time.monotonic() + start_timeout_s
        ports: list[int] = []
        for p in procs:
            assert p.stdout is not None
            line = b""
            while not line.startswith(b"CEB_SIM_PORTS "):  # its log lines may come first
                ready, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))
                line = p.stdout.readline() if ready else b""
                if not line:
                    p.kill()
                    err = p.stderr.read().decode() if p.stderr else ""
                    raise RuntimeError(f"the simulated replicas did not start: {err[-2000:]}")
            ports += orjson.loads(line.split(b" ", 1)[1])
        yield SimReplicas(tuple(f"http://127.0.0.1:{port}/v1" for port in ports), tuple(p.pid for p in procs))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            for stream in (p.stdout, p.stderr):
                if stream is not None:
                    stream.close()


def run_fresh(target: str, spec: Mapping[str, Any], *, timeout_s: float | None = None) -> dict[str, Any]:
    """``target(spec)`` (``"module:function"`` of a JSON-ready dict, returning one) in a fresh Python process.

    Raises:
        RuntimeError: The child failed (its exit status and the end of its stderr), or timed out.
    """
    with tempfile.TemporaryDirectory(prefix="ceb-bench-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "ceb.bench.processes", target, json.dumps(spec), str(out)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{target} timed out after {timeout_s} s") from exc
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"{target} exited with {done.returncode}: {done.stderr[-2000:]}")
        doc: dict[str, Any] = orjson.loads(out.read_bytes())
        return doc


def run_fresh_many(
    target: str,
    specs: Sequence[Mapping[str, Any]],
    *,
    jobs: int = 1,
    timeout_s: float | None = None,
    describe: Callable[[Mapping[str, Any]], str] = lambda _: "",
    log: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """:func:`run_fresh` of each spec, ``jobs`` at a time: per spec its result, or ``{"error", "spec"}`` if it failed.

    ``log`` receives a line per spec finished or failed, naming it by ``describe``.
    """

    def one(spec: Mapping[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            doc = run_fresh(target, spec, timeout_s=timeout_s)
        except RuntimeError as exc:
            log(f"{describe(spec)}: FAILED: {exc}")
            return {"error": str(exc), "spec": dict(spec)}
        log(f"{describe(spec)}: {time.perf_counter() - t0:.0f} s")
        return doc

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, specs))


def _main(argv: Sequence[str]) -> int:
    """Child entry point of :func:`run_fresh`: ``python -m ceb.bench.processes <module:function> <spec> <out>``."""
    from ceb.logs import configure_logging

    configure_logging("warning")
    target, spec, out = argv
    module, _, name = target.partition(":")
    result = getattr(importlib.import_module(module), name)(json.loads(spec))
    Path(out).write_bytes(orjson.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
