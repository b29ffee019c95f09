"""What every command shares: help defaults read from the config, panels in ``--help``, and the one error printer."""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_ERROR, EXIT_IO, Command, config_option, fail
from ceb.data import write_stream
from ceb.errors import ConfigError
from tests.support.builders import step, trajectory

runner = CliRunner()

# Where each flag's setting lands in the run's recorded config.json ("config" section).
RECORDED = {
    "--backend": ("backend", "name"),
    "--methods": ("methods",),
    "--api-key-env": ("backend", "api_key_env"),
    "--max-concurrency": ("backend", "max_concurrency"),
    "--votes": ("ceb", "votes"),
    "--top-k": ("ceb", "k"),
    "--tau": ("hindsight", "temperature"),
    "--bins": ("ece_bins",),
    "--orders": ("orders",),
    "--speculation": ("speculation",),
}


def _help(*command: str) -> str:
    return runner.invoke(app, [*command, "--help"], terminal_width=200, env={"COLUMNS": "200"}).output


def _shown_defaults(text: str) -> dict[str, str]:
    """``--flag -> X`` for every option whose help says "(default: X)"."""
    shown: dict[str, str] = {}
    for line in text.splitlines():
        flag = re.match(r"\s+(?:-\w, )?(--[\w-]+)", line)
        default = re.search(r"\(default: ([^)]*)\)", line)
        if flag and default:
            shown[flag.group(1)] = default.group(1)
    return shown


