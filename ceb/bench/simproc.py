"""Run the simulated server (:mod:`ceb.sim`) in a separate process, so its CPU does not share the client's loop."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from ceb.sim import SimConfig

__all__ = ["SimReplicas", "free_port", "sim_process", "sim_replicas", "sim_stats"]

_SCRIPT = (
    "import sys, orjson\n"
    "from ceb.sim import SimConfig, run_sim_server\n"
    "run_sim_server(SimConfig(**orjson.loads(sys.argv[1])), host='127.0.0.1', port=int(sys.argv[2]))\n"
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def sim_process(config: SimConfig, *, port: int | None = None, start_timeout_s: float = 30.0) -> Iterator[str]:
    """Start the simulator on 127.0.0.1 in a child process; yield its base URL; stop it on exit.

    Args:
        config: The simulator's load model and faults.
        port: TCP port to listen on; ``None`` or 0 takes a free one.
        start_timeout_s: Seconds to wait for ``/health``.

    Raises:
        RuntimeError: It did not answer ``/health`` within ``start_timeout_s`` (its stderr is included, e.g. a
            port already in use).
    """
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, orjson.dumps(asdict(config)).decode(), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{root}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else ""
                raise RuntimeError(f"the simulator did not start on {root}: {err[-2000:]}")
            time.sleep(0.05)
        yield f"{root}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


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


# Each replica binds port 0 and the child prints the ports it got on one line: ports chosen by the parent
# beforehand could be taken meanwhile by the client's own outgoing connections (same ephemeral range).
_REPLICAS_SCRIPT = (
    "import sys, orjson, anyio\n"
    "from contextlib import AsyncExitStack\n"
    "from ceb.sim import SimConfig, serve_sim\n"
    "async def main(config, n):\n"
    "    async with AsyncExitStack() as stack:\n"
    "        servers = [await stack.enter_async_context(serve_sim(config, '127.0.0.1', 0)) for _ in range(n)]\n"
    "        print('CEB_SIM_PORTS', orjson.dumps([s.port for s in servers]).decode(), flush=True)\n"
    "        await anyio.sleep_forever()\n"
    "anyio.run(main, SimConfig(**orjson.loads(sys.argv[1])), int(sys.argv[2]))\n"
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
        start_timeout_s: Seconds to wait for every child to be listening.

    Raises:
        ValueError: ``replicas`` or ``processes`` below 1.
        RuntimeError: A child did not report its replicas' ports in time (its stderr is included).
    """
    if replicas < 1 or processes < 1:
        raise ValueError(f"replicas and processes must be >= 1, got {replicas} and {processes}")
    counts = [len(range(i, replicas, processes)) for i in range(min(processes, replicas))]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _REPLICAS_SCRIPT, orjson.dumps(asdict(config)).decode(), str(n)],
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
