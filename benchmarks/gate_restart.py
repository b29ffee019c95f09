"""How long a durable gate takes to restart against its history (issue 24 item 8): from a snapshot, and by replay.

For each size ``N`` the benchmark writes one stream's state directory as a gate leaves it after ``N`` short
trajectories (one shell step each, every action different; all applied to the bank, their inbox lines compacted
into the ids file), through the gate's own files (:class:`~ceb.gate.state.StateDir`), twice:

- **snapshot**: written with ``gate.snapshot_every``, as this gate writes it: a snapshot and the updates after it;
- **no snapshot**: one journal line per update, as a gate wrote it before snapshots.

(Writing uses a random retriever, which costs nothing per update; the files do not depend on it. Restarts use the
default TF-IDF kernel.) A restart is the seconds of entering ``Gate(config, state_dir=...)``, which opens every
stream. This gate restarts from each; ``--before CHECKOUT`` also restarts that checkout's gate (e.g. ``/work/main``,
which replays every update one at a time) on the files without a snapshot, in a child process, and its commit is
recorded. Every restart's bank is compared with the first (a digest of ``to_document``). "snapshot write" is the
seconds of one snapshot of that bank (:meth:`~ceb.bank.BankJournal.compact`): the pause a stream's scoring sees
when a snapshot is due.

Measured: ``benchmarks/results/gate-restart-20261127T140928Z.json`` at commit ``c1121a9`` (main at ``4ee1d7f``
as ``--before``), as docs/performance.md cites it. It proved the snapshot fix once, so it lives in the checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ceb, not another install's

from benchmarks._cli import bench_parser
from ceb.bank import BankJournal, BankRecord
from ceb.bank.random_retriever import RandomRetriever
from ceb.bench.machine import machine_info
from ceb.bench.result_files import save_results
from ceb.config import RunConfig, load_config
from ceb.data.trajectory import Step, Trajectory
from ceb.gate import Gate
from ceb.gate.inbox import Accepted, fingerprint
from ceb.gate.state import StateDir
from ceb.logs import configure_logging
from ceb.stages.methods import resolve_method

__all__ = ["Restart", "main", "restart_before", "restart_here", "write_state"]

STREAM = "bench"

_HELP = """Gate restart seconds against its history: from a snapshot, and (--before) a previous checkout's replay.

    python benchmarks/gate_restart.py --sizes 1000 10000 100000 --before /work/main --before-sizes 1000 10000

The previous way replayed each update at a cost proportional to the bank, about the square of the history: give
--before-sizes only what fits. Prints a Markdown table and writes ``gate-restart-<UTC timestamp>.json``.
"""

# Run in the child: restart that checkout's gate on a state directory; its seconds and a digest of the bank.
_CHILD = """
import hashlib, json, sys, time
import anyio, orjson
import ceb
from ceb.config import load_config
from ceb.gate import Gate

async def go():
    async with Gate(load_config(), state_dir=sys.argv[3]):
        pass  # a warm-up: what the first gate of a process imports is not the restart's
    began = time.perf_counter()
    async with Gate(load_config(overrides={"gate": {"fsync": False}}), state_dir=sys.argv[1]) as gate:
        seconds = time.perf_counter() - began
        bank = gate.bank(sys.argv[2])
        digest = hashlib.blake2b(orjson.dumps(bank.to_document(), option=orjson.OPT_SORT_KEYS)).hexdigest()
        print(json.dumps({"seconds": seconds, "records": len(bank), "digest": digest, "ceb": ceb.__file__}))

anyio.run(go)
"""


@dataclass(frozen=True, slots=True)
class Restart:
    """One restart: the files, the code that restarted, the history's size, its seconds, the bank it restored."""

    files: str
    code: str
    trajectories: int
    seconds: float
    journal_lines: int
    bank_records: int
    bank_digest: str


def _trajectory(i: int) -> tuple[Trajectory, BankRecord]:
    action = f"cat /srv/dir{i % 97}/file{i}.txt"
    observation = f"line {i}: contents of file {i}"
    traj = Trajectory(id=f"t{i}", task=f"read file {i % 300}", domain="shell", steps=(Step("", action, observation),))
    record = BankRecord(
        task=traj.task,
        state="",
        action=action,
        observation=observation,
        pseudo_label=int(i % 3 != 0),
        soft_vote=float(i % 3 != 0),
        score=None,
        agreement=None,
        trajectory_id=traj.id,
        step=0,
    )
    return traj, record


def _config(snapshot_every: int) -> RunConfig:
    return load_config(overrides={"gate": {"snapshot_every": snapshot_every, "fsync": False}})


def write_state(state: Path, n: int, config: RunConfig, *, snapshot_every: int | None) -> int:
    """Write a stream's state after ``n`` applied trajectories (see the module docstring); the journal's lines.

    Args:
        state: The state directory.
        n: Trajectories.
        config: The gate's configuration (its bank settings).
        snapshot_every: The journal's snapshot period (``None``: no snapshot, as before snapshots existed).
    """
    settings = config.bank.for_k(resolve_method(config.gate.method).resolve(config.ceb).k)
    files = StateDir(state, fsync=False).open(STREAM, RandomRetriever(), settings, snapshot_every=snapshot_every)
    for seq in range(1, n + 1):
        traj, record = _trajectory(seq - 1)
        files.inbox.append(Accepted(seq, traj, (None,), fingerprint(traj)))
        files.journal.add_trajectory([record], mark=seq)
    files.inbox.compact([])  # every line applied: they leave for the ids file, as the gate's compaction does
    files.inbox.close()
    files.journal.close()
    return len((state / STREAM / StateDir.JOURNAL).read_bytes().splitlines())