def test_every_default_score_help_shows_is_the_one_a_run_records(tmp_path: Path) -> None:
    shown = _shown_defaults(_help("score"))
    assert shown.keys() == RECORDED.keys()

    stream = tmp_path / "s.jsonl"
    write_stream(stream, [trajectory("t0", step("ls", "a", label=1), step("rm x", "b", label=0))])
    result = runner.invoke(app, ["score", str(stream), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    recorded = orjson.loads((tmp_path / "run" / "config.json").read_bytes())["config"]
    for flag, path in RECORDED.items():
        value = recorded
        for key in path:
            value = value[key]
        as_typed = ",".join(value) if isinstance(value, list) else str(value)
        assert shown[flag] == as_typed, flag


def _commands(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every leaf command under ``command`` with its path (typer's click objects: no click import needed)."""
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield path, command


def test_no_option_of_any_command_shows_two_defaults() -> None:
    # `batch export --help` said "(default: all six) (default: ceb,static)": the second was the config field's.
    checked = 0
    for path, command in _commands(typer.main.get_command(app), ("ceb",)):
        ctx = command.context_class(command, info_name=path[-1])
        for param in command.params:
            record = param.get_help_record(ctx)
            if record is None:
                continue
            checked += 1
            assert len(re.findall(r"\bdefault\b", record[1], re.IGNORECASE)) <= 1, (" ".join(path), record)
    assert checked > 100  # every command's options were seen


def test_the_methods_batch_export_help_shows_are_the_ones_an_export_records(tmp_path: Path) -> None:
    shown = _shown_defaults(_help("batch", "export"))
    stream = tmp_path / "s.jsonl"
    write_stream(stream, [trajectory("t0", step("ls", "a", label=1))])

    result = runner.invoke(app, ["batch", "export", str(stream), "--model", "m", "--out", str(tmp_path / "b")])

    assert result.exit_code == 0, result.output
    recorded = orjson.loads((tmp_path / "b" / "batch.json").read_bytes())["config"]["methods"]
    assert shown["--methods"] == ",".join(recorded) == "ppl,me,ptrue,cot,verbalized,pro"


def test_serve_help_shows_the_gate_defaults_of_the_config() -> None:
    from ceb.config import GateConfig

    shown = _shown_defaults(_help("serve"))
    gate = GateConfig()
    assert shown["--method"] == gate.method and shown["--max-streams"] == str(gate.max_streams)
    assert float(shown["--allow"]) == gate.allow and float(shown["--block"]) == gate.block


def test_config_option_reads_the_default_and_first_sentence_of_the_field() -> None:
    votes = config_option("ceb.votes")
    assert votes.help == "V: hindsight votes per trajectory (default: 5)."
    assert (
        config_option("hindsight.temperature", help="Hindsight temperature").help
        == "Hindsight temperature (default: 0.7)."
    )
    assert config_option("backend.model").help.startswith("Model name as the endpoint knows it")  # no default: None
    assert "default" not in config_option("backend.model").help
    with pytest.raises(KeyError):
        config_option("ceb.vots")


def test_the_first_screen_of_score_help_holds_the_common_options_and_the_rare_ones_follow_in_panels() -> None:
    text = runner.invoke(app, ["score", "--help"], terminal_width=80, env={"COLUMNS": "80"}).output
    titles = [line for line in text.splitlines() if re.fullmatch(r"\S.*:", line)]
    assert titles == ["Arguments:", "Options:", "Endpoint:", "vLLM engine (--backend vllm):", "CEB and prompts:"]
    first = text[: text.index("\nEndpoint:")]
    for common in ("--out", "--resume", "--config", "--backend", "--methods", "--limit"):
        assert common in first
    for rare in ("--base-url", "--gpu-memory-utilization", "--dtype", "--engine-args", "--votes", "--tau"):
        assert rare not in first


def test_fail_prints_one_error_line_to_stderr_and_gives_the_error_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    exit_ = fail(ConfigError("run.toml:3: ceb.k: must be >= 0 [k]"))
    assert exit_.exit_code == EXIT_ERROR == 2
    full = OSError(errno.ENOSPC, "No space left on device", "/runs/a/scores.jsonl")
    assert fail(full).exit_code == EXIT_IO  # the machine's fault, not the command's: its own code
    busy = OSError(errno.EADDRINUSE, "Address already in use")
    fail(busy, doing="cannot listen on 127.0.0.1:8100")
    fail("runs/a has no scores.jsonl")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "error: run.toml:3: ceb.k: must be >= 0 [k]",  # brackets printed as written
        "error: /runs/a/scores.jsonl: No space left on device; nothing finished is lost; free some space, then run "
        "the same command again",
        "error: cannot listen on 127.0.0.1:8100: Address already in use",
        "error: runs/a has no scores.jsonl",
    ]


@pytest.mark.parametrize(
    ("raised", "line", "code"),
    [
        (
            ConfigError("c.toml:2: backend.name: unknown backend"),
            "error: c.toml:2: backend.name: unknown backend",
            EXIT_ERROR,
        ),
        (
            PermissionError(errno.EACCES, "Permission denied", "/runs/x"),
            "error: /runs/x: Permission denied; nothing finished is lost; fix the permissions, then run the same "
            "command again",
            EXIT_IO,
        ),
    ],
)
def test_an_error_a_command_does_not_report_itself_is_still_one_line(raised: Exception, line: str, code: int) -> None:
    test_app = typer.Typer()

    def boom() -> None:
        raise raised

    test_app.command("boom", cls=Command)(boom)
    test_app.command("other")(lambda: None)  # two commands, so "boom" is addressed by name
    result = runner.invoke(test_app, ["boom"])
    assert result.exit_code == code
    assert result.output.strip() == line and "Traceback" not in result.output


@pytest.mark.parametrize("command", ["relabel", "regenerate"])
def test_a_command_that_needs_a_model_refuses_the_offline_backend_and_defaults_to_an_endpoint(
    tmp_path: Path, command: str
) -> None:
    from ceb.cli._common import model_config

    stream = write_stream(tmp_path / "s.jsonl", [trajectory("a", step("x", label=1))])
    target = [str(stream), "--out", str(tmp_path / "out.jsonl")] if command == "relabel" else [str(tmp_path)]
    result = CliRunner().invoke(app, [command, *target, "--backend", "offline"])
    assert result.exit_code == EXIT_ERROR
    assert result.output.strip().count("\n") == 0
    assert f"error: ceb {command} needs a language model: --backend offline has none" in result.output
    # No backend named anywhere (the config's default is offline): the model is an endpoint.
    endpoint = {"name": None, "base_url": None, "model": None, "api_key_env": None, "max_concurrency": None}
    assert model_config(command, None, {"backend": endpoint}).backend.name == "openai"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    import logging

    import structlog

    from ceb.progress import set_progress

    saved, handlers = structlog.get_config(), list(logging.getLogger().handlers)
    yield
    structlog.configure(**saved)
    set_progress()
    for h in [h for h in logging.getLogger().handlers if h not in handlers]:
        logging.getLogger().removeHandler(h)


def test_the_global_options_are_taken_after_the_command_too_and_json_logs_are_one_object_a_line(
    tmp_path: Path, restore_logging: None
) -> None:
    """`ceb convert ... --log-level info --log-format json` was a usage error: the options came only before it."""
    from tests.support.paths import INTERCODE

    for before, after in (([], ["--log-level", "info", "--log-format", "json"]), (["--log-format", "json"], [])):
        args = [*before, "convert", "intercode", "--root", str(INTERCODE), "--out", str(tmp_path), "--datasets"]
        result = runner.invoke(app, [*args, "bash", *after, "--progress", "off"])
        assert result.exit_code == 0, result.output
        events = [orjson.loads(line) for line in result.stderr.splitlines()]
        if after:  # info events, as JSON objects with an ISO timestamp
            assert events and all(e["level"] == "info" and e["timestamp"].endswith("Z") for e in events), events
        else:
            assert events == []  # the default level, warning, shows no info event
    progress = runner.invoke(app, ["convert", "intercode", "--root", str(INTERCODE), "--progress", "sometimes"])
    assert progress.exit_code == EXIT_ERROR and "progress mode 'sometimes'" in progress.output
