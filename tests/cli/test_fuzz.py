"""Issue 24: every option of every command, given absurd and mistyped values, ends without a traceback and with an
exit code of the table in :mod:`ceb.cli._common`.

The commands and options are read from the typer app, so a new option is fuzzed without editing this file. Each
case starts from a valid invocation of its command and changes one option; what would run for long (a server, a
scoring run, a report) is replaced by a stub that returns at once: the options are all read and checked before it.
``ceb bench <name>`` passes its words to the benchmark script's own parser, runs the benchmark, and has no
options here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer.main
from typer.testing import CliRunner

from ceb.backends.batch import read_requests
from ceb.cli import app
from ceb.cli._common import EXIT_ERROR, EXIT_FAILED
from ceb.data import convert_mind2web, write_stream
from ceb.data.converters import REFERENCE_OBSERVATION
from tests.support.builders import step, trajectory

runner = CliRunner()

ALLOWED = {0, EXIT_ERROR}
"""Exit codes any command may end a fuzz case with; ``doctor`` may also say 1 (it cannot run there)."""


def _commands() -> Iterator[tuple[tuple[str, ...], Any]]:
    def walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
        if hasattr(command, "list_commands"):
            for name in command.list_commands(None):
                yield from walk(command.get_command(None, name), (*path, name))
        else:
            yield path, command

    yield from walk(typer.main.get_command(app), ())


COMMANDS = dict(_commands())
FUZZED = {path: command for path, command in COMMANDS.items() if path[0] != "bench"}


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fuzz")
    stream = root / "s.jsonl"
    write_stream(stream, [trajectory(f"t{i}", step("ls", "a", label=1), step("rm x", "b", label=0)) for i in range(3)])
    web = root / "web.jsonl"  # with reference actions: relabel's cases get past its refusal to the endpoint
    write_stream(web, [trajectory("w", step("[CLICK] a", REFERENCE_OBSERVATION + "[a] x -> CLICK", label=1))])
    unlabelled = root / "chat.jsonl"  # no step labels: label's cases get past its refusal to the endpoint
    write_stream(unlabelled, [trajectory("c", step("ls", "a"), step("rm x", "b"))])
    run = root / "run"
    result = runner.invoke(app, ["score", str(stream), "--out", str(run)])
    assert result.exit_code == 0, result.output
    # A scored Mind2Web run: regenerate's cases get past the selection and the references to the endpoint.
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "mind2web"
    convert_mind2web(fixture, fixture / "predictions.jsonl", root / "m2w")
    m2w = root / "m2w-run"
    result = runner.invoke(app, ["score", *sorted(str(f) for f in (root / "m2w").glob("*.jsonl")), "--out", str(m2w)])
    assert result.exit_code == 0, result.output
    grid = root / "grid.toml"
    grid.write_text(f"[grid]\nstreams = ['{stream}']\nout = '{root / 'grid-run'}'\n")
    (root / "garbage.json").write_text('{"ceb": {"votes": ')
    (root / "garbage.toml").write_text("[ceb\nvotes = = 3\n")
    (root / "empty").mkdir()
    batch = root / "batch"
    result = runner.invoke(app, ["batch", "export", str(stream), "--model", "m", "--out", str(batch)])
    assert result.exit_code == 0, result.output
    failed = {"status_code": 500, "request_id": "r", "body": None}
    text = '{"reasoning": ["ok"], "confidence": 70}'  # cot's steps score (a run of failures only exits 1)
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    cot = {"status_code": 200, "request_id": "r", "body": {"id": "c", "model": "m", "choices": [choice]}}
    lines = [
        orjson.dumps({"id": "x", "custom_id": r.custom_id, "response": cot, "error": None})
        if "|cot|" in r.custom_id
        else orjson.dumps({"id": "x", "custom_id": r.custom_id, "response": failed, "error": {"message": "down"}})
        for r in read_requests(batch / "round-1.jsonl")
    ]
    (root / "batch-out.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    result = runner.invoke(
        app, ["batch", "import", str(batch), str(root / "batch-out.jsonl"), "--out", str(root / "b")]
    )
    assert result.exit_code == 0, result.output
    return {
        "root": root,
        "stream": stream,
        "web": web,
        "unlabelled": unlabelled,
        "run": run,
        "grid": grid,
        "batch": batch,
        "m2w": m2w,
    }


def _valid(path: tuple[str, ...], place: dict[str, Path], case: Path) -> list[str]:
    """A valid invocation of the command at ``path``: the base each case changes one option of."""
    root = place["root"]
    return {
        ("score",): [str(place["stream"]), "--out", str(case / "run")],
        ("grid",): [str(place["grid"])],
        ("metrics",): [str(place["run"])],
        ("merge",): [str(place["run"]), "--out", str(case / "merged")],
        ("report",): [str(place["run"]), "--out", str(case / "report")],
        ("export",): [str(place["run"]), "--out", str(case / "scores.csv")],
        ("batch", "export"): [str(place["stream"]), "--model", "m", "--out", str(case / "batch")],
        ("batch", "import"): [str(place["batch"]), "--out", str(case / "run")],
        ("doctor",): ["--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--timeout", "2"],
        # Nothing listens on port 9: the preflight refuses at once (exit 2), after every option is read.
        ("relabel",): [
            str(place["web"]),
            "--out",
            str(case / "j.jsonl"),
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        ("label",): [
            str(place["unlabelled"]),
            "--out",
            str(case / "labelled.jsonl"),
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        # A scored Mind2Web run: planned and its references read, then the preflight to port 9 refuses (exit 2).
        ("regenerate",): [
            str(place["m2w"]),
            "--out",
            str(case / "regen"),
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        # The rendered prompts of the scored Mind2Web run's first stream: no endpoint, so it exits 0.
        ("prompts",): [str(sorted((root / "m2w").glob("*.jsonl"))[0])],
        ("serve",): ["--in-memory", "--port", "0"],
        ("sim-server",): ["--port", "0"],
        ("convert", "intercode"): ["--root", str(root / "empty"), "--out", str(case / "streams")],
        ("convert", "mind2web"): ["--tasks", str(root / "empty"), "--out", str(case / "streams")],
        ("convert", "amex"): ["--episodes", str(root / "empty"), "--out", str(case / "streams")],
        ("convert", "chat"): ["--transcripts", str(root / "empty"), "--out", str(case / "streams")],
        ("convert", "inspect"): ["--logs", str(root / "empty"), "--out", str(case / "streams")],
    }[path]


def _values(option: Any, place: dict[str, Path]) -> list[str]:
    """Absurd and mistyped values for ``option``: numbers for a number, files for a path, both for text."""
    root = place["root"]
    numbers = ["-1", "0", "1e30", str(10**30), "inf", "-inf", "nan", ""]
    paths = [
        "",
        str(root / "empty"),  # a directory where a file is meant
        str(root / "missing.jsonl"),
        str(root / "garbage.json"),
        str(root / "garbage.toml"),
        str(place["stream"]),  # a file where a directory is meant
    ]
    # A number past 64 bits and a full-width digit in an i/N form (--shard, issue 33): a usage error, never a crash.
    text = ["", "x,,y", "'unbalanced", "-1", "1e30", "nan", str(root / "empty"), "0/" + "9" * 20, "\uff11/3"]
    annotation = option.type_descriptor.annotation
    if annotation in (int, float):
        return numbers
    if annotation is Path:
        return paths
    return text


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stub what would run for long once the options are read: servers, scoring, the report."""

    async def no_server(*args: Any, **kwargs: Any) -> None:
        return None

    def nothing(*args: Any, **kwargs: Any) -> Any:
        return None

    class NoGate:  # the gate's own settings are checked by load_config before it
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        async def __aenter__(self) -> NoGate:
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr("ceb.serve.app.run_server", no_server)
    monkeypatch.setattr("ceb.gate.Gate", NoGate)
    monkeypatch.setattr("ceb.sim.server.run_sim_server", nothing)
    monkeypatch.setattr("ceb.cli.score.score_and_report", nothing)
    monkeypatch.setattr("ceb.cli.grid.score_and_report", nothing)
    monkeypatch.setattr("ceb.eval.report.build_report", lambda *a, **k: Path("report"))


