"""Reading Mind2Web task files in either upstream layout, as a stream: every field the converter uses, checked.

The layouts are given in :mod:`ceb.data.mind2web`'s docstring ("Task files"). Both are read one task at a
time, so memory holds one task (and, for Parquet, one batch of rows), never a whole file:

- ``raw`` (``osunlp/Mind2Web``, a JSON list of tasks): the list is parsed incrementally by ijson, one task
  object at a time. ijson is a well-kept C-backed parser (yajl); the standard library cannot stream a list.
- ``multimodal`` (``osunlp/Multimodal-Mind2Web``, Parquet, one row per action): read by pyarrow (the
  ``parquet`` extra) one row group at a time, only the columns used (never ``raw_html`` or ``screenshot``,
  the bulk of each file), and turned into Python values :data:`PARQUET_BATCH_ROWS` rows at a time;
  consecutive rows of one ``annotation_id`` make a task. Memory holds one row group of those columns.

Hub shards: the ``datasets`` library writes a split as shards of equal row counts
(``test_task-00000-of-00005-<hash>.parquet``, ...), ignoring task boundaries, so a task's rows can run on from
one shard into the next. :func:`iter_all_tasks` reads consecutive Parquet files as one sequence of rows and
joins such a task across the cut, still holding one task's rows at a time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

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
"""A task file's layout: ``raw`` JSON, ``multimodal`` Parquet, or ``auto`` (by the file's suffix)."""

LAYOUTS: tuple[str, ...] = ("auto", "raw", "multimodal")
"""Every :data:`Layout`, for the command line."""

_SUFFIXES = {".json": "raw", ".parquet": "multimodal"}

PARQUET_BATCH_ROWS = 32
"""Rows of a Parquet row group turned into Python values at once. A row holds one page (``cleaned_html``, up to
about 1.4 MB in the test splits), so a batch stays in the tens of megabytes whatever the file's size."""

_PARQUET_REQUIRED = ("annotation_id", "confirmed_task", "website", "action_uid", "operation", "cleaned_html")
_PARQUET_OPTIONAL = ("domain", "subdomain", "target_action_index", "target_action_reprs")


@dataclass(frozen=True, slots=True)
class Action:
    """One recorded step of a task, checked.

    Attributes:
        uid: ``action_uid``.
        op: ``operation.op``, the gold operation.
        html: ``cleaned_html``, the page the step acted on.
        positive: ``backend_node_id`` of every positive candidate.
        candidates: ``(field, candidate object)`` of every candidate, positives first; ``field`` places it
            in the task file for errors.
        reference: ``action_reprs[t]``, or ``None`` when it is not read.
    """

    uid: str
    op: str
    html: str
    positive: frozenset[str]
    candidates: tuple[tuple[str, dict[str, Any]], ...]
    reference: str | None


@dataclass(frozen=True, slots=True)
class Task:
    """One Mind2Web task, checked.

    Attributes:
        annotation_id: The task's id, unique over all task files.
        task: ``confirmed_task``.
        website: ``website``.
        domain: ``domain``, if given.
        subdomain: ``subdomain``, if given.
        actions: Its steps, in order.
        files: The task files it came from: one, or the Parquet shards its rows run across, in order.
    """

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
    """The task files to read, in stream order, each with its layout (``"raw"`` or ``"multimodal"``).

    A directory stands for its task files in natural name order (``train_2`` before ``train_10``): its
    ``*.json`` files for ``raw``, its ``*.parquet`` files for ``multimodal``, whichever it holds for
    ``auto``. With ``auto`` a file's layout is its suffix: ``.json`` is raw, ``.parquet`` multimodal.

    Raises:
        ConfigError: No file is given, or ``layout`` is not a :data:`Layout`.
        DataError: A directory holds no task file, or both kinds with ``auto``; a file's suffix says no layout
            with ``auto`` (the message names ``--layout``).
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
    """The tasks of one task file, in file order, each checked, read as a stream (:func:`iter_all_tasks` of one file).

    Raises:
        DataError, ConfigError: As :func:`iter_all_tasks`.
    """
    yield from iter_all_tasks([(path, layout)], need_reprs=need_reprs)


def iter_all_tasks(
    files: Sequence[tuple[Path, str]], *, need_reprs: bool, skip_cut_edges: bool = False
) -> Iterator[Task]:
    """The tasks of ``files``, in order, each checked, read as a stream.

    Consecutive ``multimodal`` files are read as one sequence of rows, so a task whose rows run on from one Hub
    shard into the next is one task (module docstring); a ``raw`` file holds whole tasks. Memory holds one task
    (and one Parquet row group), however many files there are.

    Args:
        files: ``(path, layout)`` pairs as :func:`task_files` returns them, ``layout`` ``"raw"`` or ``"multimodal"``.
        need_reprs: Read the human's action representations (kept in ``meta["reference_actions"]``; read unless
            ``observation="empty"``).
        skip_cut_edges: Leave out, rather than refuse, a task at the very start or end of a run of Parquet files
            that is visibly cut there (its ``action_reprs`` lists more actions than it has rows, or its steps do
            not start at 0): its other rows are in a shard not given. For readers of a subset of the shards
            (``ceb regenerate`` reads back only the shards its trajectories name).

    Raises:
        DataError: A file cannot be read or breaks its layout (names the file, the task or row, the step and the
            field).
        ConfigError: A multimodal file is read without pyarrow (names the ``parquet`` extra).
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
"""A Parquet row: its file, its index in that file, its values."""


def _iter_multimodal(paths: Sequence[Path], *, need_reprs: bool, skip_cut_edges: bool) -> Iterator[Task]:
    """The tasks of consecutive Parquet files: rows of one ``annotation_id`` in a row make a task, across files."""
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
    """Whether a task's rows are visibly not all here: fewer than its ``action_reprs``, or steps not from 0."""
    reprs = rows[0][2].get("action_reprs")
    indices = {_unlisted(r.get("target_action_index")) for _, _, r in rows}
    return (isinstance(reprs, list) and len(reprs) > len(rows)) or (
        all(isinstance(i, str) for i in indices) and "0" not in indices
    )


def _unlisted(value: Any) -> Any:
    """A per-row value that a dataset revision stores as a list of one (its card: ``sequence: string``) unwrapped."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


_SHARD = re.compile(r"(?P<split>.+)-(?P<k>\d{5})-of-(?P<n>\d{5})(?:-[^.]*)?\.parquet")


def _missing_shard(rows: list[_Row], first_step: int | None, *, ends_file: bool) -> str:
    """Which Hub shard holds the rest of a task cut at a file's edge (the shard to add, by name), or ``""``.

    A task whose first rows open a file but whose steps do not start at 0 began in the shard before it; one
    whose rows close a file, from step 0, goes on in the shard after it.
    """
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
    """One task from its consecutive rows (one per action, in one file or across shards), ordered by step.

    ``ends_file``: the rows close their file, so a task cut there names the next shard (:func:`_missing_shard`).
    """
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
    """A JSON-encoded object (Multimodal-Mind2Web stores objects as strings), or an object, decoded."""
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
    """Check one task's shape.

    Args:
        path: The task file.
        index: The task's index in the file's list.
        record: The decoded task object.
        need_reprs: Read ``action_reprs`` (kept in ``meta["reference_actions"]``; read unless ``observation="empty"``).

    Raises:
        DataError: The task breaks the layout (names the file, the ``annotation_id``, the step and the field).
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
