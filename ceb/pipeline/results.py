"""Per-step and per-trajectory results, appended to the run directory as they finish.

The rows of ``scores.jsonl`` (:class:`StepRow`) and ``hindsight.jsonl`` (:class:`HindsightRow`), written and
read; where those files are is the run directory's business (:mod:`ceb.pipeline.rundir`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self, TypedDict, TypeVar

import orjson

from ceb.bank import BankRecord
from ceb.errors import RunError, with_path
from ceb.stages.base import NOT_AVAILABLE, Abstention, CallStats, CriticResult, HindsightResult, StepStatus
from ceb.stages.step import Precedent, ScoredStep, precedents

__all__ = [
    "ROW_SCHEMA",
    "AltLabel",
    "HindsightRow",
    "Precedent",
    "ResultWriter",
    "StepRow",
    "count_rows",
    "read_hindsight_rows",
    "read_rows",
    "read_step_rows",
]

ROW_SCHEMA = 3
"""Version of the row layout written now; :func:`read_step_rows` upgrades older rows.

1: no ``status``, ``retrieved`` as lists; 2: ``status``, ``retrieved`` as objects; 3: ``alt_labels`` as a list
of ``{"name", "label"}``, so every field has one type in every run (a fixed Arrow / Parquet schema). A field added
with a default (:attr:`StepRow.reused_from`) needs no new layout.
"""


class AltLabel(TypedDict):
    """Another label of a step, for evaluation only (one element of :attr:`StepRow.alt_labels`)."""

    name: str
    label: int | None


@dataclass(frozen=True, slots=True)
class StepRow:
    """One scored step of one method (a line of ``scores.jsonl``).

    Attributes:
        step: 0-based step index ``t``.
        score: ``z^_t`` in [0, 1], or ``None`` when not scored (see ``status`` and ``error``).
        label: Ground-truth label (0, 1 or ``None``), copied for evaluation only.
        error: Why ``score`` is ``None`` (for people; code reads ``status``).
        clipped: The raw score was outside [0, 1] and was clipped (Eq. 6).
        raw: The critic's last reply text.
        latency_s: Seconds in the server; ``queue_s`` seconds waiting for an endpoint slot.
        requests: Requests sent for this step (retries and re-asks included).
        bank_size: ``|B_t|`` when the step was scored.
        repetition_flag: ``rho_t``.
        retrieved: Each precedent shown (:class:`Precedent`), positives first.
        order: 0 is the input files' order, ``r >= 1`` the seeded permutation ``r`` (paper section 4.4).
        position: 0-based position of the trajectory in this order.
        critic: Label of the critic that scored (a grid may run several); ``""`` for one.
        alt_labels: Other labels for evaluation only (:class:`AltLabel`, sorted by name), from the trajectory's
            ``meta["alt_labels"]``.
        input_tokens: ``cl100k_base`` tokens of the LLM critic's prompt (:mod:`ceb.stages.tokens`); ``None`` for
            baselines or when counting is off. ``bank_tokens``: the part the precedents add.
        status: :data:`~ceb.stages.base.StepStatus`; a copy of a scored row is ``reused``, of another keeps its status.
        reused_from: The order this row copies (:mod:`ceb.pipeline.pool`), else ``None``. A copy has its source's
            score, reply, label and prompt tokens, its own placement, and 0 requests, latency, queue and server tokens.
        retries: Of ``requests``, the attempts resent after a wire failure (timeout, 429, 5xx, dropped connection).
        readout: ``text``, ``expected`` or ``text_fallback`` (:attr:`~ceb.stages.base.CriticResult.readout`);
            ``None`` without a verbal score (or in older rows).
    """

    stream: str
    method: str
    trajectory: str
    step: int
    score: float | None
    label: int | None
    error: str | None
    clipped: bool
    raw: str
    latency_s: float
    queue_s: float
    requests: int
    prompt_tokens: int | None
    completion_tokens: int | None
    bank_size: int
    repetition_flag: bool
    retrieved: list[Precedent]
    order: int = 0
    position: int = 0
    critic: str = ""
    alt_labels: list[AltLabel] = field(default_factory=list)
    input_tokens: int | None = None
    bank_tokens: int | None = None
    status: StepStatus = "scored"
    reused_from: int | None = None
    retries: int = 0
    retry_reason: str | None = None
    readout: str | None = None
    schema: int = ROW_SCHEMA

    @property
    def finished(self) -> bool:
        """Nothing left to ask for this step: it has a score, or its method cannot score it here."""
        return self.status != "failed"

    @classmethod
    def from_step(
        cls,
        done: ScoredStep,
        *,
        stream: str,
        method: str,
        trajectory: str,
        label: int | None,
        order: int = 0,
        position: int = 0,
        critic: str = "",
        alt_labels: Sequence[AltLabel] = (),
    ) -> StepRow:
        """The row of a step :func:`~ceb.stages.step.score_step` scored, placed by the lane.

        Fields sharing a name with :class:`~ceb.stages.base.CriticResult` or :class:`~ceb.stages.base.CallStats` are
        copied by name.
        """
        res = done.result
        return cls(
            stream=stream,
            method=method,
            trajectory=trajectory,
            step=done.input.step,
            label=label,
            bank_size=done.bank_size,
            repetition_flag=done.repetition_flag,
            retrieved=precedents(done.retrieval),
            order=order,
            position=position,
            critic=critic,
            alt_labels=list(alt_labels),
            input_tokens=done.tokens.input if done.tokens else None,
            bank_tokens=done.tokens.bank if done.tokens else None,
            status=res.status,
            **{name: getattr(res, name) for name in _FROM_RESULT},
            **{name: getattr(res.stats, name) for name in _FROM_STATS},
        )


_ROW_FIELDS = {f.name for f in fields(StepRow)}
_FROM_RESULT = tuple(f.name for f in fields(CriticResult) if f.name in _ROW_FIELDS)
"""What :meth:`StepRow.from_step` copies from the critic's result: ``score``, ``raw``, ``error``, ``clipped``, ..."""
_FROM_STATS = tuple(f.name for f in fields(CallStats) if f.name in _ROW_FIELDS)
"""What it copies from the result's cost: ``latency_s``, ``queue_s``, ``requests``, the token counts, ..."""


