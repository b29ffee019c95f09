"""Bounded banks: query, update, memory and file size against the records streamed in, per policy and cap.

Real InterCode-SQL records are streamed into one bank, past the real 58k by :data:`REPLAY_RULE`, each measurement in
a fresh process (:func:`scale_worker`) so that its peak memory is its own. The stream enters in chunks (each one
:meth:`~ceb.bank.bank.Bank.add_trajectory`), its last trajectories one at a time, timed. For ``none``, ``window`` and
``reservoir`` without compression chunking changes nothing (the held records, their order and the kernel's term ids
are those of per-trajectory updates); ``usefulness`` and compression depend on the update boundaries, so
:func:`measure_scale` refuses them. What a cap does to calibration: ``python benchmarks/bank_quality.py`` (checkout).
"""

from __future__ import annotations

import gc
import itertools
import os
import resource
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson
from pydantic import Field, field_validator

from ceb.bank import Bank, BankJournal, BankRecord, IncrementalTfidf, agreement_flag
from ceb.bench.options import BenchSettings, progress, run_and_save
from ceb.bench.processes import run_fresh_many
from ceb.bench.result_files import results_path
from ceb.bench.stats import summarize
from ceb.config import BankConfig, PromptConfig
from ceb.data import Trajectory, convert_intercode, read_stream
from ceb.stages.templates import clip

__all__ = [
    "BankPoliciesBench",
    "GOALS",
    "REPLAY_RULE",
    "UNCAPPED_1M_GOALS",
    "BankPoliciesResult",
    "Latency",
    "Policy",
    "ScaleResult",
    "Setting",
    "format_scale_table",
    "grow",
    "load_sql_trajectories",
    "main",
    "measure_scale",
    "plot",
    "records_from_labels",
    "replay",
    "rss_mb",
    "scale_checks",
    "scale_worker",
]

Policy = Literal["none", "window", "reservoir", "usefulness"]

UNCAPPED_1M_GOALS = {"query_p50_ms": 10.0, "rss_mb": 2048.0}
"""Issue 15's goals for an uncapped bank of 1M records: retrieve p50 and peak resident memory (MiB)."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One bank configuration: :class:`~ceb.config.BankConfig`'s policy and compression, and a cap.

    ``cap``: ``max_records`` for ``window`` and ``usefulness``; for ``reservoir`` both classes together
    (``max_per_class = cap // 2``); ``None`` for ``none``.
    """

    policy: Policy = "none"
    cap: int | None = None
    compress_threshold: float | None = None

    @property
    def label(self) -> str:
        """A short name: ``unbounded``, ``window 5k``, ``reservoir 2x2.5k``, ``compress 0.95 + window 5k``."""
        parts = [] if self.compress_threshold is None else [f"compress {self.compress_threshold:g}"]
        if self.policy == "reservoir" and self.cap is not None:
            parts.append(f"reservoir 2x{_short(self.cap // 2)}")
        elif self.policy != "none" and self.cap is not None:
            parts.append(f"{self.policy} {_short(self.cap)}")
        return " + ".join(parts) or "unbounded"

    def bank_settings(self, usefulness_k: int | None = None) -> dict[str, Any]:
        """The ``[bank]`` section for this setting (``usefulness_k``: ``None`` derives it from the run's ``k``)."""
        out: dict[str, Any] = {"policy": self.policy, "compress_threshold": self.compress_threshold}
        if self.policy in ("window", "usefulness"):
            out["max_records"] = self.cap
        elif self.policy == "reservoir":
            out["max_per_class"] = None if self.cap is None else self.cap // 2
        if self.policy == "usefulness":
            out["usefulness_k"] = usefulness_k
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Setting:
        """Inverse of :func:`dataclasses.asdict`."""
        return cls(doc["policy"], doc["cap"], doc["compress_threshold"])


def _short(n: int) -> str:
    return f"{n / 1000:g}k" if n >= 1000 else str(n)


BANK_STATE_CHARS = 400
"""The state budget of the pipeline's keys (``PromptConfig.bank_state_chars``)."""