def _digest(doc: dict[str, Any]) -> str:
    return hashlib.blake2b(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()


async def _restart(state: Path, config: RunConfig) -> tuple[float, int, str]:
    began = time.perf_counter()
    async with Gate(config, state_dir=state) as gate:
        seconds = time.perf_counter() - began
        bank = gate.bank(STREAM)
        return seconds, len(bank), _digest(bank.to_document())


def restart_here(state: Path, config: RunConfig) -> tuple[float, int, str]:
    """Restart this checkout's gate on ``state``: seconds, bank records and the bank's digest."""
    return anyio.run(_restart, state, config)


def restart_before(state: Path, checkout: Path) -> tuple[float, int, str]:
    """Restart ``checkout``'s gate on ``state`` in a child process: seconds, bank records and the bank's digest.

    The child first opens an empty gate beside ``state`` (a warm-up), then times the restart.

    Raises:
        RuntimeError: The child failed, or imported another ceb than the checkout's.
    """
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(state), STREAM, str(state.with_name(state.name + "-warm-up"))],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(checkout)),
        cwd=state,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the gate of {checkout} failed to restart: {proc.stderr[-2000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if not Path(got["ceb"]).resolve().is_relative_to(checkout.resolve()):
        raise RuntimeError(f"the child imported {got['ceb']}, not the ceb of {checkout}")
    return got["seconds"], got["records"], got["digest"]


def _snapshot_write_s(state: Path) -> float:
    with BankJournal.open(state / STREAM / StateDir.JOURNAL, RandomRetriever()) as journal:
        began = time.perf_counter()
        journal.compact()
        return time.perf_counter() - began


def _commit(checkout: Path) -> str:
    proc = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: restart seconds by history size, from a snapshot and by replay (``--help``)."""
    ap = bench_parser("gate-restart", _HELP, prog="python benchmarks/gate_restart.py")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000], help="trajectories of history")
    ap.add_argument("--before", type=Path, help="a previous checkout whose gate restarts on the files without snapshot")
    ap.add_argument("--before-sizes", type=int, nargs="*", help="sizes for --before (default: --sizes)")
    ap.add_argument("--snapshot-every", type=int, default=256, help="gate.snapshot_every")
    args = ap.parse_args(argv)
    configure_logging("warning")
    config = _config(args.snapshot_every)
    before_sizes = set(args.before_sizes if args.before_sizes is not None else args.sizes) if args.before else set()
    rows: list[Restart] = []
    writes: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="ceb-restart-") as tmp:
        warm = Path(tmp) / "warm-up"
        write_state(warm, 1, config, snapshot_every=None)
        restart_here(warm, config)  # what the first gate of a process imports is not the restart's
        for n in args.sizes:
            for files, every in (("snapshot", args.snapshot_every), ("no snapshot", None)):
                state = Path(tmp) / f"{files.replace(' ', '-')}-{n}"
                lines = write_state(state, n, config, snapshot_every=every)
                runs: list[tuple[str, Callable[[], tuple[float, int, str]]]] = [
                    ("this gate", partial(restart_here, state, config))
                ]
                if files == "no snapshot" and n in before_sizes:
                    # First: this gate's restart writes a snapshot into these files (one is due).
                    runs.insert(0, (f"before ({args.before})", partial(restart_before, state, args.before)))
                for code, restart in runs:
                    seconds, records, digest = restart()
                    rows.append(Restart(files, code, n, seconds, lines, records, digest))
                    print(f"{n:>7,} trajectories, {files}, {code}: {seconds:.2f} s", file=sys.stderr, flush=True)
                if files == "snapshot":
                    writes[n] = _snapshot_write_s(state)
                shutil.rmtree(state)
    lines_out = [
        "| trajectories | files | gate | journal lines | restart (s) | same bank as the first |",
        "| ---: | --- | --- | ---: | ---: | :---: |",
    ]
    first = {n: next(r.bank_digest for r in rows if r.trajectories == n) for n in args.sizes}
    for r in rows:
        lines_out.append(
            f"| {r.trajectories:,} | {r.files} | {r.code} | {r.journal_lines:,} | {r.seconds:.2f} "
            f"| {r.bank_digest == first[r.trajectories]} |"
        )
    lines_out.append("")
    lines_out.append("One snapshot write (s): " + ", ".join(f"{n:,}: {s:.2f}" for n, s in writes.items()))
    print("\n".join(lines_out))
    doc: dict[str, Any] = {
        "benchmark": "gate-restart",
        "machine": machine_info(),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "restarts": [asdict(r) for r in rows],
        "same_bank": {str(n): all(r.bank_digest == first[n] for r in rows if r.trajectories == n) for n in args.sizes},
        "snapshot_write_s": {str(n): v for n, v in writes.items()},
    }
    if args.before:
        doc["before"] = {"checkout": str(args.before), "commit": _commit(args.before)}
    print(f"wrote {save_results(args.out, 'gate-restart', doc)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
