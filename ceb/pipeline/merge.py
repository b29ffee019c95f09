"""``ceb merge``: the N shard directories of a run (:mod:`ceb.pipeline.shard`) into the run an unsharded one writes.

The parts must be one run split N ways (same fingerprints, streams, limit and N, each ``i`` once, finished, own
lanes only) and each whole by its own plan and summary (every step row once, a hindsight row per bank-lane
trajectory, bank files matching their rows by count and digest); anything else is refused naming the part, the
lane and the ``--resume`` that repairs it, before anything is written. Each part is read under its lock. The
result is built aside and published whole (:meth:`~ceb.pipeline.rundir.RunDir.built_aside`): rows grouped by lane
in unsharded plan order, banks copied, ``summary.json`` summed (``wall_s`` the longest part's, provenance joined by
:func:`~ceb.pipeline.provenance.merge_provenance`). ``metrics.json`` is the caller's.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from ceb.backends.cache import CacheCounts
from ceb.bank import BANK_FORMAT
from ceb.config import RunConfig
from ceb.errors import CEBError, RunError
from ceb.logs import get_logger
from ceb.pipeline.planning import lane_keys
from ceb.pipeline.provenance import merge_provenance
from ceb.pipeline.results import HindsightRow, StepRow, read_hindsight_rows
from ceb.pipeline.resume import diff_fingerprints
from ceb.pipeline.rundir import LIMIT_SETTING, LaneKey, RunDir, lane_name
from ceb.pipeline.shard import Shard, shard_of
from ceb.pipeline.summary import BankSize, Labeller, RunSummary, VoteCounts, summary_doc
from ceb.stages.methods import resolve_method

__all__ = ["MergeResult", "merge_runs"]

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What :func:`merge_runs` wrote.

    Attributes:
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
    steps: list[StepRow] = field(default_factory=list)
    hinds: list[HindsightRow] = field(default_factory=list)

    def __str__(self) -> str:
        return f"part {self.run} (shard {self.shard})"

    @property
    def repair(self) -> str:
        """The command that makes this part whole again, for a message."""
        return (
            f"repair it with `ceb score <its streams> --resume {self.run} --shard {self.shard}` (a grid's part: "
            f"`ceb grid <its grid file> --shard {self.shard} --resume`)"
        )


def _read_part(path: str | Path, locks: contextlib.ExitStack) -> _Part:
    """Read the part at ``path`` under its lock, held in ``locks`` (a part a live ``ceb`` writes is refused)."""
    run = RunDir(path)
    if not run.path.is_dir():
        raise RunError(f"part {run}: no such directory")
    try:
        locks.enter_context(run.lock())
    except RunError as exc:
        raise RunError(f"part {exc}") from None
    if not run.started:
        raise RunError(f"part {run}: no {run.CONFIG}; is it a run directory written by `ceb score --shard`?")
    record = run.record()
    shard = Shard.from_record(run.recorded_shard())
    if shard is None:
        raise RunError(f"part {run}: it has no shard plan (a whole run, not `--shard i/N`); nothing to merge it with")
    part = _Part(run, record, shard, {})
    summary = run.recorded_summary()
    if summary is None:
        raise RunError(f"{part}: no {run.SUMMARY}, so it never finished; {part.repair}")
    if summary.get("status") != "finished":
        raise RunError(f"{part}: status {summary.get('status')!r}, not finished; {part.repair}")
    part.summary = summary
    part.steps = list(run.step_rows())
    if run.hindsight.is_file():
        part.hinds = list(read_hindsight_rows(run.hindsight))
    return part


def _check_alike(first: _Part, part: _Part) -> None:
    """Refuse ``part`` unless it is a shard of the same run as ``first``."""
    where = f"{part} differs from {first}"
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
    """Merge the shard directories ``parts`` (any order) into the new or empty run directory ``out``.

    Raises:
        RunError: A part missing, unfinished, not a shard or unlike the others, a shard twice or missing, rows outside
            a part's lanes, or ``out`` holds a run or is a part (one line naming the part and what differs).
        ConfigError: A part's ``config.json`` cannot be read.
    """
    if not parts:
        raise RunError("no parts to merge")
    target = RunDir(out)
    for p in parts:
        if Path(p).resolve() == target.path.resolve():
            raise RunError(f"--out {target} is one of the parts; merge into a new directory")
    with contextlib.ExitStack() as locks:
        read = sorted((_read_part(p, locks) for p in parts), key=lambda part: part.shard.index)
        return _merge(read, target)


def _merge(read: Sequence[_Part], target: RunDir) -> MergeResult:
    """Merge the parts read (under their locks) into ``target``: :func:`merge_runs` after reading the parts."""
    _check_parts(read)
    first = read[0]
    config = RunConfig.model_validate(first.record["config"])
    plan = _Plan(first.record, config)
    doc = {k: v for k, v in first.record.items() if k != RunDir.SHARD} | {RunDir.MERGED: {"shards": len(read)}}
    _check_target(target, doc)
    steps: list[tuple[int, int, StepRow]] = []
    hinds: list[tuple[int, int, HindsightRow]] = []
    owner: dict[LaneKey, _Part] = {}
    steps_of: dict[tuple[str, str], tuple[int, LaneKey, _Part]] = {}
    for part in read:
        rows: list[StepRow | HindsightRow] = [*part.steps, *part.hinds]
        for row in rows:
            key = _lane_of(row, plan.shared)
            if key not in plan.rank:
                raise RunError(f"{part}: rows of lane {lane_name(key)}, not a lane of the run")
            home = shard_of(key, part.shard.count)
            if home != part.shard.index:
                raise RunError(f"{part}: rows of lane {lane_name(key)}, which is shard {home}/{part.shard.count}'s")
            owner.setdefault(key, part)
            if isinstance(row, StepRow):
                steps.append((plan.rank[key], len(steps), row))
            else:
                hinds.append((plan.rank[key], len(hinds), row))
        _check_part(part, plan, steps_of)
    _check_every_lane(read, plan.keys, owner, first.record)
    for key, part in owner.items():
        if plan.by_key[key].use_bank:
            _check_bank(part, key)
    for part in read:  # what no lane could be named for: rows its summary counts and the rows held differ
        problems = part.run.summary_mismatch(part.summary)
        if problems:
            raise RunError(f"{part}: {'; '.join(problems)}; {part.repair}")
    steps.sort(key=lambda t: t[:2])
    hinds.sort(key=lambda t: t[:2])
    summary = _merged_summary(read, target, plan.rank)
    banks = 0
    with target.built_aside() as stage:
        stage.write_record(doc)
        with stage.writer() as writer:
            for *_, srow in steps:
                writer.write(srow)
            for *_, hrow in hinds:
                writer.write(hrow)
        for key, part in owner.items():
            if plan.by_key[key].use_bank:
                name = part.run.bank_file(key)
                (stage.path / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(part.run.path / name, stage.path / name)
                banks += 1
        started = min(datetime.fromisoformat(p.summary["started_at"]) for p in read)
        stage.write_summary(summary_doc(summary, "finished", "", started))
    log.info("merged shards", out=str(target), parts=len(read), lanes=len(owner))
    return MergeResult(target.path, len(read), len(owner), len(steps), len(hinds), banks, summary, config)


class _Plan:
    """The lanes of the run the parts split, and what each lane must hold (from the first part's record)."""

    def __init__(self, record: Mapping[str, Any], config: RunConfig) -> None:
        methods = [resolve_method(m) for m in config.methods]
        streams = record.get("streams") or {}
        self.keys = lane_keys(list(streams), config, methods)
        self.rank = {key: i for i, (key, _) in enumerate(self.keys)}
        self.by_key = dict(self.keys)
        self.shared = {(k[0], k[2], k[3]) for k, m in self.keys if m.order_free}
        limit = config.max_trajectories
        self.trajectories: dict[str, int] = {}
        for name, entry in streams.items():
            n = entry.get("trajectories") if isinstance(entry, dict) else None
            if isinstance(n, int):
                self.trajectories[name] = n if limit is None else min(n, limit)

    def uses_bank(self, own: LaneKey) -> bool:
        """Whether the lane rows naming ``own`` belong to keeps a bank (so has a hindsight row per trajectory)."""
        stream, order, method, critic = own
        key = (stream, 0, method, critic) if (stream, method, critic) in self.shared else own
        spec = self.by_key.get(key)
        return bool(spec is not None and spec.use_bank)


def _own(row: StepRow | HindsightRow) -> LaneKey:
    """The lane ``row`` names (copies of a shared lane's rows name their own order)."""
    return (row.stream, row.order, row.method, row.critic)


def _check_part(part: _Part, plan: _Plan, steps_of: dict[tuple[str, str], tuple[int, LaneKey, _Part]]) -> None:
    """Refuse ``part`` unless its rows are whole by its own plan and summary (the module docstring lists how)."""
    by_lane: dict[LaneKey, dict[str, set[int]]] = {}
    for srow in part.steps:
        steps = by_lane.setdefault(_own(srow), {}).setdefault(srow.trajectory, set())
        if srow.step in steps:
            raise RunError(
                f"{part}, lane {lane_name(_own(srow))}: the row of trajectory {srow.trajectory} step {srow.step} is "
                f"in {part.run.SCORES} twice; {part.repair}"
            )
        steps.add(srow.step)
    voted: dict[LaneKey, set[str]] = {}
    for hrow in part.hinds:
        seen = voted.setdefault(_own(hrow), set())
        if hrow.trajectory in seen:
            raise RunError(
                f"{part}, lane {lane_name(_own(hrow))}: the hindsight row of trajectory {hrow.trajectory} is in "
                f"{part.run.HINDSIGHT} twice; {part.repair}"
            )
        seen.add(hrow.trajectory)
    for key, trajs in by_lane.items():
        where = f"{part}, lane {lane_name(key)}"
        planned = plan.trajectories.get(key[0])
        if planned is not None and len(trajs) != planned:
            raise RunError(
                f"{where}: step rows of {len(trajs)} trajectories, where its plan has {planned} (rows lost from "
                f"{part.run.SCORES}); {part.repair}"
            )
        for traj, steps in trajs.items():
            if len(steps) != max(steps) + 1:
                lost = sorted(set(range(max(steps) + 1)) - steps)
                raise RunError(
                    f"{where}: trajectory {traj} has no row of step {', '.join(map(str, lost[:5]))}"
                    f"{'...' if len(lost) > 5 else ''} in {part.run.SCORES}; {part.repair}"
                )
            n, other, there = steps_of.setdefault((key[0], traj), (len(steps), key, part))
            if n != len(steps):
                lanes = [(len(steps), where, part), (n, f"{there}, lane {lane_name(other)}", there)]
                (few, short, damaged), (many, full, _) = sorted(lanes, key=lambda t: t[0])
                raise RunError(
                    f"{short}: trajectory {traj} has {few} step rows, {many} in {full} (rows lost from "
                    f"{part.run.SCORES}); {damaged.repair}"
                )
        if plan.uses_bank(key):
            have = voted.get(key, set())
            if have != set(trajs):
                raise RunError(
                    f"{where}: hindsight rows of {len(have & set(trajs))} of its {len(trajs)} trajectories in "
                    f"{part.run.HINDSIGHT} (a bank lane has one per trajectory); {part.repair}"
                )


def _records_digest(records: Sequence[Any]) -> str:
    """A digest of bank records (``BankRecord`` fields as JSON objects), the same for the same records in order."""
    return hashlib.blake2b(orjson.dumps(list(records), option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()


def _check_bank(part: _Part, key: LaneKey) -> None:
    """Refuse ``part`` unless lane ``key``'s bank file is the bank its hindsight rows and summary describe."""
    name = part.run.bank_file(key)
    where = f"{part}, lane {lane_name(key)}: bank file {name}"
    try:
        doc = orjson.loads((part.run.path / name).read_bytes())
    except FileNotFoundError:
        raise RunError(f"{part}, lane {lane_name(key)}: no bank file {name}; {part.repair}") from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise RunError(f"{where} cannot be read ({exc}); {part.repair}") from None
    records = doc.get("records") if isinstance(doc, dict) else None
    if not isinstance(records, list):
        raise RunError(f"{where} is not a bank (no list of records); {part.repair}")
    counted = [
        b.get("records") for b in part.summary.get("banks") or [] if isinstance(b, dict) and b.get("path") == name
    ]
    if counted and counted[0] != len(records):
        raise RunError(
            f"{where} holds {len(records)} records, where {part.run.SUMMARY} counts {counted[0]}; {part.repair}"
        )
    rows = [r for hrow in part.hinds if _own(hrow) == key for r in hrow.records]
    if doc.get("format") == BANK_FORMAT:
        if len(rows) != len(records):
            raise RunError(
                f"{where} holds {len(records)} records, where its {part.run.HINDSIGHT} rows added {len(rows)}; "
                f"{part.repair}"
            )
        if _records_digest(records) != _records_digest(rows):
            raise RunError(f"{where} holds other records than its {part.run.HINDSIGHT} rows added; {part.repair}")
    else:
        added = {_records_digest([r]) for r in rows}
        if any(_records_digest([r]) not in added for r in records):
            raise RunError(f"{where} holds records its {part.run.HINDSIGHT} rows never added; {part.repair}")


def _check_target(target: RunDir, doc: Mapping[str, Any]) -> None:
    """Refuse ``target`` when it holds a run, unless it is a merge of these parts cut short (then cleared)."""
    if not (target.started or target.has_scores):
        return
    try:
        target.require_readable()
    except RunError:
        mine = {k: v for k, v in doc.items() if k != RunDir.MERGED}
        try:
            record = {k: v for k, v in target.record().items() if k != RunDir.MERGED}
        except CEBError:
            record = None
        if record == mine:
            log.warning("building again a merge that did not finish", out=str(target))
            target.remove_results()
            return
        raise RunError(
            f"{target} holds an incomplete run that is not a merge of these parts; merge into a new directory"
        ) from None
    raise RunError(f"{target} already holds a run; merge into a new directory")


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
            raise RunError(f"{part}: no rows of its lane {lane_name(key)}; {part.repair}")


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
