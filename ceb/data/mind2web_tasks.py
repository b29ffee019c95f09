"""Mind2Web task files in either upstream layout (:mod:`ceb.data.mind2web`), read as a stream and checked.

``raw`` JSON lists are parsed one task object at a time by ijson (yajl; the standard library cannot stream a
list). ``multimodal`` Parquet is read by pyarrow (the ``parquet`` extra) a row group at a time, only the used
columns (never ``raw_html`` or ``screenshot``), :data:`PARQUET_BATCH_ROWS` rows converted at once; consecutive
rows of one ``annotation_id`` make a task. Hub shards are cut at equal row counts regardless of tasks, so
:func:`iter_all_tasks` reads consecutive Parquet files as one row sequence and joins a task across the cut.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import orjson

from ceb.data.sources import Fail, kind, natural_key, optional_str, required_str
from ceb.errors import ConfigError, DataError, Problem
from ceb.version import install_command

__all__ = [
    "LAYOUTS",
    "PARQUET_BATCH_ROWS",
    "Action",
    "Layout",
    "Task",
    "iter_all_tasks",
    "iter_tasks",
    "read_task",
    "task_files",
]

Layout = Literal["auto", "raw", "multimodal"]
"""``raw`` JSON, ``multimodal`` Parquet, or ``auto`` (by suffix)."""

LAYOUTS: tuple[str, ...] = get_args(Layout)

_SUFFIXES = {".json": "raw", ".parquet": "multimodal"}

PARQUET_BATCH_ROWS = 32
"""Parquet rows converted to Python at once; a row holds a page (``cleaned_html``, up to ~1.4 MB)."""

_PARQUET_REQUIRED = ("annotation_id", "confirmed_task", "website", "action_uid", "operation", "cleaned_html")
_PARQUET_OPTIONAL = ("domain", "subdomain", "target_action_index", "target_action_reprs")


@dataclass(frozen=True, slots=True)
class Action:
    """One recorded step of a task, checked.

    Attributes:
        op: ``operation.op``, the gold operation.
        html: ``cleaned_html``, the page acted on.
        positive: ``backend_node_id`` of every positive candidate.
        candidates: ``(field, candidate)`` pairs, positives first; ``field`` locates it for errors.
        reference: ``action_reprs[t]``, or ``None`` when not read.
    """

    uid: str
    op: str
    html: str
    positive: frozenset[str]
    candidates: tuple[tuple[str, dict[str, Any]], ...]
    reference: str | None


@dataclass(frozen=True, slots=True)
class Task:
    """One Mind2Web task, checked; ``files`` is its file, or the Parquet shards its rows span, in order."""

    annotation_id: str
    task: str
    website: str
    domain: str | None
    subdomain: str | None
    actions: tuple[Action, ...]
    files: tuple[str, ...]

    @property
    def file(self) -> str:
        """The task file it starts in."""
        return self.files[0]


def task_files(tasks: str | Path | Sequence[str | Path], layout: Layout = "auto") -> list[tuple[Path, str]]:
    """The task files in stream order, each with its layout (``"raw"`` or ``"multimodal"``).

    A directory means its ``*.json`` or ``*.parquet`` files in natural order; ``auto`` goes by suffix.

    Raises:
        ConfigError: No file, or an unknown ``layout``.
        DataError: A directory with no task file, or both kinds under ``auto``; an unknown suffix under ``auto``.
    """
    if layout not in LAYOUTS:
        raise ConfigError(f"unknown Mind2Web layout {layout!r}; choose {', '.join(LAYOUTS)}")
    given = [Path(tasks)] if isinstance(tasks, str | Path) else [Path(t) for t in tasks]
    if not given:
        raise ConfigError("convert_mind2web needs at least one task file")
    files: list[tuple[Path, str]] = []
    for path in given:
        if not path.is_dir():
            files.append((path, layout if layout != "auto" else _layout_of(path)))
            continue
        kinds = [k for k in ("raw", "multimodal") if layout in ("auto", k)]
        found = {k: sorted(path.glob(f"*{_suffix(k)}"), key=natural_key) for k in kinds}
        present = [k for k in kinds if found[k]]
        if not present:
            wanted = " or ".join(f"*{_suffix(k)}" for k in kinds)
            raise DataError(Problem(str(path), 0, "<file>", f"a task directory must hold Mind2Web {wanted} files"))
        if len(present) > 1:
            raise DataError(
                Problem(
                    str(path),
                    0,
                    "<file>",
                    "holds both *.json and *.parquet task files; pass --layout raw or multimodal",
                )
            )
        files.extend((f, present[0]) for f in found[present[0]])
    return files


def _suffix(layout: str) -> str:
    return next(s for s, k in _SUFFIXES.items() if k == layout)


def _layout_of(path: Path) -> str:
    found = _SUFFIXES.get(path.suffix.lower())
    if found is None:
        raise DataError(
            Problem(
                str(path),
                0,
                "<file>",
                "cannot tell the layout from the suffix (.json is raw Mind2Web, .parquet Multimodal-Mind2Web); "
                "pass --layout raw or multimodal",
            )
        )
    return found


def iter_tasks(path: Path, layout: str, *, need_reprs: bool) -> Iterator[Task]:
    """:func:`iter_all_tasks` of one file."""
    yield from iter_all_tasks([(path, layout)], need_reprs=need_reprs)


def iter_all_tasks(
    files: Sequence[tuple[Path, str]], *, need_reprs: bool, skip_cut_edges: bool = False
) -> Iterator[Task]:
    """The checked tasks of ``files`` (``(path, layout)`` from :func:`task_files`), streamed: memory holds one task.

    Consecutive multimodal files are one row sequence; ``need_reprs`` reads ``action_reprs`` (for
    ``meta["reference_actions"]``); ``skip_cut_edges`` leaves out, not refuses, a task visibly cut at the start
    or end of the Parquet run (``ceb regenerate`` reads only the shards its trajectories name).

    Raises:
        DataError: A file is unreadable or off-layout (names file, task or row, step and field).
        ConfigError: Parquet without pyarrow (names the ``parquet`` extra).
    """
    i = 0
    while i < len(files):
        path, layout = files[i]
        if layout != "multimodal":
            yield from _iter_raw(path, need_reprs=need_reprs)
            i += 1
            continue
        j = i
        while j < len(files) and files[j][1] == "multimodal":
            j += 1
        yield from _iter_multimodal([p for p, _ in files[i:j]], need_reprs=need_reprs, skip_cut_edges=skip_cut_edges)
        i = j


def _iter_raw(path: Path, *, need_reprs: bool) -> Iterator[Task]:
    import ijson  # type: ignore[import-untyped]

    def file_error(message: str) -> DataError:
        return DataError(Problem(str(path), 0, "<file>", message))

    try:
        f = path.open("rb")
    except OSError as exc:
        raise file_error(f"cannot read the file: {exc.strerror or exc}") from exc
    with f:
        first = f.read(4096).lstrip()[:1]
        if first != b"[":
            got = {b"{": "an object", b"": "an empty file", b'"': "a string"}.get(first, "something else")
            raise file_error(f"must be a JSON list of Mind2Web task objects, got {got}")
        f.seek(0)
        index = 0
        try:
            for record in ijson.items(f, "item", use_float=True):
                yield read_task(path, index, record, need_reprs=need_reprs)
                index += 1
        except ijson.JSONError as exc:
            raise file_error(f"not valid JSON after task [{index - 1}]: {exc}") from exc


_Row = tuple[Path, int, dict[str, Any]]
"""A Parquet row: file, index in that file, values."""


def _iter_multimodal(paths: Sequence[Path], *, need_reprs: bool, skip_cut_edges: bool) -> Iterator[Task]:
    """Tasks of consecutive Parquet files, joined across files."""
    group: list[_Row] = []
    first = True
    for row in (r for path in paths for r in _parquet_rows(path, need_reprs=need_reprs)):
        if group and row[2].get("annotation_id") != group[0][2].get("annotation_id"):
            if not (first and skip_cut_edges and _cut(group)):
                yield _task_of_rows(group, need_reprs=need_reprs, ends_file=row[0] != group[-1][0])
            group, first = [], False
        group.append(row)
    if group and not (skip_cut_edges and _cut(group)):
        yield _task_of_rows(group, need_reprs=need_reprs, ends_file=True)


def _cut(rows: list[_Row]) -> bool:
    """Whether a task's rows are visibly incomplete (fewer than ``action_reprs``, or steps not from 0)."""
    reprs = rows[0][2].get("action_reprs")
    indices = {_unlisted(r.get("target_action_index")) for _, _, r in rows}
    return (isinstance(reprs, list) and len(reprs) > len(rows)) or (
        all(isinstance(i, str) for i in indices) and "0" not in indices
    )


