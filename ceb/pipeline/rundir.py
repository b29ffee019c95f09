"""The run directory: the one place that names its files, holds its lock and reads what a run recorded.

Layout::

    config.json        the effective configuration, the input streams and the fingerprints a resume checks
    scores.jsonl       one row per scored step per method (StepRow)
    hindsight.jsonl    one row per trajectory per bank-using method (HindsightRow)
    banks/             each lane's final bank, stream__method[__o<order>][__<critic>] (listed in summary.json)
    metrics.json       ECE, Brier, AUROC per stream, order and method, and pooled per order and method
    summary.json       how the last call of ``run_scoring`` ended and what it did (:mod:`ceb.pipeline.summary`)
    report/            ``ceb report``'s default output
    regeneration/      ``ceb regenerate``'s default output (:class:`~ceb.pipeline.regenerate.RegenerationDir`)
    parts/             a Ray launch's shards, shard<i>of<N>, one run directory each (:mod:`ceb.pipeline.ray_launch`)
    .lock              held by the one process using the directory (:mod:`ceb.dirlock`)

A run built elsewhere (``ceb merge``) is published by one rename (:meth:`RunDir.built_aside`); a run is read only
when complete or being written (:meth:`RunDir.require_readable`). No other module spells a file name
(``tests/pipeline/test_rundir.py`` checks the source).
"""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import ValidationError

from ceb.config import RunConfig, read_settings_file
from ceb.data.trajectory import Trajectory
from ceb.dirlock import dir_lock, lock_holder
from ceb.errors import CEBError, ConfigError, RunError, with_path
from ceb.logs import get_logger
from ceb.version import __version__

if TYPE_CHECKING:
    # The row types load the stages, the bank and scikit-learn: imported where rows are read or written, so that
    # finding a directory's files (``ceb report`` refusing a missing run) stays light.
    from ceb.pipeline.results import ResultWriter, StepRow

__all__ = ["LIMIT_SETTING", "STEP_COUNTS", "LaneKey", "RunDir", "lane_name", "write_atomic"]

log = get_logger(__name__)

LaneKey = tuple[str, int, str, str]
"""A lane's identity: (stream, order, method, critic label)."""

LIMIT_SETTING = "max_trajectories"
"""The trajectory limit's key in the recorded configuration; a resume may raise it (:mod:`ceb.pipeline.resume`)."""


STEP_COUNTS = ("steps_scored", "steps_failed", "steps_unavailable", "steps_reused")
"""The counts of ``summary.json`` (:class:`ceb.pipeline.summary.RunSummary`) whose sum is the rows of
``scores.jsonl``; ``trajectories_voted`` is the rows of ``hindsight.jsonl``."""