REPLAY_RULE = (
    "records are the InterCode-SQL streams' steps, streams in name order, trajectories in stream order; "
    "pass 0 is the real data; when a bank needs more records, pass r >= 1 replays every trajectory in the "
    "same order with ' #copy<r>' appended to each action (so each key gains the unigram 'copy<r>' and one "
    "bigram) and '#copy<r>' appended to the trajectory id; the last trajectory is cut to reach N exactly"
)
"""How :func:`grow` makes banks larger than the real data, in words, for the results file."""


@dataclass(frozen=True, slots=True)
class Latency:
    """Summary of ``n`` repeated timings in milliseconds (:func:`~ceb.bench.stats.summarize`'s percentiles)."""

    n: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        """Summarise timings given in seconds."""
        s = summarize(seconds, scale=1e3)
        return cls(s.n, s.p50, s.p99, s.mean, s.max)


def records_from_labels(
    trajectories: Sequence[Trajectory], *, observation_chars: int | None = None
) -> list[list[BankRecord]]:
    """Bank records per trajectory, pseudo-labels the ground-truth labels, keys as the pipeline builds them.

    ``observation_chars``: ``None`` leaves the observation empty (retrieval never reads it); a budget (the pipeline's
    ``PromptConfig.bank_observation_chars``) gives the clipped observation and a placeholder score of 0.5, so the
    record is as large as a pipeline record, for memory and file-size figures.
    """
    full = observation_chars is not None
    return [
        [
            BankRecord(
                task=t.task,
                state=clip(s.state, BANK_STATE_CHARS),
                action=s.action,
                observation=clip(s.observation, observation_chars) if observation_chars is not None else "",
                pseudo_label=int(s.label or 0),
                soft_vote=float(s.label or 0),
                score=0.5 if full else None,
                agreement=agreement_flag(0.5, int(s.label or 0)) if full else None,
                trajectory_id=t.id,
                step=i,
            )
            for i, s in enumerate(t.steps)
        ]
        for t in trajectories
    ]


def load_sql_trajectories(
    intercode_root: str | Path, *, observation_chars: int | None = None
) -> list[list[BankRecord]]:
    """The InterCode-SQL streams' steps as :func:`records_from_labels`, one list per trajectory, streams by name.

    Raises:
        DataError: The InterCode data is missing or malformed (from :func:`~ceb.data.convert_intercode`).
    """
    with tempfile.TemporaryDirectory(prefix="ceb-bench-") as tmp:
        streams = convert_intercode(intercode_root, tmp, datasets=("sql",))
        out: list[list[BankRecord]] = []
        for stream in streams:
            out.extend(records_from_labels(read_stream([stream.path]), observation_chars=observation_chars))
    return out


def replay(real: Sequence[Sequence[BankRecord]], size: int) -> Iterator[list[BankRecord]]:
    """The trajectories of :func:`grow`, one at a time, without holding them all (for streams past memory).

    Raises:
        ValueError: ``size < 1`` or ``real`` holds no record (on the first ``next``).
    """
    if size < 1 or not any(real):
        raise ValueError(f"need size >= 1 and some real records, got size={size}")
    have = 0
    for r in itertools.count():
        for traj in real:
            if not traj:
                continue
            take = list(traj[: size - have])
            if r:  # a replay pass, marked as REPLAY_RULE says
                take = [
                    replace(x, action=f"{x.action} #copy{r}", trajectory_id=f"{x.trajectory_id}#copy{r}") for x in take
                ]
            yield take
            have += len(take)
            if have == size:
                return


