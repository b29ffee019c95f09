"""``ceb grid --ray``: shards as Ray tasks on a local cluster; a killed worker's shard resumes; the merge is the run.

The cluster is started by this module (``ray.init`` on 127.0.0.1, 2 CPUs); ``ceb grid --ray local`` run in this
process keeps that connection. A watcher kills the Ray worker of the first shard seen mid-run (its pid is in the
part's lock file, :mod:`ceb.dirlock`) with SIGKILL; Ray runs the task again and the retry must resume the part:
it keeps the rows already on disk and scores only the rest. The merged run must equal an unsharded run's, as in
``tests/pipeline/test_shard.py``: the offline backend is deterministic and writes no timings, so the sorted rows,
the banks and the metrics agree byte for byte.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_ERROR, EXIT_FAILED
from ceb.data import write_stream
from ceb.pipeline.rundir import RunDir
from tests.support.builders import step, trajectory

_NO_RAY = "Ray is not installed (pip install -e '.[ray]'); CI installs it"

runner = CliRunner()

TRAJECTORIES = 150
SHARDS = 3


def _grid(root: Path) -> Path:
    (root / "data").mkdir(parents=True)
    for s in ("alpha", "beta", "gamma"):
        trajs = [
            trajectory(
                f"{s}{i}",
                *(
                    step(f"grep -r item{i % 7} /data/{t}", f"line {i * t % 5}", state=f"$ {t}", label=(i + t) % 2)
                    for t in range(4)
                ),
            )
            for i in range(TRAJECTORIES)
        ]
        write_stream(root / "data" / f"{s}.jsonl", trajs)
    grid = root / "grid.toml"
    grid.write_text('methods = ["ceb", "static"]\norders = 2\n[grid]\nstreams = ["data/*.jsonl"]\nout = "runs/g"\n')
    return grid


def _lines(path: Path) -> list[bytes]:
    return sorted(path.read_bytes().splitlines())


def _assert_same_run(merged: Path, whole: Path) -> None:
    """The merged parts are the unsharded run: rows (sorted), banks, metrics and counts (test_shard's check)."""
    out, base = RunDir(merged), RunDir(whole)
    assert _lines(out.scores) == _lines(base.scores)
    assert _lines(out.hindsight) == _lines(base.hindsight)
    banks = sorted(p.name for p in (base.path / base.BANKS).iterdir())
    assert banks and sorted(p.name for p in (out.path / out.BANKS).iterdir()) == banks
    for name in banks:
        assert (out.path / out.BANKS / name).read_bytes() == (base.path / base.BANKS / name).read_bytes(), name
    assert orjson.loads(out.metrics_file.read_bytes()) == orjson.loads(base.metrics_file.read_bytes())
    assert out.recorded_shard() is None
    assert out.record()["fingerprints"] == base.record()["fingerprints"]
    summary, ref = out.recorded_summary(), base.recorded_summary()
    assert summary is not None and ref is not None and summary["status"] == "finished"
    for count in ("steps_scored", "steps_reused", "trajectories_voted", "requests"):
        assert summary[count] == ref[count], count


class _Killer(threading.Thread):
    """Kills, with SIGKILL, the Ray worker of the first part seen mid-run: rows on disk, no summary.json yet."""

    def __init__(self, parts: Path, min_rows: int = 40) -> None:
        super().__init__(daemon=True)
        self.parts, self.min_rows = parts, min_rows
        self.victim: Path | None = None
        self.pid = 0
        self.rows_at_kill = 0
        self.stop = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + 240
        while not self.stop.is_set() and time.monotonic() < deadline:
            for part in sorted(self.parts.glob("shard*")) if self.parts.is_dir() else []:
                run = RunDir(part)
                if run.summary_file.exists() or not run.scores.exists():
                    continue
                rows = run.scores.read_bytes().count(b"\n")
                pid = (part / RunDir.LOCK).read_text().strip() if (part / RunDir.LOCK).exists() else ""
                if rows >= self.min_rows and pid.isdigit():
                    os.kill(int(pid), signal.SIGKILL)
                    self.victim, self.pid, self.rows_at_kill = part, int(pid), rows
                    return
            time.sleep(0.005)


RUN_PY = Path(__file__).resolve().parents[2] / "run.py"


def _interrupted_launch(grid: Path, out: Path, signum: int, min_rows: int) -> tuple[int, str]:
    """``ceb grid --ray local`` in its own process, sent ``signum`` once a part holds ``min_rows`` rows.

    Returns its exit code and output (stdout and stderr).
    """
    env = {**os.environ, "RAY_memory_monitor_refresh_ms": "0", "NO_COLOR": "1"}
    cmd = [sys.executable, str(RUN_PY), "grid", str(grid), "--ray", "local", "--shards", str(SHARDS), "--out", str(out)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            rows = [f.read_bytes().count(b"\n") for f in (out / RunDir.PARTS).glob("*/scores.jsonl")]
            if rows and max(rows) >= min_rows:
                break
            time.sleep(0.01)
        proc.send_signal(signum)
        output = proc.communicate(timeout=120)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, output


@pytest.mark.slow  # a Ray cluster's launch, kill and resume: about 45 s apiece on a loaded machine
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_launch_keeps_the_parts_and_they_finish_by_hand(tmp_path: Path, signum: int) -> None:
    """``--ray local`` in a process of its own (its own Ray instance, stopped at exit), interrupted mid-run.

    By Ctrl-C, or by SIGTERM as a scheduler or ``timeout`` sends it (``ray.init`` installs a SIGTERM handler of its
    own in the driver, ``sys.exit(15)``; the launch must keep ceb's). First in the module: its Ray instance is gone
    before the module's cluster starts (two at once on a 2-core machine only slow each other). The parts are then
    finished by hand, as docs/scale-out.md says, without Ray.
    """
    pytest.importorskip("ray", reason=_NO_RAY)
    grid = _grid(tmp_path)
    out = tmp_path / "on-ray"
    code, output = _interrupted_launch(grid, out, signum, min_rows=40)
    if code != 130 and "You have likely discovered a bug in Ray" in output:
        # Seen in one of four CI runs: Ray 2.60's core worker failed its own check (task_manager.cc,
        # CompletePendingTask) as the interrupted driver cancelled a task whose reply was arriving, and aborted the
        # driver (exit 1). Ray's bug, not ceb's; reported as such rather than passed (docs/not-done.md).
        pytest.xfail(f"Ray aborted the interrupted driver itself (exit {code}): {output[-400:]}")
    assert code == 130, output
    assert "interrupted" in output and f"--ray local --resume --out {out}" in output, output
    assert not RunDir(out).started  # nothing merged
    parts = [RunDir(out).part(i, SHARDS) for i in range(SHARDS)]
    assert any(p.has_scores for p in parts)
    for i, part in enumerate(parts):  # by hand: a part that started is resumed, one that did not is started
        again = ["--resume"] if part.started else []
        result = runner.invoke(app, ["grid", str(grid), "--shard", f"{i}/{SHARDS}", "--out", str(part.path), *again])
        assert result.exit_code == 0, result.output
    kept = [(p.recorded_summary() or {}).get("steps_resumed", 0) for p in parts]
    assert any(k > 0 for k in kept), kept  # what the interrupted launch scored was kept, not scored again
    merged = runner.invoke(app, ["merge", *[str(p.path) for p in parts], "--out", str(out)])
    assert merged.exit_code == 0, merged.output
    whole = tmp_path / "whole"
    assert runner.invoke(app, ["grid", str(grid), "--out", str(whole)]).exit_code == 0
    _assert_same_run(out, whole)


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    """A local Ray cluster of 2 CPUs on loopback, for this module; ``ceb grid --ray`` in this process joins it."""
    ray = pytest.importorskip("ray", reason=_NO_RAY)
    # Ray's own OOM killer off: on a machine whose memory others fill, it killed shard workers at random (each
    # retry resumed, but this test must know which worker died and why). A small object store: tasks return
    # a few numbers.
    started = time.perf_counter()
    with pytest.MonkeyPatch.context() as env:  # read by the raylet that ray.init starts
        env.setenv("RAY_memory_monitor_refresh_ms", "0")
        context = ray.init(
            num_cpus=2,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
            object_store_memory=128 * 1024**2,
        )
    sys.stderr.write(f"ray.init took {time.perf_counter() - started:.1f} s\n")
    yield context
    ray.shutdown()


def _killed_launch(grid: Path, out: Path, *extra: str) -> tuple[object, _Killer]:
    killer = _Killer(out / RunDir.PARTS)
    killer.start()
    try:
        result = runner.invoke(
            app, ["grid", str(grid), "--ray", "local", "--shards", str(SHARDS), "--out", str(out), *extra]
        )
    finally:
        killer.stop.set()
        killer.join()
    return result, killer


@pytest.mark.slow  # a Ray cluster's launch, kill and resume: about 45 s apiece on a loaded machine
def test_a_killed_shard_resumes_and_the_merge_is_the_unsharded_run(tmp_path: Path, cluster: object) -> None:
    grid = _grid(tmp_path)
    whole = tmp_path / "whole"
    assert runner.invoke(app, ["grid", str(grid), "--out", str(whole)]).exit_code == 0
    out = tmp_path / "on-ray"
    started = time.perf_counter()
    result, killer = _killed_launch(grid, out)
    sys.stderr.write(f"ceb grid --ray with one kill took {time.perf_counter() - started:.1f} s\n")
    assert result.exit_code == 0, result.output
    assert killer.victim is not None, "no shard was caught mid-run"
    with pytest.raises(ProcessLookupError):
        os.kill(killer.pid, 0)  # the worker is gone
    # The retry resumed the part: it kept what the killed worker had written and scored only the rest.
    summary = RunDir(killer.victim).recorded_summary()
    assert summary is not None and summary["status"] == "finished"
    # Kept: the steps of every trajectory finished before the kill (a trajectory cut mid-way is scored again).
    assert 0 < summary["steps_resumed"] < summary["steps_scored"], summary
    victim = RunDir(killer.victim).recorded_shard()
    assert victim is not None
    name = f"{victim['index']}/{victim['count']}"
    assert f"shard {name} done:" in result.output and "resumed with" in result.output
    resumed = [line for line in result.output.splitlines() if "resumed with" in line]
    assert len(resumed) == 1 and resumed[0].startswith(f"shard {name} done:"), result.output
    _assert_same_run(out, whole)
    parts = RunDir(out).parts()
    assert [p.recorded_shard() for p in parts] == [{"index": i, "count": SHARDS} for i in range(SHARDS)]


@pytest.mark.slow  # a Ray cluster's launch, kill and resume: about 45 s apiece on a loaded machine
def test_a_shard_out_of_retries_is_kept_and_resume_finishes_the_run(tmp_path: Path, cluster: object) -> None:
    grid = _grid(tmp_path)
    out = tmp_path / "on-ray"
    result, killer = _killed_launch(grid, out, "--ray-retries", "0")
    assert killer.victim is not None, "no shard was caught mid-run"
    assert result.exit_code == EXIT_FAILED, result.output
    victim = RunDir(killer.victim).recorded_shard()
    assert victim is not None
    name = f"{victim['index']}/{victim['count']}"
    assert f"shard {name} failed" in result.output
    assert f"--shard {name} --out {killer.victim} --resume" in result.output  # how to finish it by hand
    assert not RunDir(out).started  # nothing merged
    kept = killer.rows_at_kill
    assert RunDir(killer.victim).scores.read_bytes().count(b"\n") >= kept  # the killed worker's rows are kept
    finished = [p for p in RunDir(out).parts() if p.path != killer.victim]
    assert all((p.recorded_summary() or {}).get("status") == "finished" for p in finished)
    # A second launch without --resume is refused; with it, the finished parts are kept and the other resumes.
    refused = runner.invoke(app, ["grid", str(grid), "--ray", "local", "--out", str(out)])
    assert refused.exit_code == EXIT_ERROR and "--resume" in refused.output, refused.output
    again = runner.invoke(app, ["grid", str(grid), "--ray", "local", "--out", str(out), "--resume"])
    assert again.exit_code == 0, again.output
    summary = RunDir(killer.victim).recorded_summary()
    assert summary is not None and 0 < summary["steps_resumed"] < summary["steps_scored"]
    whole = tmp_path / "whole"
    assert runner.invoke(app, ["grid", str(grid), "--out", str(whole)]).exit_code == 0
    _assert_same_run(out, whole)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ray", "10.0.0.1"], "give local"),
        (["--ray", "local", "--shard", "0/2"], "leave out --shard"),
        (["--shards", "2"], "goes with --ray"),
    ],
)
def test_ray_options_are_checked_before_ray_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # importing it would fail: none of these may get that far
    (tmp_path / "s.jsonl").write_bytes(b"")
    grid = tmp_path / "grid.toml"
    grid.write_text('[grid]\nstreams = ["s.jsonl"]\nout = "g"\n')
    result = runner.invoke(app, ["grid", str(grid), *args])
    assert result.exit_code == EXIT_ERROR and message in result.output, result.output


