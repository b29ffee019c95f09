"""Merging the shards of a run (``ceb merge``): N part directories, one run directory an unsharded run would write.

Each part is a run directory written by ``ceb score --shard i/N`` or ``ceb grid --shard i/N``
(:mod:`ceb.pipeline.shard`). The parts must be one run split N ways: the same recorded fingerprints (settings
and stream contents), streams and trajectory limit, the same N, each ``i`` once, each finished, and each holding
rows of its own lanes only, every lane with its rows. Anything else is refused in one line naming the part and
what differs, before anything is written.

The merged directory holds ``config.json`` (the parts' record without the shard plan), ``scores.jsonl`` and
``hindsight.jsonl`` (every part's rows, grouped by lane in the order an unsharded run plans its lanes, each
lane's rows in the order its part wrote them), ``banks/`` (each lane's bank file, copied) and ``summary.json``
(counts summed, ``wall_s`` the longest part's, status ``finished``, the parts' provenance joined: parts scored by
another model, or asked it otherwise, are refused, :func:`~ceb.pipeline.provenance.merge_provenance`).
``metrics.json`` is computed from the merged
rows by the caller (``ceb merge``), as after ``ceb score``: the evaluation layer sits above this one.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from ceb.backends.cache import CacheCounts
from ceb.config import RunConfig
from ceb.errors import RunError
from ceb.pipeline.planning import lane_keys
from ceb.pipeline.provenance import merge_provenance
from ceb.pipeline.results import HindsightRow, StepRow, read_hindsight_rows
from ceb.pipeline.resume import diff_fingerprints
from ceb.pipeline.reuse import shares_orders
from ceb.pipeline.rundir import LIMIT_SETTING, LaneKey, RunDir, lane_name
from ceb.pipeline.shard import Shard, shard_of
from ceb.pipeline.summary import BankSize, Labeller, RunSummary, VoteCounts, summary_doc
from ceb.stages.methods import resolve_method

__all__ = ["MergeResult", "merge_runs"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What :func:`merge_runs` wrote.

    Attributes:
        out: The merged run directory.
        parts: How many parts were merged (N).
        lanes: Lanes in the merged run.
        step_rows: Rows written to ``scores.jsonl``.
        hindsight_rows: Rows written to ``hindsight.jsonl``.
        banks: Bank files copied.
        summary: The merged counts (as ``summary.json`` has them).
        config: The run's recorded configuration (its ``ece_bins`` for the metrics).
    """

    out: Path
    parts: int
    lanes: int
    step_rows: int
    hindsight_rows: int
    banks: int
    summary: RunSummary
    config: RunConfig


@dataclass
class _Part:
    run: RunDir
    record: dict[str, Any]
    shard: Shard
    summary: dict[str, Any]


def _read_part(path: str | Path) -> _Part:
    run = RunDir(path)
    if not run.path.is_dir():
        raise RunError(f"part {run}: no such directory")
    if not run.started:
        raise RunError(f"part {run}: no {run.CONFIG}; is it a run directory written by `ceb score --shard`?")
    record = run.record()
    shard = Shard.from_record(run.recorded_shard())
    if shard is None:
        raise RunError(f"part {run}: it has no shard plan (a whole run, not `--shard i/N`); nothing to merge it with")
    summary = run.recorded_summary()
    if summary is None:
        raise RunError(f"part {run} (shard {shard}): no {run.SUMMARY}, so it never finished; continue it with --resume")
    if summary.get("status") != "finished":
        raise RunError(
            f"part {run} (shard {shard}): status {summary.get('status')!r}, not finished; continue it with --resume "
            f"and --shard {shard}"
        )
    return _Part(run, record, shard, summary)