@dataclass(frozen=True, slots=True)
class HindsightRow:
    """The hindsight outcome of one trajectory for one bank-using method (a line of ``hindsight.jsonl``).

    Attributes:
        votes: Valid votes over the labelled (not abstained) steps, shape ``(V_valid, T_l)``.
        soft_votes: ``y~_t``, shape ``(T_l,)``; ``pseudo_labels``: ``y^_t``, shape ``(T_l,)``.
        records_added: Records added to the bank (0 with no valid vote, or every step abstained).
        latency_s: Seconds in the server over all votes.
        records: The bank records added (:class:`~ceb.bank.BankRecord` fields): the bank's append-only checkpoint
            (:mod:`ceb.pipeline.resume`).
        abstained: Steps given no label, each ``{"step": t, "reason": ...}``; not in the bank.
    """

    stream: str
    method: str
    trajectory: str
    votes: list[list[int]]
    soft_votes: list[float]
    pseudo_labels: list[int]
    failed_votes: int
    errors: list[str]
    records_added: int
    latency_s: float
    requests: int
    prompt_tokens: int | None
    completion_tokens: int | None
    order: int = 0
    position: int = 0
    critic: str = ""
    records: list[dict[str, Any]] = field(default_factory=list)
    abstained: list[Abstention] = field(default_factory=list)
    retries: int = 0
    retry_reason: str | None = None
    schema: int = ROW_SCHEMA

    @classmethod
    def from_result(
        cls,
        result: HindsightResult,
        records: Sequence[BankRecord],
        *,
        stream: str,
        method: str,
        trajectory: str,
        order: int = 0,
        position: int = 0,
        critic: str = "",
    ) -> HindsightRow:
        """The row of one trajectory's hindsight ``result`` and the bank ``records`` it added, placed by the lane."""
        s = result.stats
        return cls(
            stream=stream,
            method=method,
            trajectory=trajectory,
            votes=[list(v) for v in result.votes],
            soft_votes=list(result.soft_votes),
            pseudo_labels=list(result.pseudo_labels),
            failed_votes=result.failed_votes,
            errors=list(result.errors),
            records_added=len(records),
            latency_s=s.latency_s,
            requests=s.requests,
            prompt_tokens=s.prompt_tokens,
            completion_tokens=s.completion_tokens,
            order=order,
            position=position,
            critic=critic,
            records=[asdict(r) for r in records],
            abstained=list(result.abstained),
            retries=s.retries,
            retry_reason=s.retry_reason,
        )


