"""The README's main job, end to end on the real InterCode data, through the command line."""

import os
import subprocess
import sys

import orjson
import pytest
from typer.testing import CliRunner

from ceb.bench.commands import BENCHMARKS
from ceb.cli import app
from ceb.data import read_stream
from ceb.pipeline import read_rows
from tests.support.paths import INTERCODE, REPO

runner = CliRunner()


@pytest.fixture(scope="module")
def bash_streams(tmp_path_factory):
    out = tmp_path_factory.mktemp("streams")
    result = runner.invoke(
        app, ["convert", "intercode", "--root", str(INTERCODE), "--out", str(out), "--datasets", "bash"]
    )
    assert result.exit_code == 0, result.output
    return out


def test_convert_writes_one_stream_per_agent(bash_streams):
    names = sorted(p.name for p in bash_streams.glob("*.jsonl"))
    assert names == [
        f"intercode-bash-{m}.jsonl"
        for m in ["chat-bison-001", "gpt-3.5", "gpt-4", "starchat", "text-bison-001", "text-davinci-003", "vicuna"]
    ]


def test_offline_score_on_a_real_stream_prints_and_writes_metrics(bash_streams, tmp_path):
    stream = bash_streams / "intercode-bash-gpt-4.jsonl"
    run = tmp_path / "run"
    result = runner.invoke(app, ["score", str(stream), "--out", str(run)])
    assert result.exit_code == 0, result.output
    assert "ECE" in result.output and "Brier" in result.output and "AUROC" in result.output
    trajs = read_stream([stream])
    n_steps = sum(len(t.steps) for t in trajs)
    rows = list(read_rows(run / "scores.jsonl"))
    assert len(rows) == 2 * n_steps
    assert all(0.0 <= r["score"] <= 1.0 for r in rows)
    # labels in the rows are the stream's, in stream order
    ceb_rows = [r for r in rows if r["method"] == "ceb"]
    assert [r["label"] for r in ceb_rows] == [s.label for t in trajs for s in t.steps]
    # strict order: every precedent comes from an earlier trajectory of the stream
    position = {t.id: i for i, t in enumerate(trajs)}
    for r in ceb_rows:
        assert all(position[p["trajectory"]] < position[r["trajectory"]] for p in r["retrieved"])
    metrics = orjson.loads((run / "metrics.json").read_bytes())
    by = {(m["stream"], m["method"]): m for m in metrics["results"]}
    ceb = by[("intercode-bash-gpt-4", "ceb")]
    assert ceb["n"] == n_steps and ceb["failed"] == 0
    assert 0.0 <= ceb["ece"] <= 1.0 and 0.0 <= ceb["brier"] <= 1.0 and 0.0 <= ceb["auroc"] <= 1.0
    # the offline CEB critic beats its own bank-free version on calibration on this real stream
    assert ceb["ece"] < by[("intercode-bash-gpt-4", "static")]["ece"]
    config = orjson.loads((run / "config.json").read_bytes())
    assert config["config"]["ceb"] == {
        "votes": 5,
        "k": 2,
        "min_valid_votes": None,
        "retriever": "tfidf",
        "repetition_window": 3,
        "repetition_reading": "prefix",
        "repetition_prefix_chars": 40,
        "repetition_prefix_fraction": 0.9,
    }
    assert (run / "banks" / "intercode-bash-gpt-4__ceb.json").is_file()
    # the metrics command recomputes the same numbers from the run directory, with the run's own bins
    again = runner.invoke(app, ["metrics", str(run)])
    assert again.exit_code == 0
    assert orjson.loads((run / "metrics.json").read_bytes()) == metrics
    assert runner.invoke(app, ["metrics", str(run), "--bins", "15"]).exit_code == 0
    assert orjson.loads((run / "metrics.json").read_bytes())["n_bins"] == 15


