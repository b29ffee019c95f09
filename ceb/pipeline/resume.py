"""Resuming a run directory: fingerprints of what a run depends on, and the restore of every lane's progress.

Each ``hindsight.jsonl`` line carries the bank records its trajectory added, written in one ``write``: it is the
bank's append-only checkpoint (a torn last line is ignored). A lane resumes after its last complete trajectory
(every step finished, its hindsight row there), its bank rebuilt from those records, at the first step without a
finished row (failed steps are retried); later rows of the lane are dropped. Pooled bank-free methods
(:mod:`ceb.pipeline.pool`) keep their finished source rows (``static``: each trajectory's finished prefix) and
drop copies. A shard resumes only as the same shard. A resume is refused when the streams or a result-affecting
setting differ from ``config.json``, naming each change; endpoints, concurrency, timeouts, retry waits and the
failure budget may differ, and ``max_trajectories`` may grow but not shrink.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from ceb.bank import Bank, BankRecord
from ceb.config import RunConfig
from ceb.data.trajectory import Trajectory
from ceb.errors import RunError, with_path
from ceb.pipeline.pool import shares_orders
from ceb.pipeline.results import HindsightRow, StepRow, read_hindsight_rows, read_step_rows
from ceb.pipeline.rundir import LIMIT_SETTING, LaneKey, RunDir

__all__ = [
    "ADDED_SETTINGS",
    "STREAM_FINGERPRINT",
    "NEW_SECTIONS",
    "SERVING_SECTIONS",
    "VOLATILE_SETTINGS",
    "LaneProgress",
    "check_resumable",
    "check_shard",
    "config_fingerprint",
    "diff_fingerprints",
    "legacy_stream_fingerprint",
    "limit_may_follow",
    "restore_progress",
    "stream_fingerprint",
]

VOLATILE_SETTINGS: frozenset[str] = frozenset(
    {
        "backend.base_url",
        "backend.api_key_env",
        "backend.timeout_s",
        "backend.max_concurrency",
        "backend.max_attempts",
        "backend.backoff_s",
        "backend.max_backoff_s",
        "hindsight.base_url",
        "hindsight.api_key_env",
        "cache.mode",
        "cache.path",
        "cache.nondeterministic",
        "max_active_lanes",
        "speculation",
        "fail_on_error",
        "ece_bins",
    }
)
"""Settings (dotted paths) that cannot change a result; they may differ between a run and its resume."""

NEW_SECTIONS: tuple[str, ...] = ("bank.", "hindsight.model")
"""Settings (dotted-path prefixes) added after runs were first recorded: left out of the fingerprint while they
hold their defaults, so that a run started before they existed still resumes (its defaults were the behaviour)."""

SERVING_SECTIONS: tuple[str, ...] = ("gate.", "serve.")
"""Settings (dotted-path prefixes) that only the live gate reads (``ceb serve``): they change no result of a
scoring run, so they are left out of its fingerprint."""

ADDED_SETTINGS: Mapping[str, object] = {
    "reuse_bank_free": False,
    "ceb.repetition_reading": "chars",
    "ceb.repetition_prefix_fraction": 0.9,
}
"""Settings added later -> the behaviour of runs that predate them (a recorded fingerprint without one reads so).

