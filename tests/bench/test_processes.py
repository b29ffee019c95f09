"""The benchmarks' child processes: the simulator listens where it is told; a fresh process returns its result."""

from __future__ import annotations

import urllib.request

import orjson
import pytest

from ceb.bench.processes import run_fresh, run_fresh_many, sim_process, sim_replicas
from ceb.sim import SimConfig
from tests.support.vllm_server import _free_port as free_port


def test_the_simulator_listens_on_the_port_it_is_given() -> None:
    port = free_port()
    with sim_process(SimConfig(time_scale=0.0), port=port) as url:
        assert url == f"http://127.0.0.1:{port}/v1"
        with urllib.request.urlopen(f"{url}/models", timeout=10) as r:
            assert orjson.loads(r.read())["data"]


def test_a_fresh_process_returns_the_functions_result() -> None:
    assert run_fresh("builtins:dict", {"a": 1, "b": [2]}, timeout_s=60) == {"a": 1, "b": [2]}


def test_a_failed_child_is_an_error_with_its_stderr_and_many_keep_the_order() -> None:
    with pytest.raises(RuntimeError, match="AttributeError"):
        run_fresh("builtins:no_such_function", {}, timeout_s=60)

    docs = run_fresh_many("builtins:dict", [{"i": 0}, {"i": 1}, {"i": 2}], jobs=2)
    assert docs == [{"i": 0}, {"i": 1}, {"i": 2}]
    failed = run_fresh_many("builtins:no_such_function", [{"i": 0}], describe=lambda s: f"spec {s['i']}")
    assert failed[0]["spec"] == {"i": 0} and "AttributeError" in failed[0]["error"]


def test_a_fixed_port_serves_one_replica_only() -> None:
    with pytest.raises(ValueError, match="serves one replica"), sim_replicas(SimConfig(), 2, port=free_port()):
        pass