def _check_alike(first: _Part, part: _Part) -> None:
    """Refuse ``part`` unless it is a shard of the same run as ``first``."""
    where = f"part {part.run} (shard {part.shard}) differs from part {first.run} (shard {first.shard})"
    if part.shard.count != first.shard.count:
        raise RunError(f"{where}: shard count {part.shard.count}, not {first.shard.count}")
    streams, first_streams = list(part.record.get("streams") or {}), list(first.record.get("streams") or {})
    if streams != first_streams:
        raise RunError(f"{where}: streams {', '.join(streams)}, not {', '.join(first_streams)}")
    changes = diff_fingerprints(first.record.get("fingerprints") or {}, part.record.get("fingerprints") or {})
    if changes:
        raise RunError(f"{where}: {'; '.join(changes)}")
    limits = [(p.record.get("config") or {}).get(LIMIT_SETTING) for p in (first, part)]
    if limits[0] != limits[1]:
        raise RunError(f"{where}: setting {LIMIT_SETTING} {limits[1]!r}, not {limits[0]!r}")


def _check_parts(parts: Sequence[_Part]) -> None:
    """Refuse parts that are not one run split N ways: unlike, the same shard twice, or a shard left out."""
    first = parts[0]
    seen: dict[int, _Part] = {}
    for part in parts:
        _check_alike(first, part)
        if part.shard.index in seen:
            raise RunError(f"part {part.run}: shard {part.shard} again (also part {seen[part.shard.index].run})")
        seen[part.shard.index] = part
    missing = [f"{i}/{first.shard.count}" for i in range(first.shard.count) if i not in seen]
    if missing:
        raise RunError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing: no part holds them")


def _lane_of(row: StepRow | HindsightRow, shared: set[tuple[str, str, str]]) -> LaneKey:
    """The lane that wrote ``row``: a shared lane (order 0) for a bank-free method whose orders are shared."""
    if (row.stream, row.method, row.critic) in shared:
        return (row.stream, 0, row.method, row.critic)
    return (row.stream, row.order, row.method, row.critic)