Older runs read ``ceb.repetition_reading`` as ``chars`` (first 40 characters); resuming one needs that value."""


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out |= _flat(v, path + ".")
        else:
            out[path] = v
    return out


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def config_fingerprint(config: RunConfig) -> tuple[str, dict[str, Any]]:
    """Hash the result-affecting settings of ``config``.

    Returns:
        ``(sha256 hex, {dotted path: value})`` of every setting except :data:`VOLATILE_SETTINGS`, the
        trajectory limit, :data:`SERVING_SECTIONS`, and settings of :data:`NEW_SECTIONS` at their defaults.
        ``reuse_bank_free`` records whether the run copies bank-free rows between orders
        (:func:`ceb.pipeline.pool.shares_orders`; the switch it is named after is gone, and copying is the only way).
    """
    skip = VOLATILE_SETTINGS | {LIMIT_SETTING}
    defaults = _flat(RunConfig().model_dump(mode="json"))
    flat = {
        k: v
        for k, v in _flat(config.model_dump(mode="json")).items()
        if k not in skip
        and not k.startswith(SERVING_SECTIONS)
        and not (k.startswith(NEW_SECTIONS) and v == defaults.get(k))
    }
    flat["reuse_bank_free"] = shares_orders(config)
    return _digest(orjson.dumps(flat, option=orjson.OPT_SORT_KEYS)), flat


STREAM_FINGERPRINT = 2
"""Version of :func:`stream_fingerprint`: 2 hashes content only; 1 (a bare SHA-256, ``source`` included) is
checked with :func:`legacy_stream_fingerprint`."""


def stream_fingerprint(trajectories: Iterable[Trajectory]) -> dict[str, Any]:
    """What a resume and ``ceb merge`` compare of a stream: every field of every trajectory in order, except ``source``.

    Returns:
        ``{"version": 2, "trajectories": n, "ids_sha256": ..., "sha256": ...}`` (count, ids in order, content in
        order), read apart by :func:`diff_fingerprints`.
    """
    content, ids, n = hashlib.sha256(), hashlib.sha256(), 0
    for t in trajectories:
        content.update(orjson.dumps(replace(t, source=""), option=orjson.OPT_SORT_KEYS))
        content.update(b"\n")
        ids.update(orjson.dumps(t.id) + b"\n")
        n += 1
    return {
        "version": STREAM_FINGERPRINT,
        "trajectories": n,
        "ids_sha256": ids.hexdigest(),
        "sha256": content.hexdigest(),
    }


def legacy_stream_fingerprint(trajectories: Iterable[Trajectory]) -> str:
    """Version 1 of :func:`stream_fingerprint` (file paths included), to check a run that recorded it."""
    h = hashlib.sha256()
    for t in trajectories:
        h.update(orjson.dumps(t, option=orjson.OPT_SORT_KEYS))
        h.update(b"\n")
    return h.hexdigest()


def _stream_change(name: str, old: Any, new: Any, legacy: str | None) -> str | None:
    """What changed in stream ``name`` between its recorded fingerprint ``old`` and ``new``; ``None``: nothing."""
    if isinstance(old, str) or isinstance(new, str):
        if isinstance(old, str) and isinstance(new, str):
            same = old == new
        else:
            same = (old if isinstance(old, str) else new) == legacy
        if same:
            return None
        return (
            f"stream {name}: content changed, or its files are named by other paths than when the run started (the "
            f"run's fingerprint was recorded by an older ceb, which hashed each file's path; give the files as its "
            f"{RunDir.CONFIG} records them)"
        )
    if old == new:
        return None
    n_old, n_new = old.get("trajectories"), new.get("trajectories")
    if n_old != n_new:
        return f"stream {name}: {n_old} trajectories in the run, {n_new} now"
    if old.get("ids_sha256") != new.get("ids_sha256"):
        return f"stream {name}: the same number of trajectories ({n_new}), but other ids or another order"
    return (
        f"stream {name}: content changed (the same {n_new} trajectory ids in the same order; their steps, labels or "
        f"fields differ)"
    )


def diff_fingerprints(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between the recorded fingerprints and ``current`` (both with ``config`` and ``streams``).

    A recorded version-1 stream fingerprint is checked against ``current["legacy_streams"]``
    (:func:`legacy_stream_fingerprint`).

    Returns:
        One line per difference, e.g. ``"setting ceb.k: 2 -> 3"``; empty when the resume may proceed.
    """
    out: list[str] = []
    old_c, new_c = recorded.get("config", {}), current.get("config", {})
    for key in sorted(set(old_c) | set(new_c)):
        old_v = old_c.get(key, ADDED_SETTINGS.get(key, "<unset>"))
        new_v = new_c.get(key, ADDED_SETTINGS.get(key, "<unset>"))
        if old_v != new_v:
            out.append(f"setting {key}: {old_v!r} -> {new_v!r}")
    old_s, new_s = recorded.get("streams", {}), current.get("streams", {})
    legacy = current.get("legacy_streams") or {}
    for name in sorted(set(old_s) | set(new_s)):
        if name not in new_s:
            out.append(f"stream {name}: in the run, missing now")
        elif name not in old_s:
            out.append(f"stream {name}: not in the run")
        elif (change := _stream_change(name, old_s[name], new_s[name], legacy.get(name))) is not None:
            out.append(change)
    return out


@dataclass
class LaneProgress:
    """Where a lane resumes.

    Attributes:
        position: Position (in the lane's order) of the first trajectory that is not complete.
        prefix: Scores of the steps of that trajectory already scored, in step order (they are not rescored).
    """

    position: int = 0
    prefix: list[float | None] = field(default_factory=list)
    bank: Bank | None = None
    kept_steps: list[StepRow] = field(default_factory=list)
    kept_hindsight: list[HindsightRow] = field(default_factory=list)


def _key(row: StepRow | HindsightRow) -> LaneKey:
    return (row.stream, row.order, row.method, row.critic)