def lane_name(key: LaneKey) -> str:
    """File-name form of a lane: ``stream__method``, with ``__o<order>`` and ``__<critic>`` when set."""
    stream, order, method, critic = key
    return f"{stream}__{method}" + (f"__o{order}" if order else "") + (f"__{critic}" if critic else "")


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so a reader sees the old file or the new one, never a part.

    Raises:
        OSError: The write failed (a full disk, say), naming ``path``; the old file is left as it was.
    """
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise with_path(exc, path) from exc


def _dump(doc: Mapping[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2)


class RunDir:
    """A run directory (layout in :mod:`ceb.pipeline.rundir`); nothing touches the disk until a method is called."""

    CONFIG = "config.json"
    SCORES = "scores.jsonl"
    HINDSIGHT = "hindsight.jsonl"
    METRICS = "metrics.json"
    SUMMARY = "summary.json"
    BANKS = "banks"
    REPORT = "report"
    REGENERATION = "regeneration"
    LOCK = ".lock"
    SHARD = "shard"
    """The key of ``config.json`` holding a sharded run's shard plan (:meth:`recorded_shard`)."""
    PARTS = "parts"
    """The folder of a Ray launch's shards (:meth:`part`, :meth:`parts`)."""
    MERGED = "merged"
    """The key of a merged run's ``config.json`` saying so: ``{"shards": N}`` (:mod:`ceb.pipeline.merge`)."""
    BUILDING = ".building"
    """Suffix of the sibling ``.<name>.building`` a run is built in before it is published (:meth:`built_aside`)."""
    RESULTS = (CONFIG, SCORES, HINDSIGHT, METRICS, SUMMARY)
    """The files an ``overwrite`` removes (with the banks); nothing else of the directory is touched."""

    __slots__ = ("path",)

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __str__(self) -> str:
        return str(self.path)

    @property
    def config_file(self) -> Path:
        """``config.json``: the recorded configuration, streams and fingerprints."""
        return self.path / self.CONFIG

    @property
    def scores(self) -> Path:
        """``scores.jsonl``: one :class:`~ceb.pipeline.results.StepRow` per line."""
        return self.path / self.SCORES

    @property
    def hindsight(self) -> Path:
        """``hindsight.jsonl``: one :class:`~ceb.pipeline.results.HindsightRow` per line."""
        return self.path / self.HINDSIGHT

    @property
    def metrics_file(self) -> Path:
        """``metrics.json`` (:func:`ceb.eval.run_metrics`)."""
        return self.path / self.METRICS

    @property
    def summary_file(self) -> Path:
        """``summary.json`` (:mod:`ceb.pipeline.summary`)."""
        return self.path / self.SUMMARY

    @property
    def report_dir(self) -> Path:
        """``report/``: where ``ceb report`` writes unless told otherwise."""
        return self.path / self.REPORT

    @property
    def regeneration_dir(self) -> Path:
        """``regeneration/``: where ``ceb regenerate`` writes unless told otherwise."""
        return self.path / self.REGENERATION

    def table(self, name: str) -> Path:
        """The rows file of table ``name`` (``"scores"`` or ``"hindsight"``).

        Raises:
            ValueError: Another name.
        """
        tables = {"scores": self.scores, "hindsight": self.hindsight}
        if name not in tables:
            raise ValueError(f"unknown table {name!r}; choose one of: {', '.join(tables)}")
        return tables[name]

    def part(self, index: int, count: int) -> RunDir:
        """The run directory of shard ``index`` of ``count`` of a run launched on Ray: ``parts/shard<i>of<N>``."""
        return RunDir(self.path / self.PARTS / f"shard{index}of{count}")

    def parts(self) -> list[RunDir]:
        """The shard directories under ``parts/`` that recorded a run, in name order (empty without any)."""
        folder = self.path / self.PARTS
        if not folder.is_dir():
            return []
        return [RunDir(p) for p in sorted(folder.iterdir()) if RunDir(p).started]

    def bank_file(self, key: LaneKey) -> str:
        """Where lane ``key``'s bank is saved, relative to the directory (``banks/<lane name>.json``)."""
        return f"{self.BANKS}/{lane_name(key)}.json"

    @property
    def started(self) -> bool:
        """Whether a run recorded its start here (``config.json`` exists)."""
        return self.config_file.is_file()

    @property
    def has_scores(self) -> bool:
        """Whether ``scores.jsonl`` exists (a run wrote rows here, maybe only failures)."""
        return self.scores.is_file()

    def require_run(self) -> None:
        """Check that the directory holds a run a resume can continue (it has ``config.json``).

        Raises:
            RunError: The directory is missing, has no ``config.json`` (names what it holds), or a live process has it.
        """
        where = f"cannot resume {self.path}"
        if not self.path.exists():
            raise RunError(f"{where}: no such directory; to start a new run there, leave out --resume")
        if not self.path.is_dir():
            raise RunError(f"{where}: not a directory")
        if self.started:
            return
        holder = lock_holder(self.path, self.LOCK)
        if holder is not None:  # a run starting there has not written config.json yet
            raise RunError(
                f"{where}: it is in use by another ceb process (pid {holder}), which is starting a run there; wait "
                f"for it to end"
            )
        results = (self.SCORES, self.HINDSIGHT, self.BANKS, self.METRICS, self.SUMMARY)
        held = [name for name in results if (self.path / name).exists()]
        if not held:
            raise RunError(f"{where}: it holds no run (no {self.CONFIG}); to start a new run there, leave out --resume")
        raise RunError(
            f"{where}: it has {', '.join(held)} but no {self.CONFIG}, the record of the streams and settings a "
            f"resume must match; put {self.CONFIG} back, or score again into a new directory (or with --overwrite)"
        )

    def lock(self) -> AbstractContextManager[None]:
        """Hold the directory's lock for a block (:func:`ceb.dirlock.dir_lock`).

        Raises:
            RunError: Another process holds it, or the directory cannot be created.
        """
        return dir_lock(self.path, self.LOCK)

    def writer(self) -> ResultWriter:
        """A :class:`~ceb.pipeline.results.ResultWriter` appending to ``scores.jsonl`` and ``hindsight.jsonl``."""
        from ceb.pipeline.results import ResultWriter

        return ResultWriter(self.scores, self.hindsight)

    def step_rows(self) -> Iterator[StepRow]:
        """The rows of ``scores.jsonl`` (:func:`~ceb.pipeline.results.read_step_rows`).

        Raises:
            RunError: The file is missing, or a line before its last is not a row.
        """
        from ceb.pipeline.results import read_step_rows

        self.require_scores()
        return read_step_rows(self.scores)

    def require_scores(self) -> Path:
        """The path of ``scores.jsonl``.

        Raises:
            RunError: The directory has none.
        """
        if not self.has_scores:
            if self.building.path.is_dir():
                raise RunError(
                    f"{self.path} has no {self.SCORES}: a merge into it did not finish (its files are in "
                    f"{self.building.path}); run that merge again"
                )
            raise RunError(f"{self.path} has no {self.SCORES}; is it a run directory written by `ceb score`?")
        return self.scores

    def scored_anything(self) -> bool:
        """Whether ``scores.jsonl`` holds a scored step; an unreadable file counts as holding one."""
        from ceb.pipeline.results import read_step_rows

        try:
            return any(row.score is not None for row in read_step_rows(self.scores))
        except RunError:
            return True

    def record(self) -> dict[str, Any]:
        """The whole of ``config.json`` as recorded.

        Raises:
            ConfigError: The file is missing or cannot be parsed (names the file).
        """
        return read_settings_file(self.config_file, "run config")

    def recorded_config(self) -> RunConfig:
        """The configuration the run recorded when it started.

        Raises:
            ConfigError: ``config.json`` is missing, unreadable, or holds no valid configuration (names the file).
        """
        section = self.record().get("config")
        if not isinstance(section, dict):
            raise ConfigError(f"run config {self.config_file}: no 'config' section")
        try:
            return RunConfig.model_validate(section)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise ConfigError(f"run config {self.config_file}: invalid setting {where}: {first['msg']}") from exc

    def recorded_or_default(self) -> tuple[RunConfig, bool]:
        """The recorded configuration, or the defaults when none is readable; and whether it was recorded."""
        try:
            return self.recorded_config(), True
        except ConfigError:
            return RunConfig(), False

    def recorded_streams(self) -> list[str]:
        """Names of the streams the run was started with; empty when it has no ``config.json``.

        Raises:
            ConfigError: ``config.json`` exists but cannot be read (names the file).
        """
        return list(self.record().get("streams") or {}) if self.started else []

    def recorded_stream_files(self) -> dict[str, list[str]]:
        """The files of each stream the run was started with (as given then), by stream name.

        Raises:
            RunError: The directory has no ``config.json``.
            ConfigError: ``config.json`` cannot be read (names the file).
        """
        if not self.started:
            raise RunError(f"{self.path} has no {self.CONFIG}; is it a run directory written by `ceb score`?")
        streams = self.record().get("streams") or {}
        return {name: list(entry.get("files") or []) for name, entry in streams.items() if isinstance(entry, dict)}

    def recorded_trajectories(self) -> tuple[dict[str, list[Trajectory]], dict[str, str]]:
        """The recorded streams' trajectories, read again from the files ``config.json`` names (relative to the cwd).

        Never raises: returns ``(streams, missing)``, ``missing`` saying per stream (or under ``"*"`` for all) why not.
        """
        from ceb.data.reader import read_stream

        try:
            files = self.recorded_stream_files()
        except CEBError as exc:
            return {}, {"*": str(exc)}
        streams: dict[str, list[Trajectory]] = {}
        missing: dict[str, str] = {}
        for stream, paths in files.items():
            if not paths:
                missing[stream] = f"{self.CONFIG} names no file for it"
                continue
            try:
                streams[stream] = read_stream(paths)
            except (CEBError, OSError, ValueError) as exc:
                missing[stream] = f"its files {paths} cannot be read from here: {str(exc).splitlines()[0]}"
        return streams, missing

    def recorded_fingerprints(self) -> tuple[dict[str, Any], int | None]:
        """The fingerprints a resume compares (:mod:`ceb.pipeline.resume`) and the recorded trajectory limit.

        Raises:
            RunError: ``config.json`` is missing, unreadable or has no fingerprints.
        """
        try:
            doc = orjson.loads(self.config_file.read_bytes())
            prints = doc["fingerprints"]
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise RunError(
                f"cannot resume {self.path}: {self.config_file} is missing or has no fingerprints ({exc})"
            ) from exc
        return prints, (doc.get("config") or {}).get(LIMIT_SETTING)

    def write_config(
        self,
        config: RunConfig,
        streams: Mapping[str, Sequence[Trajectory]],
        fingerprints: Mapping[str, Any],
        shard: Mapping[str, int] | None = None,
    ) -> None:
        """Record the run's start atomically: version, streams and files, fingerprints, configuration, shard plan."""
        sources = {n: sorted({t.source.rsplit(":", 1)[0] for t in trajs if t.source}) for n, trajs in streams.items()}
        doc = {
            "ceb_version": __version__,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "streams": {n: {"files": sources[n], "trajectories": len(t)} for n, t in streams.items()},
            "fingerprints": fingerprints,
            "config": config.model_dump(mode="json"),
        }
        if shard is not None:
            doc[self.SHARD] = dict(shard)
        write_atomic(self.config_file, _dump(doc))

    def write_record(self, doc: Mapping[str, Any]) -> None:
        """Write ``config.json`` as ``doc`` (a record :meth:`record` read, e.g. a merge's), atomically."""
        write_atomic(self.config_file, _dump(doc))

    def recorded_shard(self) -> dict[str, Any] | None:
        """The shard plan recorded in ``config.json`` (``{"index": i, "count": N}``), ``None`` for a whole run.

        Raises:
            ConfigError: ``config.json`` is missing or cannot be read (names the file).
        """
        shard = self.record().get(self.SHARD)
        return shard if isinstance(shard, dict) else None

    def recorded_summary(self) -> dict[str, Any] | None:
        """``summary.json`` as written, or ``None`` when there is none (a run that never ended or never began).

        Raises:
            RunError: The file exists but is not a JSON object (names the file).
        """
        try:
            doc = orjson.loads(self.summary_file.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, orjson.JSONDecodeError) as exc:
            raise RunError(f"{self.summary_file} cannot be read: {exc}") from exc
        if not isinstance(doc, dict):
            raise RunError(f"{self.summary_file} is not a JSON object")
        return doc

    def record_limit(self, limit: int | None) -> None:
        """Record a resume's new trajectory limit, so that the next resume starts from it."""
        doc = orjson.loads(self.config_file.read_bytes())
        if doc["config"].get(LIMIT_SETTING) != limit:
            doc["config"][LIMIT_SETTING] = limit
            write_atomic(self.config_file, _dump(doc))
            log.warning("trajectory limit raised on resume", run_dir=str(self.path), max_trajectories=limit)

    def write_summary(self, doc: Mapping[str, Any]) -> None:
        """Write ``summary.json`` atomically (its content: :func:`ceb.pipeline.summary.summary_doc`)."""
        write_atomic(self.summary_file, _dump(doc))

    def write_metrics(self, metrics: Mapping[str, Any]) -> Path:
        """Write ``metrics.json`` (atomically: a failed write leaves the old one) and return its path."""
        write_atomic(self.metrics_file, _dump(metrics))
        return self.metrics_file

    def remove_results(self) -> None:
        """Delete the results of an earlier run (:attr:`RESULTS` and the saved banks) and nothing else."""
        for name in self.RESULTS:
            (self.path / name).unlink(missing_ok=True)
        banks = self.path / self.BANKS
        if banks.is_dir():
            for f in banks.glob("*.json"):
                f.unlink()
            if not any(banks.iterdir()):
                banks.rmdir()

    @property
    def building(self) -> RunDir:
        """The sibling directory this run is built in before it is published (:meth:`built_aside`)."""
        return RunDir(self.path.parent / f".{self.path.name}{self.BUILDING}")

    @contextlib.contextmanager
    def built_aside(self) -> Iterator[RunDir]:
        """Build this run in the sibling ``.<name>.building`` (under its lock), then publish it whole.

        Leftovers of a killed build are removed first. On success every file is fsynced and moved by one rename (or,
        when this directory holds other files, file by file with ``summary.json`` last); on error the staging goes.

        Raises:
            RunError: Another process is building this run, or the staging directory cannot be used.
            OSError: A file cannot be flushed or moved (names it).
        """
        stage = self.building
        with stage.lock():
            for entry in stage.path.iterdir():  # a killed build's files
                if entry.is_dir():
                    shutil.rmtree(entry)
                elif entry.name != self.LOCK:
                    entry.unlink()
            try:
                yield stage
                _fsync_tree(stage.path)
                self._publish(stage)
            finally:
                if stage.path.is_dir():
                    shutil.rmtree(stage.path, ignore_errors=True)

    def _publish(self, stage: RunDir) -> None:
        """Move the run built in ``stage`` here (:meth:`built_aside`)."""
        try:
            os.rename(stage.path, self.path)  # replaces a missing or empty directory in one step
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise with_path(exc, self.path) from exc
        else:
            _fsync_dir(self.path.parent)
            return
        names = sorted((p.name for p in stage.path.iterdir() if p.name != self.LOCK), key=lambda n: n == self.SUMMARY)
        for name in names:  # summary.json last: the run is complete when it lands
            try:
                os.replace(stage.path / name, self.path / name)
            except OSError as exc:
                raise with_path(exc, self.path / name) from exc
        _fsync_dir(self.path)

    def require_readable(self) -> str | None:
        """Check that a reader (``ceb metrics``, ``export``, ``report``) may read the run here.

        A run is read when ``summary.json`` matches its rows and banks (:meth:`summary_mismatch`), when a live process
        holds it, or when it has no record at all (bare rows).

        Returns:
            ``None`` for a finished run, else a one-line note that the results are partial.

        Raises:
            RunError: No ``scores.jsonl``, a staging directory, no ``summary.json`` in a started run, or a summary that
                does not match the rows (names how to continue).
        """
        name = self.path.name
        if name.startswith(".") and name.endswith(self.BUILDING):
            whole = self.path.parent / name[1 : -len(self.BUILDING)]
            raise RunError(
                f"{self.path} is where a merge into {whole} is built, not a run (a merge killed before it ended "
                f"leaves it); run that merge again: it clears this directory and builds the run anew"
            )
        self.require_scores()
        holder = lock_holder(self.path, self.LOCK)
        if holder is not None:
            return f"{self.path} is being written now (ceb process {holder}): these are its rows so far, a partial run"
        summary = self.recorded_summary()
        if summary is None:
            if not self.started:
                return None
            raise RunError(
                f"{self.path} is not a complete run: it has no {self.SUMMARY} (it was killed before it ended); "
                f"{self._way_on()}"
            )
        problems = self.summary_mismatch(summary)
        if problems:
            raise RunError(f"{self.path} is not a complete run: {'; '.join(problems)}; {self._way_on()}")
        status = summary.get("status")
        if status != "finished":
            return f"{self.path}: the run ended {status}, so its results are partial; {self._way_on()}"
        return None

    def summary_mismatch(self, summary: Mapping[str, Any]) -> list[str]:
        """Where ``summary`` and the rows (:data:`STEP_COUNTS`, ``trajectories_voted``) or bank files disagree."""
        from ceb.pipeline.results import count_rows

        problems = []
        try:
            steps = sum(int(summary.get(name) or 0) for name in STEP_COUNTS)
            voted = int(summary.get("trajectories_voted") or 0)
            banks = [b.get("path") for b in summary.get("banks") or [] if isinstance(b, dict)]
        except (TypeError, ValueError, AttributeError) as exc:
            return [f"{self.SUMMARY} is not a summary this ceb reads ({exc})"]
        for counted, table in ((steps, self.scores), (voted, self.hindsight)):
            held = count_rows(table)
            if held != counted:
                problems.append(f"{self.SUMMARY} counts {counted} rows of {table.name}, which holds {held}")
        missing = [b for b in banks if isinstance(b, str) and not (self.path / b).is_file()]
        if missing:
            problems.append(f"{len(missing)} bank file(s) it lists are missing ({missing[0]}...)")
        return problems

    def _way_on(self) -> str:
        """How to make the run here whole again, for a message."""
        try:
            record = self.record() if self.started else {}
        except ConfigError:
            record = {}
        if record.get(self.MERGED):
            return "run the same `ceb merge` again: it builds the merged run anew from its parts"
        shard = record.get(self.SHARD)
        flag = f" --shard {shard.get('index')}/{shard.get('count')}" if isinstance(shard, dict) else ""
        if flag:
            return (
                f"continue it with `ceb score <its streams> --resume {self.path}{flag}` (or `ceb grid` with --resume)"
            )
        return (
            f"continue it with `ceb score <its streams> --resume {self.path}` (or `ceb grid` with --resume); if a "
            f"merge wrote it, run that `ceb merge` again"
        )


def _fsync_tree(root: Path) -> None:
    """Flush every file and directory under ``root`` (included) to disk."""
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(Path(folder) / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(folder))


def _fsync_dir(path: Path) -> None:
    """Flush ``path``'s entries (a rename into it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