def test_without_ray_the_error_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    grid = _grid(tmp_path)
    result = runner.invoke(app, ["grid", str(grid), "--ray", "local"])
    assert result.exit_code == EXIT_ERROR, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "pip install -e '.[ray]' in ceb's checkout" in lines[0], result.output
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_bad_input_in_the_shards_is_reported_as_without_ray(tmp_path: Path, cluster: object) -> None:
    grid = _grid(tmp_path)
    with (tmp_path / "data" / "beta.jsonl").open("a") as f:
        f.write('{"id": "broken"\n')  # every shard reads every stream: each task raises the same error, not retried
    out = tmp_path / "on-ray"
    result = runner.invoke(app, ["grid", str(grid), "--ray", "local", "--shards", "2", "--out", str(out)])
    assert result.exit_code == EXIT_ERROR, result.output
    plain = runner.invoke(app, ["grid", str(grid), "--out", str(tmp_path / "plain")])
    assert plain.exit_code == EXIT_ERROR, plain.output
    # The error itself, as the shard raised it (pickled across the Ray worker), the same as in one process.
    assert "beta.jsonl:151" in plain.output
    assert result.output[result.output.index("error:") :] == plain.output[plain.output.index("error:") :]
    assert "Traceback" not in result.output and not RunDir(out).started