def _unlisted(value: Any) -> Any:
    """Unwrap a value some revisions store as a one-element list."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


_SHARD = re.compile(r"(?P<split>.+)-(?P<k>\d{5})-of-(?P<n>\d{5})(?:-[^.]*)?\.parquet")


def _missing_shard(rows: list[_Row], first_step: int | None, *, ends_file: bool) -> str:
    """The error suffix naming the Hub shard that holds the rest of a cut task, or ``""``."""
    opens = rows[0][1] == 0
    if opens and (first_step or (first_step is None and not ends_file)):
        path, step = rows[0][0], -1
    elif ends_file and not first_step:
        path, step = rows[-1][0], 1
    else:
        return ""
    where = "began in the shard before" if step < 0 else "goes on in the shard after"
    shard = _SHARD.fullmatch(path.name)
    if shard is None or not 0 <= int(shard["k"]) + step < int(shard["n"]):
        return f"; the task {where} {path.name}: add that file to --tasks"
    name = f"{shard['split']}-{int(shard['k']) + step:05d}-of-{shard['n']}-*.parquet"
    return f"; the task {where} {path.name}: add {name} to --tasks"


def _parquet_rows(path: Path, *, need_reprs: bool) -> Iterator[_Row]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - the parquet extra is in the test environment
        raise ConfigError("reading Multimodal-Mind2Web Parquet needs pyarrow: " + install_command("parquet")) from exc
    try:
        parquet = pq.ParquetFile(path)
    except (OSError, ValueError) as exc:  # pyarrow.ArrowException derives from both
        raise DataError(Problem(str(path), 0, "<file>", f"cannot read the Parquet file: {exc}")) from exc
    names = set(parquet.schema_arrow.names)
    wanted = [*_PARQUET_REQUIRED, "pos_candidates", "neg_candidates", *(("action_reprs",) if need_reprs else ())]
    optional = [c for c in (*_PARQUET_OPTIONAL, "action_reprs") if c in names and c not in wanted]
    for column in wanted:
        if column not in names:
            raise DataError(
                Problem(str(path), 0, column, "column missing: not the Multimodal-Mind2Web layout (one row per action)")
            )
    columns = [*wanted, *optional]
    row = 0
    # One row group at a time: ParquetFile.iter_batches reads ahead, and its peak grew with the file (measured:
    # 19, 29, 38 MB of Arrow memory for 3, 12, 24 row groups, against a flat 14.5 MB this way).
    batches = (
        batch
        for group in range(parquet.num_row_groups)
        for batch in parquet.read_row_group(group, columns=columns, use_threads=False).to_batches(PARQUET_BATCH_ROWS)
    )
    for batch in batches:
        for record in batch.to_pylist():
            yield path, row, record
            row += 1


def _task_of_rows(rows: list[_Row], *, need_reprs: bool, ends_file: bool) -> Task:
    """One task from its consecutive rows, ordered by step; ``ends_file`` lets a cut name the next shard."""
    first_path, first_row, first = rows[0]
    aid: str | None = None

    def fail_at(path: Path, row: int) -> Callable[..., DataError]:
        def fail(field: str, message: str, step: int | None = None) -> DataError:
            return DataError(Problem(str(path), 0, f"row[{row}].{field}", message, aid, step))

        return fail

    fail = fail_at(first_path, first_row)
    aid = required_str(first, "annotation_id", fail)
    task = required_str(first, "confirmed_task", fail)
    website = required_str(first, "website", fail)
    domain = optional_str(first, "domain", fail)
    subdomain = optional_str(first, "subdomain", fail)
    reprs = first.get("action_reprs")
    order: list[tuple[int, Path, int, dict[str, Any]]] = []
    for position, (path, row, record) in enumerate(rows):
        index = _unlisted(record.get("target_action_index", str(position)))
        if not isinstance(index, str) or not index.isdigit():
            raise fail_at(path, row)(
                "target_action_index",
                f"must be a string holding a step number (or a list of one), got {kind(index)}",
            )
        order.append((int(index), path, row, record))
    order.sort(key=lambda x: x[0])
    shard = _missing_shard(rows, order[0][0] if "target_action_index" in first else None, ends_file=ends_file)
    if isinstance(reprs, list) and len(reprs) != len(rows):
        raise fail(
            "action_reprs",
            f"lists {len(reprs)} actions but the task has {len(rows)} rows here (a task's rows must be consecutive)"
            + shard,
        )
    actions: list[Action] = []
    for t, (index, path, row, record) in enumerate(order):
        if index != t:
            raise fail_at(path, row)(
                "target_action_index",
                f"the task's {len(rows)} rows must number their steps 0..{len(rows) - 1}, got {index} "
                "(a task's rows must be consecutive in the file)" + shard,
                t,
            )
        actions.append(_read_row(record, t, fail_at(path, row), len(rows), need_reprs=need_reprs))
    files = tuple(dict.fromkeys(str(path) for path, _, _ in rows))
    return Task(aid, task, website, domain, subdomain, tuple(actions), files)


def _read_row(record: dict[str, Any], t: int, fail: Fail, steps: int, *, need_reprs: bool) -> Action:
    uid = record.get("action_uid")
    if not isinstance(uid, str) or not uid:
        raise fail("action_uid", "missing or not a non-empty string", t)
    operation = _decoded(record.get("operation"), "operation", fail, t)
    op = operation.get("op")
    if not isinstance(op, str) or not op:
        raise fail("operation", f"its 'op' is missing or not a non-empty string (action_uid {uid!r})", t)
    html = record.get("cleaned_html")
    if not isinstance(html, str):
        raise fail("cleaned_html", f"missing or not a string (action_uid {uid!r})", t)
    candidates: list[tuple[str, dict[str, Any]]] = []
    positive: set[str] = set()
    for key in ("pos_candidates", "neg_candidates"):
        found = record.get(key)
        if not isinstance(found, list):
            raise fail(key, f"missing or not a list of JSON strings (action_uid {uid!r})", t)
        for j, raw in enumerate(found):
            cand = _decoded(raw, f"{key}[{j}]", fail, t)
            node = _candidate_node(cand)
            if node is None:
                raise fail(f"{key}[{j}]", f"names no backend_node_id, at its top or in its attributes ({uid!r})", t)
            if key == "pos_candidates":
                positive.add(node)
            candidates.append((f"{key}[{j}]", {**cand, "backend_node_id": node}))
    reference: str | None = None
    if need_reprs:
        reference = _unlisted(record.get("target_action_reprs"))
        if reference is None:
            reprs = record.get("action_reprs")
            if not isinstance(reprs, list) or len(reprs) != steps or not isinstance(reprs[t], str):
                raise fail("action_reprs", f"must be a list of {steps} strings, one per action of the task", t)
            reference = reprs[t]
        if not isinstance(reference, str):
            raise fail("target_action_reprs", f"must be a string (or a list of one), got {kind(reference)}", t)
    return Action(uid, op, html, frozenset(positive), tuple(candidates), reference)


def _decoded(value: Any, field: str, fail: Fail, t: int) -> dict[str, Any]:
    """A JSON-encoded object (as Multimodal-Mind2Web stores them), or an object, decoded."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise fail(field, f"not a JSON-encoded object: {exc.msg}", t) from exc
    if not isinstance(value, dict):
        raise fail(field, f"must be a JSON-encoded object, got {kind(value)}", t)
    return value


