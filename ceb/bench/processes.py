"""The benchmarks' child processes: the simulated server, and a measurement in a fresh interpreter.

The simulated server (:mod:`ceb.sim`) runs in a separate process so that its CPU does not share the client's
event loop (:func:`sim_process`, :func:`sim_replicas`). A measurement whose peak memory must be its own, or
several run side by side, goes through :func:`run_fresh` / :func:`run_fresh_many`: a ``"module:function"``
called with a JSON spec in a new ``python -m ceb.bench.processes`` with this process's environment.
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
    """One simulator on 127.0.0.1 in a child process (:func:`sim_replicas` of one); yield its base URL.

    Args:
        config: The simulator's load model and faults.
        port: TCP port to listen on; ``None`` or 0 takes a free one.
        start_timeout_s: Seconds to wait for it to listen.

    Raises:
        RuntimeError: It did not start within ``start_timeout_s`` (its stderr is included, e.g. a port already in
            use).
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
    """Simulated replicas running in child processes (see :func:`sim_replicas`).

    Attributes:
        base_urls: One ``http://127.0.0.1:<port>/v1`` per replica.
        pids: The child processes' ids (several replicas share one process).
    """

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
    """Start ``replicas`` independent simulators (each its own port and ``max_num_seqs`` slots) in child processes.

    Replicas are shared out among ``processes`` child processes, each one event loop serving its replicas,
    so the simulators' CPU stays out of the caller's process and can be kept to chosen cores.

    Args:
        config: Every replica's load model.
        replicas: How many replicas (>= 1).
        processes: Child processes (at most ``replicas``).
        cpus: CPU ids the children may run on (``os.sched_setaffinity``); ``None`` leaves them free.
        port: The one replica's TCP port; 0 takes a free port for each replica.
        start_timeout_s: Seconds to wait for every child to be listening.

    Raises:
        ValueError: ``replicas`` or ``processes`` below 1, or a ``port`` for more than one replica.
        RuntimeError: A child did not report its replicas' ports in time (its stderr is included, e.g. a port
            already in use).
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
    """Call ``target(spec)`` in a fresh Python process and return the document it returned.

    The child is ``python -m ceb.bench.processes <target> <spec JSON> <out>`` with this process's environment
    (so the same ``ceb``); it writes the result as JSON to a temporary file.

    Args:
        target: ``"module:function"``; the function takes the spec and returns a JSON-ready dict.
        spec: The measurement, JSON-ready.
        timeout_s: Kill the child after this long.

    Returns:
        The function's result.

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
    """:func:`run_fresh` for each spec, ``jobs`` at a time, results in spec order.

    Args:
        target: ``"module:function"`` (see :func:`run_fresh`).
        specs: One measurement each.
        jobs: Children at a time.
        timeout_s: Each child's time limit.
        describe: A spec's name in the log lines.
        log: Receives a line per finished or failed spec.

    Returns:
        Per spec, the result, or ``{"error": message, "spec": spec}`` when its child failed.
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