def test_a_bad_stream_is_refused_before_any_work_with_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"id": "a", "task": "t", "domain": "shell", "steps": [{"state": "", "action": "ls", '
        '"observation": ""}]}\n{"id": "b", "task": "t", "domain": "shell", "steps": []}\n'
    )
    result = runner.invoke(app, ["score", str(bad), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert f"{bad}:2" in result.output and "steps" in result.output
    assert not (tmp_path / "run").exists()


def test_an_existing_run_directory_is_not_overwritten(bash_streams, tmp_path):
    run = tmp_path / "run"
    stream = str(bash_streams / "intercode-bash-gpt-4.jsonl")
    assert runner.invoke(app, ["score", stream, "--out", str(run), "--methods", "ceb"]).exit_code == 0
    result = runner.invoke(app, ["score", stream, "--out", str(run)])
    assert result.exit_code == 2 and "already holds results" in result.output
    (run / "keep.txt").write_text("mine")
    result = runner.invoke(
        app,
        [
            "score",
            str(bash_streams / "intercode-bash-gpt-4.jsonl"),
            "--out",
            str(run),
            "--methods",
            "static",
            "--overwrite",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (run / "keep.txt").read_text() == "mine"  # only our result files are replaced
    assert {r["method"] for r in read_rows(run / "scores.jsonl")} == {"static"}


def test_unknown_backend_and_method_are_named(bash_streams, tmp_path):
    s = str(bash_streams / "intercode-bash-gpt-4.jsonl")
    r = runner.invoke(app, ["score", s, "--out", str(tmp_path / "a"), "--backend", "nope"])
    assert r.exit_code == 2 and "unknown backend 'nope'" in r.output
    assert not (tmp_path / "a").exists()
    r = runner.invoke(app, ["score", s, "--out", str(tmp_path / "b"), "--methods", "ceb,magic"])
    assert r.exit_code == 2 and "unknown method 'magic'" in r.output
    r = runner.invoke(app, ["score", s, "--out", str(tmp_path / "c"), "--backend", "openai"])
    assert r.exit_code == 2 and "base_url" in r.output


def test_the_fast_kernel_and_the_sklearn_reference_give_the_same_run(bash_streams, tmp_path):
    stream = str(bash_streams / "intercode-bash-gpt-3.5.jsonl")
    cfg = tmp_path / "ref.toml"
    cfg.write_text('methods = ["ceb"]\n[ceb]\nretriever = "tfidf-reference"\n')
    assert runner.invoke(app, ["score", stream, "--out", str(tmp_path / "ref"), "--config", str(cfg)]).exit_code == 0
    fast = runner.invoke(app, ["score", stream, "--out", str(tmp_path / "fast"), "--methods", "ceb"])
    assert fast.exit_code == 0

    def rows(run):
        return [{k: v for k, v in r.items() if k not in ("latency_s", "queue_s")} for r in read_rows(run)]

    assert rows(tmp_path / "ref" / "scores.jsonl") == rows(tmp_path / "fast" / "scores.jsonl")


def test_version_prints_the_package_version() -> None:
    from ceb.version import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"ceb {__version__}"


def test_python_dash_m_ceb_is_the_command_line(tmp_path) -> None:
    """``python -m ceb`` works where the scripts directory is not on PATH (it failed: no ceb/__main__.py)."""
    from ceb.version import __version__

    env = os.environ | {"PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "ceb", "--version"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.strip() == f"ceb {__version__}", done.stderr


def test_the_command_line_starts_without_importing_scikit_learn() -> None:
    import subprocess
    import sys

    probe = "import sys, ceb.cli; print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    # Nor does scoring need the openai SDK, which only the client benchmark uses (extra `bench`).
    probe = "import sys, ceb.pipeline, ceb.backends.openai, ceb.stages.assembly; print('openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_bracketed_text_in_help_and_errors_is_printed_as_written(tmp_path) -> None:
    help_text = runner.invoke(app, ["grid", "--help"]).output
    assert "a run config plus a [grid] table" in " ".join(help_text.split())
    grid = tmp_path / "g.toml"
    grid.write_text('methods = ["ceb"]\n')
    result = runner.invoke(app, ["grid", str(grid)])
    assert result.exit_code == 2 and "needs a [grid] table with streams and out" in result.output


def test_common_mistakes_are_one_line_errors_not_tracebacks(bash_streams, tmp_path) -> None:
    import socket

    stream = str(bash_streams / "intercode-bash-gpt-4.jsonl")
    taken = tmp_path / "a-file"
    taken.write_text("x")
    result = runner.invoke(app, ["score", stream, "--out", str(taken)])
    assert result.exit_code == 2 and f"cannot use {taken} as a run directory" in result.output
    assert "Traceback" not in result.output

    run = tmp_path / "run"
    assert runner.invoke(app, ["score", stream, "--out", str(run), "--methods", "static"]).exit_code == 0
    result = runner.invoke(app, ["report", str(run), "--out", str(taken)])
    assert result.exit_code == 2 and f"cannot write the report to {taken}" in result.output

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = runner.invoke(app, ["sim-server", "--port", str(port)])
    assert result.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in result.output


def _commands(group, path=()):  # type: ignore[no-untyped-def]
    """Every (path, click command) of the command tree, groups included."""
    yield path, group
    if hasattr(group, "list_commands"):  # a group (typer ships its own copy of click's classes)
        ctx = group.context_class(group)
        for name in group.list_commands(ctx):
            yield from _commands(group.get_command(ctx, name), (*path, name))


def test_every_short_option_has_a_long_name_and_help_fits_80_columns() -> None:
    import typer.main

    root = typer.main.get_command(app)
    seen = 0
    for path, command in _commands(root):
        for param in command.params:
            opts = [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]
            if any(o.startswith("-") and not o.startswith("--") for o in opts):
                assert any(o.startswith("--") for o in opts), (path, opts)
        if not command.add_help_option:
            continue  # `ceb bench <name> --help` is the benchmark's own help
        text = runner.invoke(app, [*path, "--help"], terminal_width=80, env={"COLUMNS": "80"}).output
        assert text.startswith("Usage:"), (path, text)
        long = [line for line in text.splitlines() if len(line) > 80]
        assert long == [], (path, long)
        seen += 1
    assert seen >= 12  # root, score, grid, metrics, doctor, report, sim-server, convert and its converters, bench


def test_mistyped_methods_and_config_keys_get_a_suggestion_and_the_sweep_form(tmp_path) -> None:
    from ceb.data import write_stream
    from tests.support.builders import step, trajectory

    stream = tmp_path / "s.jsonl"
    write_stream(stream, [trajectory("t0", step("ls", "a", label=1))])
    result = runner.invoke(app, ["score", str(stream), "--out", str(tmp_path / "r"), "--methods", "statc"])
    assert result.exit_code == 2
    assert "unknown method 'statc' (did you mean 'static'?)" in result.output
    assert "ceb-V<v>-k<k> (e.g. ceb-V3-k1" in result.output
    config = tmp_path / "c.toml"
    config.write_text("methds = ['ceb']\n[ceb]\nvotse = 3\n")
    result = runner.invoke(app, ["score", str(stream), "--out", str(tmp_path / "r"), "--config", str(config)])
    assert result.exit_code == 2
    assert "ceb.votse: unknown setting (did you mean 'votes'?)" in result.output
    assert "methds: unknown setting (did you mean 'methods'?)" in result.output
    result = runner.invoke(app, ["score", str(stream), "--out", str(tmp_path / "r"), "--backend", "opnai"])
    assert result.exit_code == 2 and "unknown backend 'opnai' (did you mean 'openai'?)" in result.output
    config.write_text("[ceb]\nzzz = 3\n")  # nothing close: no suggestion, the section's keys instead
    result = runner.invoke(app, ["score", str(stream), "--out", str(tmp_path / "r"), "--config", str(config)])
    assert "ceb.zzz: unknown setting; this section has: votes, k, min_valid_votes" in result.output


def test_bench_help_lists_every_benchmark_and_each_shows_its_own_options() -> None:
    listing = runner.invoke(app, ["bench", "--help"], terminal_width=100).output
    for name in BENCHMARKS.names():  # every registered benchmark is listed
        assert f"  {name} " in listing, listing
    own = runner.invoke(app, ["bench", "client", "--help"])
    assert own.exit_code == 0 and "--port" in own.output and "--requests" in own.output
    routing = runner.invoke(app, ["bench", "routing", "--help"])
    assert routing.exit_code == 0 and "--router" in routing.output and "--priority-root" in routing.output
    prefix = runner.invoke(app, ["bench", "prefix-cache", "--help"])
    assert prefix.exit_code == 0 and "--proxy-port" in prefix.output and "--root" in prefix.output
    scale = runner.invoke(app, ["bench", "scale", "--help"])
    assert scale.exit_code == 0 and "--replicas" in scale.output and "--compare-gc" in scale.output