def _candidate_node(candidate: dict[str, Any]) -> str | None:
    node = candidate.get("backend_node_id")
    if node is None:
        attributes = candidate.get("attributes")
        if isinstance(attributes, str):
            try:
                attributes = orjson.loads(attributes)
            except orjson.JSONDecodeError:
                return None
        node = attributes.get("backend_node_id") if isinstance(attributes, dict) else None
    if type(node) is int:
        node = str(node)
    return node if isinstance(node, str) and node else None


def read_task(path: Path, index: int, record: Any, *, need_reprs: bool) -> Task:
    """Check one raw task object, ``index`` in its file's list.

    Raises:
        DataError: It breaks the layout (names the file, ``annotation_id``, step and field).
    """
    aid: str | None = None

    def fail(field: str, message: str, step: int | None = None) -> DataError:
        return DataError(Problem(str(path), 0, f"[{index}].{field}", message, aid, step))

    if not isinstance(record, dict):
        raise fail("<task>", f"must be an object, got {kind(record)}")
    aid = required_str(record, "annotation_id", fail)
    task = required_str(record, "confirmed_task", fail)
    website = required_str(record, "website", fail)
    domain = optional_str(record, "domain", fail)
    subdomain = optional_str(record, "subdomain", fail)
    actions = record.get("actions")
    if not isinstance(actions, list) or not actions:
        raise fail("actions", "missing, empty or not a list")
    reprs = record.get("action_reprs")
    if need_reprs and (
        not isinstance(reprs, list) or len(reprs) != len(actions) or not all(isinstance(r, str) for r in reprs)
    ):
        raise fail(
            "action_reprs",
            f"must be a list of {len(actions)} strings, one per action (kept for the judge; "
            "observation='empty' does not read it)",
        )
    read = tuple(
        _read_action(action, t, reprs[t] if need_reprs and isinstance(reprs, list) else None, fail)
        for t, action in enumerate(actions)
    )
    return Task(aid, task, website, domain, subdomain, read, (str(path),))