@pytest.mark.slow  # a Ray cluster's launch, kill and resume: about 45 s apiece on a loaded machine
def test_a_merge_cut_short_is_redone_by_resume_and_the_parts_are_kept(tmp_path: Path, cluster: object) -> None:
    """Every shard finished, the merge into OUT stopped half-way (Ctrl-C, a full disk): ``--resume`` merges again.

    The interrupted launch's own message says to continue with ``--resume``; the merged files come from the parts
    alone, so a merge without its ``summary.json`` is redone, never answered with ``--overwrite`` (which would
    delete every part's results).
    """
    grid = _grid(tmp_path)
    out = tmp_path / "on-ray"
    for i in range(SHARDS):
        part = RunDir(out).part(i, SHARDS).path
        done = runner.invoke(app, ["grid", str(grid), "--shard", f"{i}/{SHARDS}", "--out", str(part)])
        assert done.exit_code == 0, done.output
    merged = runner.invoke(app, ["merge", *[str(p.path) for p in RunDir(out).parts()], "--out", str(out)])
    assert merged.exit_code == 0, merged.output
    cut = RunDir(out)
    cut.summary_file.unlink()
    cut.metrics_file.unlink()
    rows = cut.scores.read_bytes()
    cut.scores.write_bytes(rows[: len(rows) // 2])
    again = runner.invoke(app, ["grid", str(grid), "--ray", "local", "--out", str(out), "--resume"])
    assert again.exit_code == 0, again.output
    assert all((p.recorded_summary() or {}).get("steps_resumed") for p in RunDir(out).parts())  # kept, not redone
    whole = tmp_path / "whole"
    assert runner.invoke(app, ["grid", str(grid), "--out", str(whole)]).exit_code == 0
    _assert_same_run(out, whole)
    # A finished merge is not redone: a second --resume is refused.
    refused = runner.invoke(app, ["grid", str(grid), "--ray", "local", "--out", str(out), "--resume"])
    assert refused.exit_code == EXIT_ERROR and "already holds" in refused.output, refused.output


@pytest.mark.slow  # a Ray cluster's launch, kill and resume: about 45 s apiece on a loaded machine
def test_the_printed_commands_for_a_failed_shard_run_whether_or_not_its_part_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard out of retries before its part recorded a run (a lost node, a worker killed while reading streams).

    The by-hand command printed for it must not carry ``--resume``, which refuses a directory without a run; the one
    for a started part must. Ray's side is replaced: only what the driver prints is under test.
    """
    from ceb.pipeline import ray_launch
    from ceb.pipeline.shard import Shard

    grid = _grid(tmp_path)
    out = tmp_path / "on-ray"
    started = RunDir(out).part(1, 2)
    assert runner.invoke(app, ["grid", str(grid), "--shard", "1/2", "--out", str(started.path)]).exit_code == 0
    fresh = RunDir(out).part(0, 2)

    def failed_launch(*args: object, **kwargs: object) -> ray_launch.RayRun:
        failed = [
            ray_launch.ShardFailed(Shard(i, 2), p.path, "WorkerCrashedError: lost")
            for i, p in enumerate([fresh, started])
        ]
        return ray_launch.RayRun(out, 2, [], failed, None, 2)

    monkeypatch.setattr(ray_launch, "run_on_ray", failed_launch)
    result = runner.invoke(app, ["grid", str(grid), "--ray", "local", "--out", str(out)])
    assert result.exit_code == EXIT_FAILED, result.output
    text = " ".join(result.output.split())
    by_hand = text[text.index("by hand: ") + len("by hand: ") : text.index("; then ceb merge")].split("; ")
    assert by_hand == [
        f"ceb grid {grid} --shard 0/2 --out {fresh.path}",
        f"ceb grid {grid} --shard 1/2 --out {started.path} --resume",
    ], text
    for command in by_hand:
        done = runner.invoke(app, command.split()[1:])
        assert done.exit_code == 0, (command, done.output)
