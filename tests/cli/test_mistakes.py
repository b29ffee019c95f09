"""Issue 24 item 6: each CLI or config mistake the red team found ends as one line and the documented exit code."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_ERROR
from ceb.data import write_stream
from tests.support.builders import step, trajectory

runner = CliRunner()


@pytest.fixture
def stream(tmp_path: Path) -> Path:
    path = tmp_path / "s.jsonl"
    write_stream(path, [trajectory(f"t{i}", step("ls", "a", label=1), step("rm x", "b", label=0)) for i in range(3)])
    return path


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def one_line_error(args: list[str], *, code: int = EXIT_ERROR) -> str:
    """Run ``ceb args``; assert no traceback, exit ``code`` and an error message; return the output."""
    result = runner.invoke(app, args)
    assert result.exc_info is None or result.exc_info[0] is SystemExit, result.exc_info
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert "error" in result.output.lower(), result.output
    return result.output


@pytest.mark.parametrize("command", [["serve", "--in-memory"], ["sim-server"]])
@pytest.mark.parametrize("port", ["65536", "99999", "-1"])
def test_a_port_out_of_range_is_a_usage_error(command: list[str], port: str) -> None:
    assert "--port" in one_line_error([*command, "--port", port])


@pytest.mark.parametrize("command", [["serve", "--in-memory"], ["sim-server"]])
def test_a_port_in_use_is_one_line(command: list[str], busy_port: int) -> None:
    output = one_line_error([*command, "--port", str(busy_port)])
    assert f"127.0.0.1:{busy_port}" in output and "in use" in output


def test_metrics_bins_zero_is_a_usage_error(stream: Path, tmp_path: Path) -> None:
    assert runner.invoke(app, ["score", str(stream), "--out", str(tmp_path / "run")]).exit_code == 0
    assert "--bins" in one_line_error(["metrics", str(tmp_path / "run"), "--bins", "0"])


def test_metrics_on_a_corrupt_config_reads_with_the_defaults(stream: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert runner.invoke(app, ["score", str(stream), "--out", str(run), "--bins", "7"]).exit_code == 0
    (run / "config.json").write_text("{garbage")
    result = runner.invoke(app, ["metrics", str(run)])  # RunDir.recorded_or_default: a reader of a finished run
    assert result.exc_info is None or result.exc_info[0] is SystemExit, result.exc_info
    assert result.exit_code == 0 and "ECE over 10 equal-width bins" in result.output


def test_an_unbalanced_quote_in_engine_args_is_a_usage_error(stream: Path, tmp_path: Path) -> None:
    output = one_line_error(["score", str(stream), "--out", str(tmp_path / "r"), "--engine-args", "'--x 1"])
    assert "--engine-args" in output and "quotation" in output


@pytest.mark.parametrize(
    "flags",
    [
        ["-V", str(10**23)],  # overflowed the run's fingerprint
        ["--top-k", str(10**9)],
        ["--orders", "100000000"],  # hung at done=0
        ["--tau", "inf"],
        ["--tau", "nan"],
        ["--bins", "0"],
        ["--max-concurrency", str(10**9)],
        ["--methods", ",,"],  # ran nothing and exited 0
    ],
)
def test_absurd_settings_on_the_command_line_stop_before_any_work(
    flags: list[str], stream: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    assert "bad configuration" in one_line_error(["score", str(stream), "--out", str(run), *flags])
    assert not run.exists()


@pytest.mark.parametrize(
    "toml",
    [
        "[ceb]\nvotes = 1000000000000\n",
        "methods = []\n",
        "[ceb]\ntau = inf\n",
        "[backend]\ntimeout_s = nan\n",
        "[critic]\ntemperature = 100\n",
        "[gate]\nmax_streams = 10000000000\n",
        "[backend.engine]\nmax_model_len = 1000000000000\n",
        "[bank]\npolicy = 'window'\nmax_records = 100000000000000\n",
    ],
)
def test_absurd_settings_in_a_config_file_stop_before_any_work(toml: str, stream: Path, tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(toml)
    run = tmp_path / "run"
    output = one_line_error(["score", str(stream), "--out", str(run), "--config", str(config)])
    assert str(config) in output
    assert not run.exists()


def test_an_empty_out_is_refused_not_the_current_directory(
    stream: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert "--out is empty" in one_line_error(["score", str(stream), "--out", ""])
    assert "--out is empty" in one_line_error(["score", str(stream), "--out="])
    assert not (tmp_path / "scores.jsonl").exists()


def test_grid_streams_that_are_not_paths_are_named(tmp_path: Path) -> None:
    grid = tmp_path / "g.toml"
    grid.write_text("[grid]\nstreams = [1, 2]\nout = 'g'\n")
    assert str(grid) in one_line_error(["grid", str(grid)])


def test_convert_out_onto_a_file_is_one_line(stream: Path) -> None:
    from tests.support.paths import INTERCODE

    args = ["convert", "intercode", "--root", str(INTERCODE), "--out", str(stream), "--datasets", "bash"]
    assert str(stream) in one_line_error(args)


def test_a_stream_without_labels_says_so_and_explains_no_absent_row(tmp_path: Path) -> None:
    stream = tmp_path / "unlabelled.jsonl"
    write_stream(stream, [trajectory(f"t{i}", step("ls", "a"), step("rm x", "b")) for i in range(3)])
    result = runner.invoke(app, ["score", str(stream), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    # No table of n/a: what the scores say without labels, and why calibration is not measured.
    assert "No labelled step: the scores without labels" in output and "calibration cannot be measured" in output
    assert "n/a" not in output and "base-rate" not in output


def test_off_a_terminal_the_table_keeps_whole_stream_names(tmp_path: Path) -> None:
    names = [f"intercode-bash-some-very-long-agent-name-of-a-fine-tuned-model-{i}" for i in range(3)]
    args = ["score"]
    for name in names:
        write_stream(tmp_path / f"{name}.jsonl", [trajectory("t", step("ls", "a", label=1), step("rm", "b", label=0))])
        args.append(str(tmp_path / f"{name}.jsonl"))
    result = runner.invoke(app, [*args, "--orders", "3", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert all(name in result.output for name in names), result.output


def test_prompts_of_a_step_past_the_trajectory_is_refused_not_silent(stream: Path) -> None:
    line = one_line_error(["prompts", str(stream), "--step", "9"])
    assert "no step 9 in the chosen trajectory: the longest has 2 steps (0 to 1)" in line


def test_prompts_into_a_reader_that_leaves_early_exits_0_quietly(tmp_path: Path) -> None:
    import subprocess
    import sys

    big = tmp_path / "big.jsonl"  # more than a pipe holds, so the writer meets the closed pipe
    write_stream(big, [trajectory("t", *[step(f"ls {j}", "x" * 20_000, label=1) for j in range(10)])])
    repo = Path(__file__).resolve().parents[2]
    with subprocess.Popen(
        [sys.executable, str(repo / "run.py"), "prompts", str(big)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=repo,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith(b"=== ceb critic request")
        proc.stdout.close()  # `| head -1`
        assert proc.wait(timeout=120) == 0
        assert proc.stderr.read() == b""


def test_an_unreadable_transcript_file_is_named_not_a_disk_fault(tmp_path: Path) -> None:
    line = one_line_error(["convert", "chat", "--transcripts", "/proc/self/mem", "--out", str(tmp_path / "o")])
    assert "/proc/self/mem:0: field <file>: cannot read the file: Input/output error" in line
    assert "check the disk" not in line
