"""Bounded banks, the grid and its quality: offline CEB's calibration under each bank setting (issue 15, part 2).

A bank :class:`Setting` is a policy, a cap and compression; :func:`quality_settings` is the grid of them.

Offline CEB (:mod:`ceb.stages.offline`: a retrieval-only critic and a rule-based hindsight labeler,
*not* a language model) scores a stream through the real pipeline (:func:`ceb.pipeline.run_scoring`, method
``ceb``) once per bank :class:`Setting`; the metrics are the project's main-table rows
(:func:`ceb.eval.calibration.metric_rows`: ECE with 10 equal-width bins, Brier, AUROC, and 95% percentile
bootstrap intervals resampling trajectories). Every saved bank is read back to check that the cap held, at the
end and at every step (the rows' ``bank_size``). The figures are the offline stand-in's, not an LLM critic's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import anyio
import orjson

from ceb.config import load_config
from ceb.data import Trajectory, read_stream
from ceb.eval.calibration import MetricRow, metric_rows
from ceb.eval.lanes import POOLED, lanes_from_rows
from ceb.pipeline import read_step_rows, run_scoring
from ceb.pipeline.rundir import RunDir

__all__ = [
    "UNCAPPED_1M_GOALS",
    "BankCheck",
    "Policy",
    "QualityResult",
    "QualityRow",
    "Setting",
    "quality_settings",
    "quality_worker",
    "run_quality",
]

Policy = Literal["none", "window", "reservoir", "usefulness"]

UNCAPPED_1M_GOALS = {"query_p50_ms": 10.0, "rss_mb": 2048.0}
"""Issue 15's goals for an uncapped bank of 1M records: retrieve p50 and peak resident memory (MiB)."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One bank configuration of the grid.

    Attributes:
        policy: :attr:`~ceb.config.BankConfig.policy`.
        cap: Records the bank may hold: ``max_records`` for ``window`` and ``usefulness``; for ``reservoir``
            the total over both classes, so ``max_per_class = cap // 2``; ``None`` for ``none``.
        compress_threshold: :attr:`~ceb.config.BankConfig.compress_threshold` (``None``: off).
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

    def binds(self, most_records: int) -> bool:
        """Whether the setting can change a bank that would otherwise reach ``most_records`` records.

        A cap at or above that never evicts, so the run would repeat the unbounded one; compression may
        always merge.
        """
        if self.compress_threshold is not None:
            return True
        if self.cap is None:
            return self.policy == "none"
        limit = self.cap // 2 if self.policy == "reservoir" else self.cap
        return limit < most_records

    def within(self, records: int, positives: int) -> bool:
        """Whether a bank of ``records`` (``positives`` of them in ``B+``) respects the cap."""
        if self.cap is None or self.policy == "none":
            return True
        if self.policy == "reservoir":
            return max(positives, records - positives) <= self.cap // 2
        return records <= self.cap

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Setting:
        """Inverse of :func:`dataclasses.asdict`."""
        return cls(doc["policy"], doc["cap"], doc["compress_threshold"])


def _short(n: int) -> str:
    return f"{n / 1000:g}k" if n >= 1000 else str(n)


def quality_settings(
    caps: Iterable[int],
    policies: Iterable[Policy] = ("window", "reservoir", "usefulness"),
    *,
    compress: float | None = None,
    compress_window: int | None = None,
    most_records: int | None = None,
) -> tuple[list[Setting], list[Setting]]:
    """The grid of one stream set: unbounded, each policy at each cap, and compression.

    Args:
        caps: Caps in records (:attr:`Setting.cap`).
        policies: Eviction policies.
        compress: A compression threshold to run alone (unbounded otherwise), or ``None``.
        compress_window: With ``compress``, also run compression under a ``window`` of this many records.
        most_records: Steps of the set's longest stream: settings that cannot bind below it (:meth:`Setting.binds`)
            are left out, since they would repeat the unbounded run. ``None``: keep all.

    Returns:
        ``(run, skipped)``.
    """
    grid = [Setting()]
    grid += [Setting(p, c) for p in policies for c in sorted(caps)]
    if compress is not None:
        grid.append(Setting(compress_threshold=compress))
        if compress_window is not None:
            grid.append(Setting("window", compress_window, compress))
    if most_records is None:
        return grid, []
    run = [s for s in grid if s.binds(most_records)]
    return run, [s for s in grid if s not in run]


