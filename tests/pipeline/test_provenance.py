"""Issue 32 items 4 and 6: an endpoint named is asked (never the offline stand-in), and every run says what scored it.

What scored a run is recorded in ``summary.json`` (``provenance``), shown at the top of the report and named on the
last line of the command's output; a merged and a batch-imported run carry it too.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from typer.testing import CliRunner

from ceb.backends.transport import public_url
from ceb.cli import app
from ceb.cli._common import EXIT_ERROR
from ceb.config import RunConfig, load_config
from ceb.data import write_stream
from ceb.errors import ConfigError, RunError
from ceb.pipeline.batch import export_batch, import_batch
from ceb.pipeline.merge import merge_runs
from ceb.pipeline.rundir import RunDir
from tests.backends.test_llama_cpp import llama_model
from tests.pipeline.test_batch import config as batch_config
from tests.pipeline.test_batch import data, files, respond, run_batch  # noqa: F401 - files is a fixture
from tests.support.builders import step, trajectory
from tests.support.openai_server import OpenAITestServer, serve_openai

runner = CliRunner()


@pytest.fixture
def stream(tmp_path: Path) -> Path:
    path = tmp_path / "s.jsonl"
    write_stream(path, [trajectory(f"t{i}", step("ls", "a", label=1), step("rm x", "b", label=0)) for i in range(3)])
    return path


@pytest.fixture
def nothing_listens() -> str:
    """The base URL of a loopback port with nothing listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def summary(run: Path) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(RunDir(run).summary_file.read_bytes())
    return doc


@pytest.mark.parametrize("where", ["flags", "config file"])
def test_an_endpoint_named_without_a_backend_is_asked_not_the_offline_stand_in(
    stream: Path, tmp_path: Path, nothing_listens: str, where: str
) -> None:
    # Before: exit 0, believable ECE/AUROC from the offline stand-in, "0 requests" on the last line.
    run = tmp_path / "run"
    if where == "flags":
        named = ["--base-url", nothing_listens, "--model", "m"]
    else:
        (tmp_path / "c.toml").write_text(f'[backend]\nbase_url = "{nothing_listens}"\nmodel = "m"\n')
        named = ["--config", str(tmp_path / "c.toml")]
    result = runner.invoke(app, ["score", str(stream), "--out", str(run), *named])
    assert result.exit_code == EXIT_ERROR, result.output
    assert f"preflight: {nothing_listens} cannot be reached" in result.output
    assert "steps scored" not in result.output and not RunDir(run).has_scores


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--backend", "offline", "--base-url", "http://127.0.0.1:9/v1"], "backend 'offline' scores with no model"),
        (["--backend", "offline", "--model", "m"], "model 'm' names a model but no endpoint"),
        (["--model", "m"], "model 'm' names a model but no endpoint"),
    ],
)
def test_an_endpoint_or_model_beside_the_offline_backend_is_refused_in_one_line(
    stream: Path, tmp_path: Path, flags: list[str], message: str
) -> None:
    run = tmp_path / "run"
    result = runner.invoke(app, ["score", str(stream), "--out", str(run), *flags])
    assert result.exit_code == EXIT_ERROR
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not RunDir(run).started and not RunDir(run).has_scores


def test_endpoints_named_in_a_config_file_elsewhere_are_asked_or_refused() -> None:
    grid = load_config(overrides={"critics": [{"name": "a", "base_url": "http://h/v1", "model": "m"}, {"name": "b"}]})
    assert grid.critic_configs()["a"].backend.name == "openai"  # the default backend with a URL: the endpoint
    assert grid.critic_configs()["b"].backend.name == "offline"
    for overrides in (
        {"backend": {"name": "offline"}, "critics": [{"name": "a", "base_url": "http://h/v1"}]},
        {"critics": [{"name": "a", "base_url": "http://h/v1", "backend": "offline"}]},
        {"hindsight": {"base_url": "http://h/v1", "model": "m"}},  # an LLM labeller beside the stand-in critic
        {"baselines": {"actor_base_url": "http://h/v1"}},
    ):
        with pytest.raises(ConfigError, match="'offline'") as refused:
            load_config(overrides=overrides)
        assert "\n" not in str(refused.value)
    # A run recorded before the rule (the stand-in beside a URL) still reads back, for its report and metrics.
    old = RunConfig.model_validate({"backend": {"name": "offline", "base_url": "http://h/v1", "model": "m"}})
    assert old.backend.name == "offline"


