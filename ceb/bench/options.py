"""What the installed benchmarks share: their settings' common fields, the run they score, and how results are saved.

Every tool runs from an installed ``ceb`` (``ceb bench NAME``) against the user's own endpoint (``--base-url`` and
``--model``) or the simulator, scoring the run :func:`bench_config` builds; :func:`finish` prints its figures and
writes its results under ``benchmarks/results`` in the working directory unless ``--out`` says otherwise. The
InterCode data is read from ``$CEB_SHARED/data/intercode`` (by default ``../shared`` beside the checkout, or beside
the working directory outside one). Starting the tests' CPU vLLM server is the
checkout's business (``python benchmarks/tiny_vllm.py``), never an installed module's.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from pydantic import BaseModel, ConfigDict, Field

from ceb.bench.machine import machine_info
from ceb.bench.result_files import save_results
from ceb.config import RunConfig, load_config
from ceb.data import Trajectory, convert_intercode, read_stream
from ceb.logs import configure_logging

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "RESULTS",
    "BenchSettings",
    "ServerBench",
    "bench_config",
    "default_intercode",
    "finish",
    "load_intercode_streams",
    "run_and_save",
]

S = TypeVar("S", bound="BenchSettings")

RESULTS = Path("benchmarks") / "results"
"""Where results go by default, relative to the working directory (:func:`ceb.bench.result_files.save_results`)."""


def default_intercode() -> Path:
    """``$CEB_SHARED/data/intercode``; without ``CEB_SHARED``, ``../shared`` beside the checkout or the working dir."""
    shared = os.environ.get("CEB_SHARED")
    if shared:
        return Path(shared) / "data" / "intercode"
    root = Path(__file__).resolve().parents[2]
    beside = root if (root / "pyproject.toml").is_file() else Path.cwd()
    return beside.parent / "shared" / "data" / "intercode"


def load_intercode_streams(
    root: Path, work: Path, datasets: Sequence[str] = ("bash", "sql")
) -> dict[str, list[Trajectory]]:
    """Convert the real InterCode results into ``work`` and read every stream back (name -> trajectories)."""
    converted = convert_intercode(root, work, datasets=tuple(datasets))
    return {c.path.stem: read_stream([c.path]) for c in converted}


class BenchSettings(BaseModel):
    """What every benchmark takes: where the InterCode data is read from and where its results file goes."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    intercode: Path = Field(default_factory=default_intercode)
    """InterCode data root (default: $CEB_SHARED/data/intercode, else ../shared beside the checkout)."""
    out: Path = RESULTS
    """Directory for the results file."""


class ServerBench(BenchSettings):
    """A benchmark of the user's running OpenAI-compatible server."""

    base_url: str
    """The server's API root, e.g. http://127.0.0.1:8000/v1."""
    model: str
    """The served model name."""


def bench_config(
    base_url: str | Sequence[str] | None,
    model: str,
    methods: Sequence[str],
    *,
    votes: int = 5,
    concurrency: int = 32,
    timeout_s: float = 600,
    backend: Mapping[str, Any] | None = None,
    **top: Any,
) -> RunConfig:
    """The run every benchmark scores: ``methods`` in one order, ``V = votes``, backend ``openai`` at ``base_url``.

    Args:
        base_url: The server's API root, or one per replica; ``None`` for a backend without one (``vllm``).
        model: The served model name (or the engine's model).
        methods: Methods scored on every stream.
        votes: CEB's hindsight votes ``V``.
        concurrency: Requests in flight per endpoint (``backend.max_concurrency``).
        timeout_s: Per-request timeout (seconds).
        backend: Further backend settings, overriding the above (e.g. ``{"name": "vllm", "engine": {...}}``).
        top: Further top-level settings (``orders``, ``max_active_lanes``, ``hindsight``, ...), overriding the above.

    Raises:
        ConfigError: A setting the configuration refuses.
    """
    section: dict[str, Any] = {"name": "openai", "model": model, "max_concurrency": concurrency, "timeout_s": timeout_s}
    if base_url is not None:
        section["base_url"] = base_url if isinstance(base_url, str) else list(base_url)
    overrides = {"methods": list(methods), "orders": 1, "ceb": {"votes": votes}, **top}
    return load_config(overrides=overrides | {"backend": section | dict(backend or {})})


def finish(
    settings: BenchSettings,
    kind: str,
    result: DataclassInstance | Mapping[str, Any],
    lines: Sequence[str] = (),
    *,
    machine: Mapping[str, Any] | None = None,
    path: Path | None = None,
) -> int:
    """Print a benchmark's figures (``lines``), save ``result`` as ``<out>/<kind>-<UTC>.json``, print where.

    Args:
        settings: The benchmark's settings (``out``: the results folder).
        kind: The results file's prefix and ``benchmark`` entry (:func:`~ceb.bench.result_files.save_results`).
        result: Its record (a frozen dataclass).
        lines: The figures a person reads, printed to stdout before the path.
        machine: The ``machine`` entry; by default :func:`~ceb.bench.machine.machine_info`.
        path: Rewrite this file instead of a new one.

    Returns:
        0 (the exit status).
    """
    if lines:
        print("\n".join(lines))
    print(f"wrote {save_results(settings.out, kind, result, machine or machine_info(), path=path)}")
    return 0


def run_and_save(
    kind: str,
    bench: Callable[[S, Path], Awaitable[DataclassInstance]],
    settings: S,
    *,
    lines: Callable[[Any], Sequence[str]] | None = None,
    machine: Mapping[str, Any] | None = None,
) -> int:
    """Run ``bench(settings, work)`` in a temporary ``work`` folder, then :func:`finish` with its result.

    Args:
        kind: The results file's prefix.
        bench: The benchmark.
        settings: Its settings.
        lines: What to print of the result (:func:`finish`'s ``lines``).
        machine: The ``machine`` entry; by default :func:`~ceb.bench.machine.machine_info`.

    Returns:
        0 (the exit status).
    """
    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        result = anyio.run(bench, settings, Path(tmp))
    return finish(settings, kind, result, lines(result) if lines else (), machine=machine)
