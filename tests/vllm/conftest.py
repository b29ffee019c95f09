"""The real vLLM server for ``tests/vllm``: one per session, started from ``.venv-vllm``, stopped at the end.

Without ``.venv-vllm`` (built by ``.ci/install-vllm``) these tests are skipped with the reason, unless
``CEB_REQUIRE_VLLM=1`` is set: then they fail, so a CI run that sets it can never pass by skipping them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.tiny_model import tiny_model_dir
from tests.support.vllm_server import VLLM_PYTHON, VLLMServer, serve_vllm

REQUIRE_ENV = "CEB_REQUIRE_VLLM"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if VLLM_PYTHON.is_file() or os.environ.get(REQUIRE_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"no vLLM: {VLLM_PYTHON} is missing (run .ci/install-vllm; CI sets {REQUIRE_ENV}=1)")
    for item in items:
        if "vllm" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """A real vLLM server on loopback serving the tiny random-weight model; fails when it cannot start."""
    if not VLLM_PYTHON.is_file():
        pytest.fail(f"{REQUIRE_ENV}=1 but {VLLM_PYTHON} is missing: run .ci/install-vllm")
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with serve_vllm(tiny_model_dir(), log) as server:
        yield server