def grow(real: Sequence[Sequence[BankRecord]], size: int) -> tuple[list[list[BankRecord]], int]:
    """Exactly ``size`` records by trajectory, as :data:`REPLAY_RULE` says: (trajectories, passes over ``real``).

    Raises:
        ValueError: ``size < 1`` or ``real`` holds no record.
    """
    out = list(replay(real, size))
    per_pass = sum(len(t) for t in real)
    return out, -(-size // per_pass)


@dataclass(frozen=True, slots=True)
class ScaleResult:
    """One bank after a stream of ``size`` records (memory in MiB, times in seconds).

    ``held``: records held at the end; ``nnz``: stored (key, term) counts; ``stream_in_s``: streaming all but the
    timed trajectories; ``query``: ``Bank.retrieve`` with real keys; ``update``: ``Bank.add_trajectory`` of each of
    the last trajectories; ``rss_base_mb``: before the bank (interpreter, libraries, the real records);
    ``peak_rss_mb``: ``ru_maxrss`` before saving, ``peak_rss_saved_mb`` after :meth:`~ceb.bank.bank.Bank.save` and a
    compacted :class:`~ceb.bank.journal.BankJournal` (``save_*``, ``journal_*``: their bytes and seconds).
    """

    size: int
    setting: Setting
    held: int
    trajectories: int
    replay_passes: int
    vocabulary: int
    nnz: int
    k: int
    chunk_records: int
    stream_in_s: float
    query: Latency
    update: Latency
    rss_base_mb: float
    rss_mb: float
    peak_rss_mb: float
    save_bytes: int
    save_s: float
    journal_bytes: int
    journal_s: float
    peak_rss_saved_mb: float

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ScaleResult:
        """Inverse of :func:`dataclasses.asdict`."""
        return cls(
            **(
                dict(doc)
                | {
                    "setting": Setting.from_json(doc["setting"]),
                    "query": Latency(**doc["query"]),
                    "update": Latency(**doc["update"]),
                }
            )
        )


def rss_mb() -> tuple[float, float]:
    """``(current, peak)`` resident memory of this process in MiB (``/proc/self/statm``, ``ru_maxrss``; Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    now = pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    # The kernel updates the high-water mark lazily, so it can trail the current figure by a little.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return now, max(now, peak)


def _fresh(text: str) -> str:
    """An equal string that is a new object: a replayed record must cost the memory a real one would."""
    return (text + ".")[:-1]


def _distinct(trajectories: Iterator[list[BankRecord]]) -> Iterator[list[BankRecord]]:
    """Replayed trajectories owning their strings (shared with the copied record, memory would be understated)."""
    for traj in trajectories:
        if not traj or "#copy" not in traj[0].trajectory_id:
            yield traj
            continue
        task = _fresh(traj[0].task)
        yield [replace(r, task=task, state=_fresh(r.state), observation=_fresh(r.observation)) for r in traj]


def measure_scale(
    real: Sequence[Sequence[BankRecord]],
    size: int,
    setting: Setting,
    queries: Sequence[str],
    workdir: str | Path,
    *,
    k: int = 2,
    update_trajectories: int = 50,
    chunk_records: int = 10_000,
    log: Callable[[str], None] = lambda _: None,
) -> ScaleResult:
    """Stream ``size`` records of ``real`` into a bank under ``setting`` and measure it (the module docstring).

    ``queries`` are timed with ``Bank.retrieve(q, k)``; the last ``update_trajectories`` are added one at a time,
    those before in chunks of ``chunk_records``; the bank file and journal are written in ``workdir`` and removed.

    Raises:
        ValueError: ``usefulness`` or compression (their banks depend on the update boundaries).
    """
    if setting.policy == "usefulness" or setting.compress_threshold is not None:
        raise ValueError(
            f"{setting.label}: streaming in chunks would change this bank; scale measures none/window/reservoir"
        )
    kernel = IncrementalTfidf()
    bank = Bank(kernel, BankConfig(**setting.bank_settings(k)))
    base_mb, _ = rss_mb()
    pending: deque[list[BankRecord]] = deque()
    chunk: list[BankRecord] = []
    trajectories = 0
    started = time.perf_counter()
    for traj in _distinct(replay(real, size)):
        trajectories += 1
        pending.append(traj)
        if len(pending) > update_trajectories:
            chunk.extend(pending.popleft())
            if len(chunk) >= chunk_records:
                bank.add_trajectory(chunk)
                chunk = []
                if trajectories % 20 == 0:
                    log(f"{setting.label}: {trajectories:,} trajectories in, {len(bank):,} held")
    if chunk:
        bank.add_trajectory(chunk)
    del chunk
    stream_in = time.perf_counter() - started
    gc.collect()
    updates = []
    for traj in pending:
        t0 = time.perf_counter()
        bank.add_trajectory(traj)
        updates.append(time.perf_counter() - t0)
    pending.clear()
    for q in queries[:5]:  # lazily built state and caches outside the timings
        bank.retrieve(q, k)
    gc.collect()
    times = []
    for q in queries:
        t0 = time.perf_counter()
        bank.retrieve(q, k)
        times.append(time.perf_counter() - t0)
    now_mb, peak_mb = rss_mb()
    log(f"{setting.label} at {size:,}: streamed in {stream_in:.1f} s, {len(bank):,} held, RSS {now_mb:.0f} MiB")
    workdir = Path(workdir)
    bank_path, journal_path = workdir / "bank.json", workdir / "bank.journal"
    t0 = time.perf_counter()
    bank.save(bank_path)
    save_s = time.perf_counter() - t0
    save_bytes = bank_path.stat().st_size
    bank_path.unlink()
    t0 = time.perf_counter()
    with BankJournal(
        journal_path, bank, journal_path.open("ab"), 0, compact_ratio=2.0, compact_min=1024, fsync=False
    ) as j:
        j.compact()
    journal_s = time.perf_counter() - t0
    journal_bytes = journal_path.stat().st_size
    journal_path.unlink()
    return ScaleResult(
        size=size,
        setting=setting,
        held=len(bank),
        trajectories=trajectories,
        replay_passes=-(-size // max(1, sum(len(t) for t in real))),
        vocabulary=kernel.vocabulary_size,
        nnz=kernel.nnz,
        k=k,
        chunk_records=chunk_records,
        stream_in_s=round(stream_in, 2),
        query=Latency.of(times),
        update=Latency.of(updates),
        rss_base_mb=round(base_mb, 1),
        rss_mb=round(now_mb, 1),
        peak_rss_mb=round(peak_mb, 1),
        save_bytes=save_bytes,
        save_s=round(save_s, 2),
        journal_bytes=journal_bytes,
        journal_s=round(journal_s, 2),
        peak_rss_saved_mb=round(rss_mb()[1], 1),
    )


def scale_checks(results: Sequence[ScaleResult]) -> dict[str, Any]:
    """The goals checked: ``flat``, ``naive`` and ``uncapped_1m`` (when 1M uncapped was measured).

    ``flat`` per capped setting: largest over smallest size of query p50, update mean and RSS above base (1.0 is
    flat); ``naive`` per capped setting and size: the uncapped bank's mean update time over this one's.
    """
    by: dict[str, dict[int, ScaleResult]] = {}
    for r in results:
        by.setdefault(r.setting.label, {})[r.size] = r
    unbounded = by.get(Setting().label, {})
    out: dict[str, Any] = {"flat": {}, "naive": {}}
    for label, sizes in by.items():
        if label == Setting().label or len(sizes) < 2:
            continue
        lo, hi = sizes[min(sizes)], sizes[max(sizes)]
        out["flat"][label] = {
            "sizes": [lo.size, hi.size],
            "query_p50_ratio": hi.query.p50_ms / lo.query.p50_ms,
            "update_mean_ratio": hi.update.mean_ms / lo.update.mean_ms,
            "rss_above_base_ratio": (hi.rss_mb - hi.rss_base_mb) / max(1e-9, lo.rss_mb - lo.rss_base_mb),
            "file_ratio": hi.save_bytes / lo.save_bytes,
        }
        out["naive"][label] = {
            str(n): unbounded[n].update.mean_ms / r.update.mean_ms for n, r in sorted(sizes.items()) if n in unbounded
        }
    big = unbounded.get(1_000_000)
    if big is not None:
        out["uncapped_1m"] = {
            "query_p50_ms": big.query.p50_ms,
            "query_p50_ok": big.query.p50_ms <= UNCAPPED_1M_GOALS["query_p50_ms"],
            "rss_mb": big.rss_mb,
            "peak_rss_mb": big.peak_rss_mb,
            "rss_ok": big.peak_rss_mb <= UNCAPPED_1M_GOALS["rss_mb"],
        }
    return out


def scale_worker(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``asdict`` of :func:`measure_scale` of a JSON spec, for :func:`ceb.bench.processes.run_fresh`.

    ``spec``: ``intercode``, ``size``, ``setting`` (``asdict``), ``queries``, ``seed``, ``k``, ``updates``, ``chunk``.
    """
    real = load_sql_trajectories(spec["intercode"], observation_chars=PromptConfig().bank_observation_chars)
    keys = [r.key for traj in real for r in traj]
    rng = np.random.default_rng(spec["seed"])
    queries = [keys[i] for i in rng.choice(len(keys), size=min(spec["queries"], len(keys)), replace=False)]
    del keys
    gc.collect()
    with tempfile.TemporaryDirectory(prefix="ceb-bench-") as tmp:
        result = measure_scale(
            real,
            spec["size"],
            Setting.from_json(spec["setting"]),
            queries,
            tmp,
            k=spec["k"],
            update_trajectories=spec["updates"],
            chunk_records=spec["chunk"],
        )
    return asdict(result)


GOALS = "under a cap: flat query latency, update time and memory; uncapped at 1M: query p50 <= 10 ms, RSS <= 2 GB"

DATA = {
    "source": "InterCode-SQL records (convert_intercode): key = composite_key(task, clip(state, 400), action), "
    "pseudo_label = the step's label, observation clipped to bank_observation_chars, score 0.5 placeholder; "
    "replayed records own their text (no string shared with the record they copy)",
    "replay": REPLAY_RULE,
    "memory": "RSS from /proc/self/statm; peak from getrusage ru_maxrss, each measurement in a fresh process",
}
"""What the records and figures are, for the results file."""


@dataclass(frozen=True, slots=True)
class BankPoliciesResult:
    """``ceb bench bank-policies``'s record: its settings, the measurements, the goals checked, table and figure.

    ``settings``: the bank settings' labels; ``failures``: ``{"error", "spec"}`` of each measurement that failed.
    """

    sizes: tuple[int, ...]
    settings: tuple[str, ...]
    queries: int
    k: int
    updates: int
    chunk: int
    seed: int
    results: tuple[ScaleResult, ...]
    failures: tuple[dict[str, Any], ...]
    checks: dict[str, Any]
    table: str
    plot: str
    wall_s: float
    data: dict[str, str]
    goals: str = GOALS


def format_scale_table(results: Sequence[ScaleResult]) -> str:
    """Markdown: one row per (records streamed, setting); milliseconds and MiB."""
    head = (
        "| records streamed | bank | held | query p50 / p99 ms | update p50 / mean ms (n) | RSS MiB (base) "
        "| peak RSS MiB | bank file MiB | journal MiB (compacted) | stream-in s |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        lines.append(
            f"| {r.size:,} | {r.setting.label} | {r.held:,} | {r.query.p50_ms:.2f} / {r.query.p99_ms:.2f} "
            f"| {r.update.p50_ms:.1f} / {r.update.mean_ms:.1f} ({r.update.n}) "
            f"| {r.rss_mb:,.0f} ({r.rss_base_mb:,.0f}) | {r.peak_rss_mb:,.0f} | {r.save_bytes / 2**20:,.1f} "
            f"| {r.journal_bytes / 2**20:,.1f} | {r.stream_in_s:.0f} |"
        )
    return "\n".join(lines)


def plot(scale: Sequence[ScaleResult], stem: str | Path) -> Path:
    """Query p50, update mean and peak RSS against the records streamed in, log-log, drawn at ``<stem>.png``."""
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ceb.eval.plots import save_figure

    fig = Figure(figsize=(16, 4.5), layout="constrained")
    grid = fig.subplots(1, 3, squeeze=False)
    axes: list[list[Axes]] = [list(row) for row in grid]
    labels = sorted({r.setting.label for r in scale}, key=[r.setting.label for r in scale].index)
    getters: tuple[tuple[str, Callable[[ScaleResult], float], float | None], ...] = (
        ("query p50 ms (retrieve, k=2)", lambda r: r.query.p50_ms, UNCAPPED_1M_GOALS["query_p50_ms"]),
        ("update mean ms per trajectory", lambda r: r.update.mean_ms, None),
        ("peak RSS MiB", lambda r: r.peak_rss_mb, UNCAPPED_1M_GOALS["rss_mb"]),
    )
    for col, (title, get, goal) in enumerate(getters):
        ax = axes[0][col]
        for label in labels:
            line = sorted((r.size, get(r)) for r in scale if r.setting.label == label)
            ax.plot([x for x, _ in line], [y for _, y in line], marker="o", label=label)
        if goal is not None:
            ax.axhline(goal, color="tab:red", linestyle=":", linewidth=1, label="goal, uncapped at 1M")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("records streamed into the bank")
        ax.set_title(title)
        if col == 0:
            ax.legend(fontsize=8)
    fig.suptitle("Bounded banks: query, update and memory against the records streamed in")
    return save_figure(fig, Path(stem))[0]


def _scale_setting(text: str) -> Setting:
    """``none``, ``window:20000`` or ``reservoir:20000`` (the cap over both classes: 10k per class)."""
    policy, _, cap = text.partition(":")
    if policy not in ("none", "window", "reservoir") or not (cap.isdigit() or (not cap and policy == "none")):
        raise ValueError(f"settings are none, window:<cap> or reservoir:<cap>, not {text!r}")
    return Setting(policy, int(cap) if cap else None)  # type: ignore[arg-type]


class BankPoliciesBench(BenchSettings):
    """Bounded banks: query, update, memory and file size against the records streamed in, per policy and cap.

        ceb bench bank-policies --sizes 10000,100000,1000000 --scale-settings none,window:20000,reservoir:20000

    A bank fed real or replayed InterCode-SQL records (10k, 100k, 1M), uncapped and under each cap, each measurement
    in a fresh process so its peak memory is its own. Prints a Markdown table and the goals checked, and writes
    ``bank-policies-<UTC timestamp>.json`` and a PNG of the same name into ``--out``. See ``ceb/bench/bank_policies.py``
    for what each figure measures; what a cap does to calibration is ``python benchmarks/bank_quality.py`` (checkout).
    """

    sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    """Records streamed in."""
    scale_settings: tuple[str, ...] = ("none", "window:20000", "reservoir:20000")
    """Bank policies: none, window:<cap> or reservoir:<cap>."""
    queries: int = Field(200, ge=1)
    """Query keys timed."""
    k: int = Field(2, ge=1)
    """Records per class retrieved (paper: 2)."""
    updates: int = Field(50, ge=0)
    """Trajectories added one at a time, timed."""
    chunk: int = Field(10_000, ge=1)
    """Records per bulk update while streaming in."""
    seed: int = 0
    """Query sampling seed."""
    scale_timeout_s: float = Field(1800.0, gt=0)
    """Kill one measurement after this many seconds."""

    @field_validator("scale_settings")
    @classmethod
    def _known_settings(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for text in value:
            _scale_setting(text)
        return value


def _bench(args: BankPoliciesBench, path: Path) -> BankPoliciesResult:
    settings = [_scale_setting(s) for s in args.scale_settings]
    started = time.perf_counter()
    specs = [
        {"intercode": str(args.intercode), "size": size, "setting": asdict(setting), "queries": args.queries}
        | {"seed": args.seed, "k": args.k, "updates": args.updates, "chunk": args.chunk}
        for size in args.sizes
        for setting in settings
    ]
    progress(f"{len(specs)} measurements, one at a time, each in a fresh process")
    docs = run_fresh_many(
        "ceb.bench.bank_policies:scale_worker",
        specs,
        timeout_s=args.scale_timeout_s,
        describe=lambda s: f"scale {s['size']} {Setting.from_json(s['setting']).label}",
        log=progress,
    )
    results = tuple(ScaleResult.from_json(d) for d in docs if "error" not in d)
    path.parent.mkdir(parents=True, exist_ok=True)
    return BankPoliciesResult(
        tuple(args.sizes),
        tuple(s.label for s in settings),
        args.queries,
        args.k,
        args.updates,
        args.chunk,
        args.seed,
        results,
        tuple(d for d in docs if "error" in d),
        scale_checks(results),
        format_scale_table(results),
        plot(results, path.with_suffix("")).name,
        round(time.perf_counter() - started, 1),
        DATA,
    )


def _lines(r: BankPoliciesResult) -> list[str]:
    return [
        f"{r.table}\n\nkeys: {REPLAY_RULE}\nchecks: {orjson.dumps(r.checks).decode()}",
        *(f"FAILED: {f['spec']['size']} {f['spec']['setting']}: {f['error'][-300:]}" for f in r.failures),
        f"goals: {GOALS}\nfigure {r.plot} ({r.wall_s} s)",
    ]


def main(args: BankPoliciesBench) -> int:
    """``ceb bench bank-policies``: every (size, setting), each measurement in a fresh process; printed and saved."""
    path = results_path(args.out, "bank-policies")  # the figure is named after the results file
    return run_and_save("bank-policies", lambda a, _: _bench(a, path), args, lines=_lines, path=path)