class ResultWriter:
    """Appends rows to ``scores.jsonl`` and ``hindsight.jsonl`` (folders created on entry), each flushed at once."""

    def __init__(self, scores: Path, hindsight: Path) -> None:
        self._paths = {"scores": scores, "hindsight": hindsight}
        self._files: dict[str, IO[bytes]] = {}

    def __enter__(self) -> Self:
        for name, path in self._paths.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            self._files[name] = path.open("ab")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close both files.

        Raises:
            OSError: Closing failed (it flushes what a failed write left in the buffer) and no error is on its way
                out already; that one (the first, the cause) is the one to report.
        """
        files, self._files = self._files, {}
        failed: OSError | None = None
        for name, f in files.items():
            try:
                f.close()
            except OSError as error:
                failed = failed or with_path(error, self._paths[name])
        if failed is not None and exc is None:
            raise failed

    def write(self, row: StepRow | HindsightRow) -> None:
        """Append ``row`` as one JSON line (one ``write`` call) and flush it to the OS.

        Raises:
            OSError: The write failed, naming the file; a torn part of this row may be left as the last line.
        """
        name = "scores" if isinstance(row, StepRow) else "hindsight"
        f = self._files[name]
        try:
            f.write(orjson.dumps(row) + b"\n")  # orjson writes a dataclass as asdict would, in C
            f.flush()
        except OSError as exc:
            raise with_path(exc, self._paths[name]) from exc


def read_rows(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the raw JSON objects of a ``scores.jsonl`` or ``hindsight.jsonl``; a torn last line is skipped.

    Raises:
        RunError: A line before the last is not valid JSON (names file and line).
    """
    for _, row in _lines(Path(path)):
        yield row


def count_rows(path: str | Path) -> int:
    """The rows :func:`read_rows` would yield from ``path`` (0 if missing), without parsing each one."""
    try:
        lines = Path(path).read_bytes().split(b"\n")
    except FileNotFoundError:
        return 0
    n = sum(1 for line in lines if line.strip())
    if lines[-1].strip():
        try:
            orjson.loads(lines[-1])
        except orjson.JSONDecodeError:
            n -= 1
    return n


def read_step_rows(path: str | Path) -> Iterator[StepRow]:
    """Yield the :class:`StepRow` of each line of a ``scores.jsonl`` (older layouts upgraded).

    Raises:
        RunError: A bad line before the last, a row of a newer layout, or a row missing a field (names file,
            line and field).
    """
    return _typed(Path(path), StepRow, _upgrade_step)


def read_hindsight_rows(path: str | Path) -> Iterator[HindsightRow]:
    """Yield the :class:`HindsightRow` of each line of a ``hindsight.jsonl`` (older layouts upgraded).

    Raises:
        RunError: As :func:`read_step_rows`.
    """
    return _typed(Path(path), HindsightRow, lambda row, schema: row)


_Row = TypeVar("_Row", StepRow, HindsightRow)


def _typed(path: Path, cls: type[_Row], upgrade: Callable[[dict[str, Any], int], dict[str, Any]]) -> Iterator[_Row]:
    names = {f.name for f in fields(cls)}
    for line, raw in _lines(path):
        schema = raw.get("schema", 1)
        if not isinstance(schema, int) or schema > ROW_SCHEMA:
            raise RunError(f"{path}:{line}: row layout {schema!r} is newer than this ceb reads ({ROW_SCHEMA})")
        row = upgrade(raw, schema) if schema < ROW_SCHEMA else raw
        row["schema"] = ROW_SCHEMA
        unknown = set(row) - names
        if unknown:
            raise RunError(f"{path}:{line}: unknown field(s) {sorted(unknown)} in a {cls.__name__}")
        try:
            yield cls(**row)
        except TypeError as exc:
            raise RunError(f"{path}:{line}: not a {cls.__name__}: {exc}") from exc


def _upgrade_step(row: dict[str, Any], schema: int) -> dict[str, Any]:
    """Layout 1 -> 2: the status from the score and the error's prefix; precedents as objects."""
    out = dict(row)
    if schema < 2:
        if out.get("score") is not None:
            out["status"] = "scored"
        else:
            out["status"] = "not_available" if str(out.get("error") or "").startswith(NOT_AVAILABLE) else "failed"
        out["retrieved"] = [_precedent(p) for p in out.get("retrieved", [])]
    if isinstance(out.get("alt_labels"), Mapping):
        out["alt_labels"] = [AltLabel(name=name, label=label) for name, label in sorted(out["alt_labels"].items())]
    return out


def _precedent(p: Any) -> Precedent:
    if isinstance(p, Mapping):
        return Precedent(
            trajectory=p["trajectory"], step=p["step"], pseudo_label=p["pseudo_label"], similarity=p["similarity"]
        )
    tid, step, label, sim = p
    return Precedent(trajectory=tid, step=step, pseudo_label=label, similarity=sim)


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    lines = path.read_bytes().split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if i == len(lines) - 1:
                return  # torn final write; everything before it is intact
            raise RunError(f"{path}:{i + 1}: not a JSON row: {exc}") from exc
        if not isinstance(row, dict):
            raise RunError(f"{path}:{i + 1}: a row must be a JSON object")
        yield i + 1, row