@dataclass(frozen=True, slots=True)
class QualityRow:
    """ECE, Brier and AUROC of one stream (or the pool of a set's streams) under one setting.

    Attributes:
        stream: Stream name, or :data:`~ceb.eval.lanes.POOLED`.
        n: Steps with a score and a label.
        n_trajectories: Trajectories among them (the bootstrap's resampling units).
        ece: Equal-width ECE (10 bins); ``ece_low``/``ece_high``: its 95% percentile bootstrap interval.
        brier: Brier score, with ``brier_low``/``brier_high``.
        auroc: AUROC (``None`` with one class), with ``auroc_low``/``auroc_high``.
        failed: Steps without a score (left out).
    """

    stream: str
    n: int
    n_trajectories: int
    ece: float | None
    ece_low: float | None
    ece_high: float | None
    brier: float | None
    brier_low: float | None
    brier_high: float | None
    auroc: float | None
    auroc_low: float | None
    auroc_high: float | None
    failed: int

    @classmethod
    def of(cls, row: MetricRow) -> QualityRow:
        """Flatten a main-table row."""
        s, ci = row.summary, row.ci
        ece = ci.ece if ci is not None else None
        brier = ci.brier if ci is not None else None
        auroc = ci.auroc if ci is not None else None
        return cls(
            stream=row.stream,
            n=row.n,
            n_trajectories=row.n_trajectories,
            ece=s.ece if s is not None else None,
            ece_low=ece.low if ece is not None else None,
            ece_high=ece.high if ece is not None else None,
            brier=s.brier if s is not None else None,
            brier_low=brier.low if brier is not None else None,
            brier_high=brier.high if brier is not None else None,
            auroc=s.auroc if s is not None else None,
            auroc_low=auroc.low if auroc is not None else None,
            auroc_high=auroc.high if auroc is not None else None,
            failed=row.failed,
        )


@dataclass(frozen=True, slots=True)
class BankCheck:
    """One lane's bank, read back from the run.

    Attributes:
        stream: Stream name.
        records: Records held at the end (the saved bank).
        positives: Of them in ``B+``.
        stands_for: Records they stand for (sum of the merge counts; ``records`` without compression).
        max_seen: The largest ``|B_t|`` any step of the lane was scored with.
        within_cap: Both the saved bank and ``max_seen`` respect the cap (:meth:`Setting.within`; for
            ``reservoir`` ``max_seen`` is checked against ``cap``, the per-step rows not splitting classes).
    """

    stream: str
    records: int
    positives: int
    stands_for: int
    max_seen: int
    within_cap: bool


@dataclass(frozen=True, slots=True)
class QualityResult:
    """One setting on one stream set.

    Attributes:
        stream_set: ``sql`` (the SQL streams joined), ``bash`` (each bash stream, and pooled), ...
        setting: The bank setting.
        steps: Step rows written.
        wall_s: Seconds of the scoring run (not the bootstrap); noisy, the machine is shared.
        rows: Per stream, then :data:`~ceb.eval.lanes.POOLED` when the set has several streams.
        banks: Per stream.
    """

    stream_set: str
    setting: Setting
    steps: int
    wall_s: float
    rows: tuple[QualityRow, ...]
    banks: tuple[BankCheck, ...]

    @property
    def headline(self) -> QualityRow:
        """The pooled row, or the only stream's row."""
        pooled = [r for r in self.rows if r.stream == POOLED]
        return pooled[0] if pooled else self.rows[0]

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> QualityResult:
        """Inverse of :func:`dataclasses.asdict`."""
        return cls(
            doc["stream_set"],
            Setting.from_json(doc["setting"]),
            doc["steps"],
            doc["wall_s"],
            tuple(QualityRow(**r) for r in doc["rows"]),
            tuple(BankCheck(**b) for b in doc["banks"]),
        )