def merge_runs(parts: Sequence[str | Path], out: str | Path) -> MergeResult:
    """Merge the shard directories ``parts`` into the new run directory ``out``.

    Args:
        parts: The N part directories, in any order.
        out: A new (or empty) directory, none of the parts.

    Returns:
        What was written.

    Raises:
        RunError: A part is missing, not a shard, not finished, unlike the others (settings, streams, limit,
            shard count), a shard twice or one left out, rows of a lane outside its part's shard or a lane of
            none, or ``out`` already holds a run or is a part (each in one line naming the part and what differs).
        ConfigError: A part's ``config.json`` cannot be read.
    """
    if not parts:
        raise RunError("no parts to merge")
    target = RunDir(out)
    for p in parts:
        if Path(p).resolve() == target.path.resolve():
            raise RunError(f"--out {target} is one of the parts; merge into a new directory")
    read = sorted((_read_part(p) for p in parts), key=lambda part: part.shard.index)
    _check_parts(read)
    if target.started or target.has_scores:
        raise RunError(f"{target} already holds a run; merge into a new directory")
    first = read[0]
    config = RunConfig.model_validate(first.record["config"])
    methods = [resolve_method(m) for m in config.methods]
    keys = lane_keys(list(first.record.get("streams") or {}), config, methods)
    rank = {key: i for i, (key, _) in enumerate(keys)}
    by_key = dict(keys)
    shared = {(k[0], k[2], k[3]) for k, m in keys if shares_orders(config) and m.order_free}
    steps: list[tuple[int, int, StepRow]] = []
    hinds: list[tuple[int, int, HindsightRow]] = []
    owner: dict[LaneKey, _Part] = {}
    for part in read:
        rows: list[StepRow | HindsightRow] = list(part.run.step_rows())
        if part.run.hindsight.is_file():
            rows += list(read_hindsight_rows(part.run.hindsight))
        for row in rows:
            key = _lane_of(row, shared)
            if key not in rank:
                raise RunError(
                    f"part {part.run} (shard {part.shard}): rows of lane {lane_name(key)}, not a lane of the run"
                )
            home = shard_of(key, part.shard.count)
            if home != part.shard.index:
                raise RunError(
                    f"part {part.run} (shard {part.shard}): rows of lane {lane_name(key)}, which is shard "
                    f"{home}/{part.shard.count}'s"
                )
            owner.setdefault(key, part)
            if isinstance(row, StepRow):
                steps.append((rank[key], len(steps), row))
            else:
                hinds.append((rank[key], len(hinds), row))
    _check_every_lane(read, keys, owner, first.record)
    for key, part in owner.items():
        if by_key[key].use_bank and not (part.run.path / part.run.bank_file(key)).is_file():
            raise RunError(f"part {part.run} (shard {part.shard}): no bank file {part.run.bank_file(key)}")
    steps.sort(key=lambda t: t[:2])
    hinds.sort(key=lambda t: t[:2])
    summary = _merged_summary(read, target, rank)
    with target.lock():
        target.path.mkdir(parents=True, exist_ok=True)
        doc = {k: v for k, v in first.record.items() if k != RunDir.SHARD}
        target.write_record(doc)
        with target.writer() as writer:
            for *_, srow in steps:
                writer.write(srow)
            for *_, hrow in hinds:
                writer.write(hrow)
        banks = 0
        for key, part in owner.items():
            if by_key[key].use_bank:
                name = part.run.bank_file(key)
                (target.path / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(part.run.path / name, target.path / name)
                banks += 1
        started = min(datetime.fromisoformat(p.summary["started_at"]) for p in read)
        target.write_summary(summary_doc(summary, "finished", "", started))
    log.info("merged shards", out=str(target), parts=len(read), lanes=len(owner))
    return MergeResult(target.path, len(read), len(owner), len(steps), len(hinds), banks, summary, config)


def _check_every_lane(
    parts: Sequence[_Part],
    keys: Sequence[tuple[LaneKey, Any]],
    owner: Mapping[LaneKey, _Part],
    record: Mapping[str, Any],
) -> None:
    """Refuse when a lane of a stream with trajectories has no rows in the part whose shard it is."""
    counts = {name: (s or {}).get("trajectories", 1) for name, s in (record.get("streams") or {}).items()}
    by_index = {p.shard.index: p for p in parts}
    for key, _ in keys:
        if key not in owner and counts.get(key[0], 1):
            part = by_index[shard_of(key, parts[0].shard.count)]
            raise RunError(f"part {part.run} (shard {part.shard}): no rows of its lane {lane_name(key)}")


def _merged_summary(parts: Sequence[_Part], target: RunDir, rank: Mapping[LaneKey, int]) -> RunSummary:
    """The parts' summaries as one: counts summed, the longest wall time, banks in lane order."""
    merged = RunSummary(run_dir=target.path)
    counts = [f.name for f in fields(RunSummary) if f.type in ("int", int)]
    caches: list[CacheCounts] = []
    try:
        for part in parts:
            doc = part.summary
            for name in counts:
                setattr(merged, name, getattr(merged, name) + int(doc.get(name) or 0))
            merged.wall_s = max(merged.wall_s, float(doc.get("wall_s") or 0.0))
            merged.banks += [BankSize(**b) for b in doc.get("banks") or []]
            for stream, votes in (doc.get("hindsight_votes") or {}).items():
                total = merged.hindsight_votes.setdefault(stream, VoteCounts())
                for f in fields(VoteCounts):
                    setattr(total, f.name, getattr(total, f.name) + int(votes.get(f.name) or 0))
            if not merged.hindsight_labellers:
                merged.hindsight_labellers = [Labeller(**lab) for lab in doc.get("hindsight_labellers") or []]
            if doc.get("cache"):
                caches.append(CacheCounts(**doc["cache"]))
    except (TypeError, ValueError) as exc:
        raise RunError(f"part {part.run}: {part.run.summary_file} is not a summary this ceb reads ({exc})") from exc
    merged.provenance = merge_provenance([(str(p.run), p.summary.get("provenance")) for p in parts])
    merged.banks.sort(key=lambda b: (rank.get((b.stream, b.order, b.method, b.critic), len(rank)), b.order))
    if caches:
        merged.cache = CacheCounts.total(caches)
    return merged