def test_every_command_is_fuzzed_but_bench() -> None:
    assert {path[0] for path in FUZZED} == {
        "score", "grid", "merge", "metrics", "doctor", "sim-server", "report", "export", "serve", "convert", "relabel",
        "regenerate", "label",
        "batch", "prompts",
    }  # fmt: skip
    # A benchmark starts servers and measures for minutes, so it is not fuzzed; its options are its settings' fields,
    # which refuse what they do not hold (tests/cli/test_options.py).
    assert all(command.params for path, command in COMMANDS.items() if path[0] == "bench")


@pytest.mark.slow  # every option of every command, several values each: up to 1.5 minutes a command, loaded
@pytest.mark.parametrize("path", sorted(FUZZED), ids=" ".join)
def test_absurd_values_of_every_option_give_no_traceback(
    path: tuple[str, ...], place: dict[str, Path], tmp_path: Path, quick: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a value taken as a relative path lands here, not in the checkout
    command = FUZZED[path]
    options = [p for p in command.params if p.param_type_name == "option" and not p.is_flag]
    assert options or path == ("serve",), path
    allowed = ALLOWED | ({EXIT_FAILED} if path == ("doctor",) else set())
    failures = []
    for i, option in enumerate(options):
        for j, value in enumerate(_values(option, place)):
            case = tmp_path / f"{i}-{j}"
            args = [*path, *_valid(path, place, case), option.opts[0], value]
            result = runner.invoke(app, args)
            crashed = result.exc_info is not None and result.exc_info[0] is not SystemExit
            if crashed or result.exit_code not in allowed or "Traceback" in result.output:
                kind = result.exc_info[0].__name__ if crashed and result.exc_info else ""
                failures.append(f"{' '.join(args[len(path) :])!r}: exit {result.exit_code} {kind}")
    assert not failures, "\n".join(failures)
