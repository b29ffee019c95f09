"""What the installed benchmarks share: their settings' common fields, the run they score, and how results end.

Every tool scores the run :func:`bench_config` builds, against the user's endpoint or the simulator, and ends in
:func:`run_and_save`: its figures on stdout, its results under ``benchmarks/results`` in the working directory
unless ``--out`` says otherwise; :func:`progress` lines go to stderr as it runs. The InterCode data is read from
``$CEB_SHARED/data/intercode`` (by default ``../shared`` beside the checkout, or beside the working directory).
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
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
    "load_intercode_streams",
    "progress",
    "run_and_save",
]

S = TypeVar("S", bound="BenchSettings")

RESULTS = Path("benchmarks") / "results"
"""Where results go by default, relative to the working directory."""


def default_intercode() -> Path:
    """``$CEB_SHARED/data/intercode``; without ``CEB_SHARED``, ``../shared`` beside the checkout or the working dir."""
    shared = os.environ.get("CEB_SHARED")
    if shared:
        return Path(shared) / "data" / "intercode"
    root = Path(__file__).resolve().parents[2]
    beside = root if (root / "pyproject.toml").is_file() else Path.cwd()
    return beside.parent / "shared" / "data" / "intercode"


def load_intercode_streams(
    root: Path,
    work: Path,
    datasets: Sequence[str] = ("bash", "sql"),
    *,
    first: int | None = None,
    trajectories: int | None = None,
) -> dict[str, list[Trajectory]]:
    """The real InterCode streams converted into ``work``: name -> trajectories.

    ``first`` keeps the first streams by name, ``trajectories`` the first trajectories of each (``None``: all).

    Raises:
        DataError: The InterCode data is missing or malformed.
    """
    converted = sorted(convert_intercode(root, work, datasets=tuple(datasets)), key=lambda c: c.path.stem)
    return {c.path.stem: read_stream([c.path])[:trajectories] for c in converted[:first]}


def progress(line: str) -> None:
    """Print a line of a benchmark's progress to stderr, at once."""
    print(line, file=sys.stderr, flush=True)


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
    model: str | None,
    methods: Sequence[str],
    *,
    votes: int = 5,
    concurrency: int = 32,
    timeout_s: float = 600,
    backend: Mapping[str, Any] | None = None,
    **top: Any,
) -> RunConfig:
    """The run every benchmark scores: ``methods`` in one order, ``V = votes``, backend ``openai`` at ``base_url``.

    ``base_url`` is the API root or one per replica (``None``: a backend without one); ``model`` is ``None`` for
    ``offline``; ``concurrency`` is per endpoint, ``timeout_s`` per request (seconds). ``backend`` (e.g.
    ``{"name": "vllm", "engine": {...}}``) and ``top`` (``orders``, ``max_active_lanes``, ...) override the rest.

    Raises:
        ConfigError: A setting the configuration refuses.
    """
    section: dict[str, Any] = {"name": "openai", "max_concurrency": concurrency, "timeout_s": timeout_s}
    if model is not None:
        section["model"] = model
    if base_url is not None:
        section["base_url"] = base_url if isinstance(base_url, str) else list(base_url)
    overrides = {"methods": list(methods), "orders": 1, "ceb": {"votes": votes}, **top}
    return load_config(overrides=overrides | {"backend": section | dict(backend or {})})


def run_and_save(
    kind: str,
    bench: Callable[[S, Path], Any],
    settings: S,
    *,
    lines: Callable[[Any], Sequence[str]] | None = None,
    machine: Mapping[str, Any] | None = None,
    path: Path | None = None,
) -> int:
    """Run ``bench(settings, work)`` in a temporary ``work`` folder; print its figures, save and say where.

    ``bench`` (a function or an async one) returns its record, a frozen dataclass; ``lines`` gives what a person
    reads of it; ``kind``, ``machine`` (by default :func:`~ceb.bench.machine.machine_info`) and ``path`` are
    :func:`~ceb.bench.result_files.save_results`'s. Returns 0, the exit status.
    """
    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        result: DataclassInstance = (
            anyio.run(bench, settings, work) if inspect.iscoroutinefunction(bench) else bench(settings, work)
        )
    if lines is not None:
        print("\n".join(lines(result)))
    print(f"wrote {save_results(settings.out, kind, result, machine or machine_info(), path=path)}")
    return 0
