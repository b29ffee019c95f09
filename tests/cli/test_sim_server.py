"""ceb sim-server: one option per SimConfig field, and a banner that says it is a simulator."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import typer
from typer.testing import CliRunner

import ceb.sim.server
from ceb.cli.sim_server import sim_server
from ceb.sim import SimConfig, SimServer, serve_sim


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("sim-server")(sim_server)
    app.command("other")(lambda: None)  # two commands, so "sim-server" is addressed by name as in ceb.cli
    return app


def test_every_config_field_is_an_option_with_the_same_default() -> None:
    params = inspect.signature(sim_server).parameters
    for name in SimConfig.model_fields:
        assert name in params, name
        assert params[name].default == getattr(SimConfig(), name), name
    assert {"host", "port"} <= set(params)


def test_options_reach_the_server_and_the_banner_says_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[tuple[SimConfig, str, int]] = []

    def run_briefly(
        config: SimConfig, host: str, port: int, *, on_started: Callable[[SimServer], None], **kw: Any
    ) -> None:
        async def main() -> None:
            async with serve_sim(config, host, 0) as server:
                on_started(server)

        started.append((config, host, port))
        anyio.run(main)

    monkeypatch.setattr(ceb.sim.server, "run_sim_server", run_briefly)  # the command imports it when it runs
    args = ["sim-server", "--port", "9123", "--max-num-seqs", "4", "--time-scale", "0", "--rate-429", "0.1"]
    result = CliRunner().invoke(_app(), [*args, "--seed", "5", "--model", "ceb-simulator-x"])

    assert result.exit_code == 0, result.output
    ((config, host, port),) = started
    assert (host, port) == ("127.0.0.1", 9123)
    assert config == SimConfig(max_num_seqs=4, time_scale=0.0, rate_429=0.1, seed=5, model="ceb-simulator-x")
    assert "ceb SIMULATOR (not a model) on http://127.0.0.1:" in result.output
    assert "rate_429=0.1" in result.output and "never for scoring" in result.output


def test_out_of_range_settings_are_a_usage_error() -> None:
    result = CliRunner().invoke(_app(), ["sim-server", "--rate-500", "2"])
    assert result.exit_code == 2
    assert "--rate-500" in result.output
    # A rule across fields (SimConfig's own validator): a usage error too, not a traceback.
    result = CliRunner().invoke(_app(), ["sim-server", "--rate-500", "0.6", "--rate-429", "0.6"])
    assert result.exit_code == 2 and "fault rates sum to 1.200 > 1" in result.output