def run_quality(
    streams: Mapping[str, Sequence[Trajectory]],
    setting: Setting,
    run_dir: str | Path,
    *,
    stream_set: str,
    n_boot: int = 1000,
    seed: int = 0,
    max_trajectories: int | None = None,
) -> QualityResult:
    """Score ``streams`` with offline CEB under ``setting`` and aggregate as the main table does.

    Args:
        streams: Stream name -> trajectories (several files joined into one stream: one entry).
        setting: The bank setting.
        run_dir: The run's directory (results, saved banks); earlier results in it are replaced.
        stream_set: Name of the set, for the result.
        n_boot: Bootstrap replicates per row.
        seed: Bootstrap seed (every row and setting resamples the same trajectories).
        max_trajectories: Score only the first this many trajectories of each stream (tests).

    Returns:
        The metrics per stream (and pooled) and each bank, read back.

    Raises:
        AssertionError: A bank broke its cap (a bug in :mod:`ceb.bank.policy`, not a figure).
    """
    run_dir = Path(run_dir)
    k = load_config().ceb.k
    overrides = {"methods": ["ceb"], "bank": setting.bank_settings(k), "max_trajectories": max_trajectories}
    config = load_config(None, overrides)
    started = time.perf_counter()
    summary = anyio.run(partial(run_scoring, streams, config, run_dir, overwrite=True))
    wall = time.perf_counter() - started
    steps = list(read_step_rows(RunDir(run_dir).scores))
    rows = metric_rows(lanes_from_rows(steps), n_bins=config.ece_bins, n_boot=n_boot, seed=seed)
    max_seen: dict[str, int] = {}
    for s in steps:
        max_seen[s.stream] = max(max_seen.get(s.stream, 0), s.bank_size)
    banks = []
    for b in summary.banks:
        assert b.path is not None
        doc = orjson.loads((run_dir / b.path).read_bytes())
        records = len(doc["records"])
        positives = sum(r["pseudo_label"] for r in doc["records"])
        within = setting.within(records, positives) and (setting.cap is None or max_seen[b.stream] <= setting.cap)
        if not within:
            raise AssertionError(f"{setting.label}: the bank of {b.stream} broke its cap ({records} records)")
        stands_for = int(sum(doc.get("counts", [1] * records)))
        banks.append(BankCheck(b.stream, records, positives, stands_for, max_seen.get(b.stream, 0), within))
    return QualityResult(
        stream_set,
        setting,
        len(steps),
        round(wall, 2),
        tuple(QualityRow.of(r) for r in _in_stream_order(rows)),
        tuple(banks),
    )


def quality_worker(spec: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`run_quality` of one JSON spec, for a fresh process (:func:`ceb.bench.processes.run_fresh`).

    Args:
        spec: ``stream_set``, ``streams`` (name -> stream file paths), ``setting`` (``asdict`` of a
            :class:`~ceb.bench.bank_quality.Setting`), ``run_dir``, ``n_boot``, ``seed``, ``max_trajectories``.

    Returns:
        ``asdict`` of the :class:`QualityResult`.
    """
    streams = {name: read_stream([Path(p) for p in paths]) for name, paths in spec["streams"].items()}
    result = run_quality(
        streams,
        Setting.from_json(spec["setting"]),
        spec["run_dir"],
        stream_set=spec["stream_set"],
        n_boot=spec["n_boot"],
        seed=spec["seed"],
        max_trajectories=spec.get("max_trajectories"),
    )
    return asdict(result)


def _in_stream_order(rows: list[MetricRow]) -> list[MetricRow]:
    """Per stream by name, then the pooled row: lanes finish in any order, and the rows must not follow it."""
    return sorted(rows, key=lambda r: (r.stream == POOLED, r.stream))