def _read_action(action: Any, t: int, reference: str | None, fail: Fail) -> Action:
    at = f"actions[{t}]"
    if not isinstance(action, dict):
        raise fail(at, f"must be an object, got {kind(action)}", t)
    uid = action.get("action_uid")
    if not isinstance(uid, str) or not uid:
        raise fail(f"{at}.action_uid", "missing or not a non-empty string", t)
    operation = action.get("operation")
    if not isinstance(operation, dict):
        raise fail(f"{at}.operation", f"missing or not an object (action_uid {uid!r})", t)
    op = operation.get("op")
    if not isinstance(op, str) or not op:
        raise fail(f"{at}.operation.op", f"missing or not a non-empty string (action_uid {uid!r})", t)
    html = action.get("cleaned_html")
    if not isinstance(html, str):
        raise fail(f"{at}.cleaned_html", f"missing or not a string (action_uid {uid!r})", t)
    candidates: list[tuple[str, dict[str, Any]]] = []
    positive: set[str] = set()
    for key in ("pos_candidates", "neg_candidates"):
        found = action.get(key)
        if not isinstance(found, list):
            raise fail(f"{at}.{key}", f"missing or not a list (action_uid {uid!r})", t)
        for j, cand in enumerate(found):
            node = cand.get("backend_node_id") if isinstance(cand, dict) else None
            if type(node) is int:
                node = str(node)
            if not isinstance(node, str):
                raise fail(f"{at}.{key}[{j}].backend_node_id", f"missing or not a string (action_uid {uid!r})", t)
            if key == "pos_candidates":
                positive.add(node)
            candidates.append((f"{at}.{key}[{j}]", cand))
    return Action(uid, op, html, frozenset(positive), tuple(candidates), reference)
