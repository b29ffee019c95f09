"""What the benchmarks' command lines share: their parser, where data and results go, and the tests' vLLM server.

Every benchmark runs from an installed ``ceb`` (``ceb bench NAME``): results go to ``benchmarks/results``
under the working directory unless ``--out`` says otherwise, and the InterCode data is read from
``$CEB_SHARED/data/intercode`` (by default ``../shared`` beside the checkout, or beside the working directory
outside one). Only ``--tiny``, which starts the tests' CPU vLLM server with their tiny random-weight model,
needs the checkout's ``tests/support``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio

from ceb.bench.machine import machine_info
from ceb.bench.result_files import save_results
from ceb.errors import ConfigError
from ceb.logs import configure_logging

__all__ = [
    "RESULTS",
    "add_server_options",
    "bench_parser",
    "check_server_options",
    "checkout",
    "checkout_module",
    "cpu_env",
    "default_intercode",
    "require_checkout",
    "run_and_save",
    "tiny_model",
    "tiny_vllm_servers",
]

RESULTS = Path("benchmarks") / "results"
"""Where results go by default, relative to the working directory (:func:`ceb.bench.result_files.save_results`)."""


def checkout() -> Path | None:
    """The checkout this ``ceb`` was imported from (with ``pyproject.toml`` and ``tests/support``), if any."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "tests" / "support").is_dir() else None


def default_intercode() -> Path:
    """``$CEB_SHARED/data/intercode``; without ``CEB_SHARED``, ``../shared`` beside the checkout or the working dir."""
    shared = os.environ.get("CEB_SHARED")
    root = Path(shared) if shared else (checkout() or Path.cwd()).parent / "shared"
    return root / "data" / "intercode"


def bench_parser(name: str, doc: str | None, *, sim_port: bool = False) -> argparse.ArgumentParser:
    """The parser of ``ceb bench <name>``, with ``doc`` as its description and the ``--intercode``/``--out`` options.

    Args:
        name: The benchmark's registered name (:data:`ceb.bench.registry.BENCHMARKS`).
        doc: What it measures and an example command.
        sim_port: Also ``--port``, the simulated server's port (0: a free one).
    """
    ap = argparse.ArgumentParser(
        prog=f"ceb bench {name}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--intercode", type=Path, default=default_intercode(), help="InterCode data root")
    ap.add_argument(
        "--out", type=Path, default=RESULTS, help="directory for the results (default: ./benchmarks/results)"
    )
    if sim_port:
        ap.add_argument("--port", type=int, default=0, help="the simulator's port on 127.0.0.1 (0: a free one)")
    return ap


def require_checkout(
    why: str = "--tiny starts the tests' vLLM server", instead: str = "give a running server instead"
) -> Path:
    """The checkout, for ``--tiny``; checked before a benchmark spends time loading data.

    Args:
        why: What needs the checkout's ``tests/support``, for the message.
        instead: What the user can do without one, for the message.

    Raises:
        ConfigError: This ``ceb`` is not imported from a checkout.
    """
    root = checkout()
    if root is None:
        raise ConfigError(
            f"{why} from the checkout's tests/support, and this ceb is not imported from a checkout; {instead}"
        )
    return root


def add_server_options(ap: argparse.ArgumentParser, url: str = "--base-url", url_help: str = "") -> None:
    """``--tiny`` (start the tests' CPU vLLM server) or ``url`` (a running server's), one required, and ``--model``."""
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--tiny", action="store_true", help="start the tests' CPU vLLM server (needs .venv-vllm)")
    where.add_argument(url, help=url_help or "a running vLLM server's API root, e.g. http://127.0.0.1:8000/v1")
    ap.add_argument("--model", help=f"served model name (with {url})")


def check_server_options(ap: argparse.ArgumentParser, args: argparse.Namespace, url: str = "--base-url") -> None:
    """Exit with a usage error for ``url`` without ``--model``; for ``--tiny``, :func:`require_checkout`."""
    if getattr(args, url.removeprefix("--").replace("-", "_")) and not args.model:
        ap.error(f"{url} needs --model")
    if args.tiny:
        require_checkout()


def run_and_save(
    kind: str,
    bench: Callable[[argparse.Namespace, Path], Awaitable[dict[str, Any]]],
    args: argparse.Namespace,
    *,
    machine: dict[str, Any] | None = None,
) -> int:
    """Run ``bench(args, work)`` in a temporary ``work`` folder, add the machine, save it as ``<kind>-<UTC>.json``.

    Args:
        kind: The results file's prefix (:func:`ceb.bench.result_files.save_results`), e.g. ``early-score``.
        bench: The async benchmark; returns the results document.
        args: The parsed command line (``args.out``: the results folder).
        machine: The ``machine`` entry; by default :func:`~ceb.bench.machine.machine_info`.

    Returns:
        0 (the exit status).
    """
    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        doc = anyio.run(bench, args, Path(tmp))
    doc["machine"] = machine if machine is not None else machine_info()
    print(f"\nwrote {save_results(args.out, kind, doc)}")
    return 0


def checkout_module(module: str) -> ModuleType:
    """The checkout's ``tests.support.<module>`` (the tests' vLLM server, real model, router), imported.

    Raises:
        ConfigError: This ``ceb`` is not imported from a checkout.
    """
    root = require_checkout()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    import importlib

    return importlib.import_module(f"tests.support.{module}")


def tiny_model() -> Path:
    """The tests' tiny random-weight model directory (built and cached on first use).

    Raises:
        ConfigError: This ``ceb`` is not imported from a checkout.
    """
    path: Path = checkout_module("tiny_model").tiny_model_dir()
    return path


def cpu_env() -> dict[str, str]:
    """The environment the tests' vLLM CPU build runs with (``tests.support.vllm_server.cpu_env``).

    Raises:
        ConfigError: This ``ceb`` is not imported from a checkout.
    """
    env: dict[str, str] = checkout_module("vllm_server").cpu_env()
    return env


@contextlib.contextmanager
def tiny_vllm_servers(
    work: Path,
    count: int = 1,
    *,
    extra_args: Sequence[str] = (),
    dev_mode: bool = False,
    port: int | None = None,
) -> Iterator[list[Any]]:
    """``count`` of the tests' real vLLM servers (CPU build, tiny model, 1 GiB KV each), stopped on exit.

    Args:
        work: Folder for their logs (``vllm.log``, or ``vllm-<i>.log`` for several).
        count: Servers started, one after the other.
        extra_args: Extra ``vllm serve`` flags for each.
        dev_mode: ``VLLM_SERVER_DEV_MODE=1`` (adds ``POST /reset_prefix_cache``).
        port: The port of a single server (``None``: a free one).

    Yields:
        The servers (``tests.support.vllm_server.VLLMServer``: ``base_url`` ending in ``/v1``, ``model``).

    Raises:
        ConfigError: This ``ceb`` is not imported from a checkout.
    """
    serve_vllm = checkout_module("vllm_server").serve_vllm
    work.mkdir(parents=True, exist_ok=True)
    model_dir = tiny_model()
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(
                serve_vllm(
                    model_dir,
                    work / ("vllm.log" if count == 1 else f"vllm-{i}.log"),
                    extra_args=extra_args,
                    dev_mode=dev_mode,
                    port=port,
                )
            )
            for i in range(count)
        ]