def restore_progress(
    run_dir: RunDir,
    lanes: Mapping[LaneKey, tuple[Sequence[Trajectory], Callable[[], Bank] | None]],
    pooled: Mapping[LaneKey, bool] | None = None,
) -> dict[LaneKey, LaneProgress]:
    """Work out each lane's resume point, rebuild its bank, and rewrite the result files to the kept rows.

    Args:
        run_dir: The run directory to resume.
        lanes: Lane -> (its trajectories in order, its empty bank's factory or ``None`` without a bank).
        pooled: The pooled keys of ``lanes`` (:mod:`ceb.pipeline.pool`), each with whether its steps read its own
            earlier scores (then only a trajectory's finished prefix is kept); copies are never kept.

    Raises:
        RunError: A result file has a bad line before its last (names file and line).
    """
    scores, hindsight = run_dir.scores, run_dir.hindsight
    step_rows = list(read_step_rows(scores)) if scores.exists() else []
    hind_rows = list(read_hindsight_rows(hindsight)) if hindsight.exists() else []
    pooled = pooled or {}
    groups = {(stream, method, critic): (stream, order, method, critic) for stream, order, method, critic in pooled}

    def key_of(row: StepRow) -> LaneKey:
        return groups.get((row.stream, row.method, row.critic)) or _key(row)

    steps: dict[tuple[LaneKey, str, int], StepRow] = {}
    for row in step_rows:
        if row.reused_from is None:
            steps[(key_of(row), row.trajectory, row.step)] = row
    hinds: dict[tuple[LaneKey, str], HindsightRow] = {(_key(r), r.trajectory): r for r in hind_rows}

    progress: dict[LaneKey, LaneProgress] = {}
    keep_steps: set[int] = set()
    keep_hinds: set[int] = set()
    for key, (trajectories, bank_factory) in lanes.items():
        use_bank = bank_factory is not None
        prog = LaneProgress(bank=bank_factory() if bank_factory is not None else None)
        for position, traj in enumerate(trajectories):
            prefix: list[float | None] = []
            for t in range(len(traj.steps)):
                srow = steps.get((key, traj.id, t))
                if srow is None or not srow.finished:
                    if pooled.get(key) is False:  # a baseline's steps are independent: keep its later rows too
                        continue
                    break
                prefix.append(srow.score)
                keep_steps.add(id(srow))
            if key in pooled:  # the pool scores what each trajectory lacks; there is no position to stop at
                continue
            hrow = hinds.get((key, traj.id)) if use_bank else None
            complete = len(prefix) == len(traj.steps) and (not use_bank or hrow is not None)
            if not complete:
                prog.position, prog.prefix = position, prefix
                break
            if hrow is not None and prog.bank is not None:
                keep_hinds.add(id(hrow))
                prog.bank.add_trajectory(BankRecord(**r) for r in hrow.records)
        else:
            prog.position = len(trajectories)
        progress[key] = prog
    kept_steps = [r for r in step_rows if id(r) in keep_steps]
    kept_hinds = [r for r in hind_rows if id(r) in keep_hinds]
    for srow in kept_steps:
        progress[key_of(srow)].kept_steps.append(srow)
    for hrow in kept_hinds:
        progress[_key(hrow)].kept_hindsight.append(hrow)
    _rewrite(scores, kept_steps)
    _rewrite(hindsight, kept_hinds)
    return progress


def _rewrite(path: Path, rows: Sequence[StepRow | HindsightRow]) -> None:
    """Replace ``path`` with ``rows`` atomically (write a sibling, fsync, rename), in the current layout."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        with tmp.open("wb") as f:
            for row in rows:
                f.write(orjson.dumps(row) + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise with_path(exc, path) from exc


def limit_may_follow(recorded: int | None, current: int | None) -> bool:
    """Whether a run limited to ``recorded`` trajectories may resume with limit ``current`` (``None``: none)."""
    if recorded is None:
        return current is None
    return current is None or current >= recorded


def check_shard(run_dir: RunDir, shard: Mapping[str, int] | None) -> None:
    """Refuse to resume ``run_dir`` with another shard plan than the one it recorded (``None``: unsharded).

    Raises:
        RunError: The plans differ (both named).
    """
    recorded = run_dir.recorded_shard()
    if recorded != (dict(shard) if shard is not None else None):

        def name(plan: Mapping[str, Any] | None) -> str:
            return "unsharded" if plan is None else f"shard {plan.get('index')}/{plan.get('count')}"

        raise RunError(
            f"cannot resume {run_dir}: it was run {name(recorded)}, this resume asks for {name(shard)}; resume it "
            f"with {'no --shard' if recorded is None else '--shard ' + name(recorded).split()[1]}"
        )


def check_resumable(
    run_dir: RunDir, current: Mapping[str, Any], streams: Mapping[str, Sequence[Trajectory]] | None = None
) -> None:
    """Refuse to resume ``run_dir`` when its recorded fingerprints differ from ``current``.

    ``current["limit"]``, when given, is checked by :func:`limit_may_follow`; ``streams`` serves version-1 records.

    Raises:
        RunError: ``config.json`` is unreadable or has no fingerprints, or something changed (each change named).
    """
    recorded, recorded_limit = run_dir.recorded_fingerprints()
    old = {name: fp for name, fp in (recorded.get("streams") or {}).items() if isinstance(fp, str)}
    if old and streams is not None:
        legacy = {name: legacy_stream_fingerprint(streams[name]) for name in old if name in streams}
        current = {**current, "legacy_streams": legacy}
    changes = diff_fingerprints(recorded, current)
    if "limit" in current and not limit_may_follow(recorded_limit, current["limit"]):
        changes.append(
            f"setting {LIMIT_SETTING}: {recorded_limit!r} -> {current['limit']!r} (a resume may raise the limit, "
            f"not lower it)"
        )
    if changes:
        raise RunError(
            f"cannot resume {run_dir}: the input or the configuration changed since the run started:\n  "
            + "\n  ".join(changes)
            + "\nRun with the original streams and settings, or start a new output directory."
        )