def test_an_offline_run_says_so_in_its_summary_report_and_last_line(stream: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = runner.invoke(app, ["score", str(stream), "--out", str(run)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == (
        "scored by: offline (no language model: the model-free stand-ins of ceb.stages.offline scored every step)"
    )
    record = summary(run)["provenance"]
    recorded = orjson.loads(RunDir(run).config_file.read_bytes())
    assert record["ceb_version"] == recorded["ceb_version"]
    assert record["config_sha256"] == recorded["fingerprints"]["config_sha256"]
    assert [(e["role"], e["backend"], e["model"]) for e in record["endpoints"]] == [("critic", "offline", None)]
    assert runner.invoke(app, ["report", str(run), "--boot", "0"]).exit_code == 0
    md = (RunDir(run).report_dir / "report.md").read_text()
    block = md.split("## What scored this run", 1)[1].split("## 1.", 1)[0]
    assert "`offline`, no language model" in block and "These numbers measure no model" in block
    assert record["config_sha256"] in block
    assert md.index("## What scored this run") < md.index("## 1.")
    report = orjson.loads((RunDir(run).report_dir / "report.json").read_bytes())
    assert report["provenance"] == record | {"source": "summary.json"}


@pytest.mark.anyio
async def test_a_run_records_the_served_model_its_version_and_what_ceb_adapted(tmp_path: Path) -> None:
    stream = tmp_path / "s.jsonl"
    trajs = [trajectory(f"t{i}", step(f"ls {i}", "x", label=1), step("pwd", "/", label=0)) for i in range(3)]
    write_stream(stream, trajs)
    async with serve_openai(llama_model, profile="llama.cpp") as server:
        server.root, server.version = "/models/critic-7b", "0.11.0"  # as vLLM's /v1/models and /version say
        (tmp_path / "c.toml").write_text(
            f'[backend]\nbase_url = "{server.base_url}"\nmodel = "{server.model}"\nbackoff_s = 0.0\n'
            '[ceb]\nvotes = 2\n[hindsight]\nsampling = "n"\n'
        )
        run = tmp_path / "run"
        args = ["score", str(stream), "--out", str(run), "--config", str(tmp_path / "c.toml")]
        result = await anyio.to_thread.run_sync(runner.invoke, app, args)
        assert result.exit_code == 0, result.output
        asked = server.identity_requests
    assert asked == 2 + 1  # /v1/models and /version once for the run, and the preflight's /v1/models
    record = summary(run)["provenance"]
    (critic,) = record["endpoints"]
    assert critic["backend"] == "openai" and critic["endpoint"] == [server.base_url]
    assert (critic["model"], critic["root"], critic["server_version"], critic["max_model_len"]) == (
        server.model,
        "/models/critic-7b",
        "0.11.0",
        4096,
    )
    assert critic["weights_digest"] is None  # /models/critic-7b is no folder on this machine
    assert (critic["structured_output"], critic["token_limit_field"]) == ("json_object_schema", "max_tokens")
    assert set(critic["adaptations"]) == {"request_id", "structured_output", "max_tokens", "n"}
    assert record["readout"] == "text"
    last = result.stdout.strip().splitlines()[-1]
    assert last == f"scored by: openai, model {server.model!r} at {server.base_url}, server 0.11.0; readout text"

    assert runner.invoke(app, ["report", str(run), "--boot", "0"]).exit_code == 0
    md = (RunDir(run).report_dir / "report.md").read_text()
    block = md.split("## What scored this run", 1)[1].split("## 1.", 1)[0]
    for shown in (
        f"Critic: `openai`, model `{server.model}` at `{server.base_url}`",
        "weights `/models/critic-7b`",
        "server version `0.11.0`",
        "structured output `json_object_schema`",
        "token field `max_tokens`",
        "ceb sends UUIDs",
        "request of its own",
        "Readout: `text`",
        record["config_sha256"],
    ):
        assert shown in block, (shown, block)


def test_provenance_shows_no_credentials() -> None:
    assert public_url("http://user:s3cret@10.0.0.2:8000/v1?x=1") == "http://10.0.0.2:8000/v1?x=1"
    assert public_url("https://api.openai.com/v1") == "https://api.openai.com/v1"


def test_a_merged_run_carries_its_parts_provenance_and_refuses_parts_of_another_model(
    stream: Path, tmp_path: Path
) -> None:
    parts = [tmp_path / f"part{i}" for i in range(2)]
    for i, part in enumerate(parts):
        result = runner.invoke(app, ["score", str(stream), "--out", str(part), "--shard", f"{i}/2"])
        assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["merge", *map(str, parts), "--out", str(tmp_path / "merged")])
    assert result.exit_code == 0, result.output
    assert summary(tmp_path / "merged")["provenance"] == summary(parts[0])["provenance"]
    assert result.stdout.strip().splitlines()[-1].startswith("scored by: offline")

    doc = summary(parts[1])
    doc["provenance"]["endpoints"][0] |= {"backend": "openai", "model": "other"}
    RunDir(parts[1]).summary_file.write_bytes(orjson.dumps(doc))
    with pytest.raises(RunError, match="scored by another model than part .*: critic backend 'openai'"):
        merge_runs(parts, tmp_path / "again")
    assert not RunDir(tmp_path / "again").started


@pytest.mark.anyio
async def test_a_batch_imported_run_records_the_batch_and_the_model_its_replies_name(
    tmp_path: Path,
    files: dict[str, list[Path]],  # noqa: F811 - the fixture imported above
    openai_server: OpenAITestServer,
) -> None:
    openai_server.responder = respond
    cfg = batch_config(openai_server, ["ppl", "verbalized"])
    done = await export_batch(data(files), files, cfg, tmp_path / "batch")
    assert done.path is not None
    await run_batch(openai_server, done.path, tmp_path / "out.jsonl")
    imported = await import_batch(data(files), tmp_path / "batch", [tmp_path / "out.jsonl"], tmp_path / "run")
    assert imported.path is None
    (entry,) = summary(tmp_path / "run")["provenance"]["endpoints"]
    assert (entry["backend"], entry["endpoint"], entry["model"]) == ("batch", [], openai_server.model)
    assert entry["replied_models"] == [openai_server.model]


@pytest.mark.anyio
async def test_without_model_the_one_model_the_endpoint_lists_is_asked_and_recorded(
    stream: Path, tmp_path: Path
) -> None:
    """--model was required even where GET /v1/models lists exactly one model: that one is used and recorded."""
    (tmp_path / "c.toml").write_text('[backend]\nbackoff_s = 0.0\n[ceb]\nvotes = 2\n[hindsight]\nsampling = "n"\n')
    async with serve_openai(llama_model, profile="llama.cpp") as server:
        run = tmp_path / "run"
        args = [
            "score",
            str(stream),
            "--out",
            str(run),
            "--base-url",
            server.base_url,
            "--config",
            str(tmp_path / "c.toml"),
        ]
        result = await anyio.to_thread.run_sync(runner.invoke, app, args)
        assert result.exit_code == 0, result.output
        sent = {body["model"] for body in server.requests}
    assert sent == {server.model}
    endpoints = summary(run)["provenance"]["endpoints"]
    assert {e["model"] for e in endpoints} == {server.model}
    assert all("the one model GET /models lists (no --model given)" in e["adaptations"]["model"] for e in endpoints)
    assert f"model {server.model!r}" in result.stdout.strip().splitlines()[-1]


@pytest.mark.anyio
@pytest.mark.parametrize(("served", "shown"), [({"a", "b"}, "it serves: a, b"), (None, "no model list")])
async def test_without_model_an_endpoint_listing_other_than_one_model_is_refused(
    served: set[str] | None, shown: str
) -> None:
    from ceb.backends.openai import OpenAITransport
    from ceb.config import BackendConfig
    from ceb.errors import FatalBackendError

    transport = OpenAITransport(BackendConfig(name="openai", base_url="http://127.0.0.1:9/v1"))
    with pytest.raises(FatalBackendError, match=f"no --model given and http://127.0.0.1:9/v1 .*{shown}"):
        transport._only_model("http://127.0.0.1:9/v1", served)
    await transport.aclose()
