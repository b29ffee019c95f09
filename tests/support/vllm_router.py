"""vLLM's own router (``vllm-router``, the PyPI package of ``vllm-project/router``) in front of given replicas.

The router is a Rust binary shipped in an abi3 wheel with a Python launcher; ``.ci/install-vllm`` installs it
into ``.venv-vllm`` at an exact version (its Python dependencies, FastAPI, uvicorn, aiohttp, orjson, requests and
setproctitle, are vLLM's too and so already pinned there). Flags worth a note (vllm-router 0.1.17):

* ``--policy consistent_hash`` keys on the first of the headers ``X-Session-ID``, ``X-User-ID``, ``X-Tenant-ID``,
  ``X-Request-ID``, ... that a request carries (its load-balancing docs, "Hash Key Priority"): ceb's
  ``X-Session-Id`` (the lane key) comes first, so a lane stays on one replica. ``round_robin`` ignores it.
* ``--prometheus-port``: the router serves its own metrics on 29000 unless told otherwise, which collides
  between two routers on one machine; each gets a free port here.
* The router passes ``X-Request-Id`` through, and vLLM names the request ``chatcmpl-<that id>`` in its log under
  ``--enable-log-requests``; ceb's ids carry the lane's tag (:func:`ceb.backends.scheduling.lane_tag`), so
  :func:`replica_lanes` reads which replica served which lane from the replicas' logs.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.vllm_server import VLLM_VENV, _free_port, serve_process

__all__ = ["ROUTER_BIN", "RouterServer", "replica_lanes", "serve_router"]

ROUTER_BIN = VLLM_VENV / "bin" / "vllm-router"
"""The router's launcher in ``.venv-vllm``."""

_RECEIVED = re.compile(r"Received request chatcmpl-ceb-[a-z_]+-([0-9a-f]{8})-([0-9a-f]{32})\b")
"""vLLM's ``--enable-log-requests`` line for one of ceb's lane requests: the lane's tag and the attempt's id."""


@dataclass(frozen=True, slots=True)
class RouterServer:
    """A running router.

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1``, what ceb is given as its one endpoint.
        policy: ``--policy``.
        workers: The replicas' root URLs (no ``/v1``).
        log: The router's output.
        start_s: Seconds from launch until ``/health`` answered 200.
    """

    base_url: str
    policy: str
    workers: tuple[str, ...]
    log: Path
    start_s: float


@contextlib.contextmanager
def serve_router(
    workers: Sequence[str],
    log: Path,
    *,
    policy: str = "consistent_hash",
    port: int | None = None,
    ready_timeout_s: float = 120.0,
    extra_args: Sequence[str] = (),
    binary: Path = ROUTER_BIN,
) -> Iterator[RouterServer]:
    """Start ``vllm-router`` on loopback ``port`` (``None``: a free one) in front of ``workers``; stop it on exit.

    Args:
        workers: The replicas' root URLs (``http://127.0.0.1:8001``, no ``/v1``); they should be up already (the
            router waits for them, up to its ``--worker-startup-timeout-secs``).
        log: File for the router's output.
        policy: ``--policy``: ``consistent_hash`` (by ``X-Session-ID`` first), ``round_robin``, ...
        port: The router's port.
        ready_timeout_s: Seconds to wait for its ``/health``.
        extra_args: More router flags.
        binary: The ``vllm-router`` launcher (default: ``.venv-vllm``'s).

    Yields:
        The running router.

    Raises:
        FileNotFoundError: ``vllm-router`` is not installed in ``.venv-vllm``.
        RuntimeError: The router exited or was not ready in time; the message ends with its log's tail.
    """
    if not binary.is_file():
        raise FileNotFoundError(f"{binary} is missing: run .ci/install-vllm (it installs vllm-router)")
    roots = tuple(w.rstrip("/").removesuffix("/v1") for w in workers)
    port = port or _free_port()
    cmd = [
        str(binary),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--worker-urls",
        *roots,
        "--policy",
        policy,
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(_free_port()),
        *extra_args,
    ]
    base = f"http://127.0.0.1:{port}"
    env = os.environ | {"NO_COLOR": "1"}
    with serve_process(cmd, env, log, f"{base}/health", "vllm-router", ready_timeout_s) as start_s:
        yield RouterServer(f"{base}/v1", policy, roots, log, start_s)


def replica_lanes(logs: Mapping[str, Path], since: Mapping[str, int] | None = None) -> dict[str, dict[str, int]]:
    """Where each lane's requests went: lane tag -> replica -> requests, read from the replicas' logs.

    Args:
        logs: Replica name -> its vLLM log (a server started with ``--enable-log-requests``).
        since: Replica name -> byte offset to read its log from (its size before the run looked at); from the
            start when absent.

    Returns:
        For each lane tag seen (:func:`ceb.backends.scheduling.lane_tag`), the number of its requests each
        replica received (replicas that received none are left out). Requests without a lane tag are not counted.
    """
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for name, path in logs.items():
        with path.open("rb") as f:
            f.seek((since or {}).get(name, 0))
            text = f.read().decode("utf-8", errors="replace")
        for m in _RECEIVED.finditer(text):
            out[m.group(1)][name] += 1
    return {tag: dict(per) for tag, per in out.items()}
