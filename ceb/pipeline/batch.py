"""The bank-free baselines through a Batch API (OpenAI, Azure, ``vllm run-batch``): export requests, import replies.

Bank-free steps (``ppl``, ``me``, ``ptrue``, ``cot``, ``verbalized``, ``pro``) depend on no other step's reply.
Export and import are both :func:`~ceb.pipeline.runner.run_scoring` over a
:class:`~ceb.backends.batch.BatchTransport`, which answers from the replies it has and records the rest: export
writes ``round-1.jsonl``; import writes the ordinary rows, ``summary.json`` and ``metrics.json``. Requests sent
only after another reply (``pro``'s teacher forcing, ``cot``'s re-ask) go to ``round-2.jsonl``, their steps failed
rows until round 2's output is imported (``--overwrite``). Each output line joins the round whose file holds its
request, in any order.

The batch directory (:class:`BatchDir`)::

    batch.json                  the export: tag, effective config, the streams' files and their digests
    round-<k>.jsonl             Batch input file of round k (submit this)
    round-<k>.output.jsonl      its output, every file given for it joined by ``ceb batch import``
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ceb.backends.base import ChatBackend
from ceb.backends.batch import (
    BATCH_CONCURRENCY,
    BatchReply,
    BatchRequest,
    BatchTransport,
    export_tag,
    read_output,
    read_requests,
    request_line,
)
from ceb.config import RunConfig
from ceb.data.trajectory import Trajectory
from ceb.errors import ConfigError, RunError
from ceb.logs import muted
from ceb.pipeline.rundir import RunDir, write_atomic
from ceb.pipeline.runner import run_scoring
from ceb.pipeline.summary import Row, RunSummary
from ceb.stages.assembly import llm_stages
from ceb.stages.methods import resolve_method

__all__ = ["BatchDir", "BatchRound", "batch_config", "batchable", "export_batch", "import_batch"]

_FORMAT = "ceb-batch/1"
_WAITING_EVENTS = ("critic step failed", "method not available here")
"""The lane's log events of a step without a reply: in an export every step is one, and they say nothing."""
_NO_BUDGET = 1e12
"""``fail_on_error`` of a batch replay: a step waiting for the next round is a failed row, and must not stop it."""


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class BatchDir:
    """A batch export's directory: the one place that names its files (module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def manifest_file(self) -> Path:
        """``batch.json``: what was exported, from which streams, under which settings."""
        return self.path / "batch.json"

    def round_file(self, k: int) -> Path:
        """The Batch input file of round ``k`` (1-based)."""
        return self.path / f"round-{k}.jsonl"

    def output_file(self, k: int) -> Path:
        """Round ``k``'s output, as imported."""
        return self.path / f"round-{k}.output.jsonl"

    def rounds(self) -> int:
        """How many rounds were exported (0 for an empty or missing directory)."""
        k = 0
        while self.round_file(k + 1).is_file():
            k += 1
        return k

    def manifest(self) -> dict[str, Any]:
        """The recorded export.

        Raises:
            RunError: The directory holds no export (no ``batch.json``), or it is not a ceb batch manifest.
        """
        try:
            doc = json.loads(self.manifest_file.read_bytes())
        except FileNotFoundError:
            raise RunError(
                f"{self.path} holds no batch export (no {self.manifest_file.name}); run ceb batch export"
            ) from None
        except ValueError as exc:
            raise RunError(f"{self.manifest_file}: not JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise RunError(f"{self.manifest_file}: not a {_FORMAT} manifest")
        return doc

    def config(self) -> RunConfig:
        """The export's effective configuration.

        Raises:
            RunError: As :meth:`manifest`.
        """
        return RunConfig.model_validate(self.manifest()["config"])

    def streams(self) -> dict[str, list[str]]:
        """Stream name -> its files, as exported.

        Raises:
            RunError: A file is gone or its digest changed since the export.
        """
        doc = self.manifest()
        for path, digest in doc["digests"].items():
            p = Path(path)
            if not p.is_file():
                raise RunError(f"{p}: a stream file of the batch export in {self.path} is gone")
            if _digest(p) != digest:
                raise RunError(f"{p}: changed since the batch export in {self.path}; export again")
        return {name: list(paths) for name, paths in doc["streams"].items()}

    def requests(self) -> list[BatchRequest]:
        """Every round's requests, in round order.

        Raises:
            DataError: A malformed line of a round's file.
        """
        return [r for rs in self.requests_by_round().values() for r in rs]

    def requests_by_round(self) -> dict[int, list[BatchRequest]]:
        """Round ``k`` (1-based) -> the requests of its Batch file, in order.

        Raises:
            DataError: A malformed line of a round's file.
        """
        return {k: read_requests(self.round_file(k)) for k in range(1, self.rounds() + 1)}

    def imported(self, k: int) -> bool:
        """Whether an output of round ``k`` has been imported."""
        return self.output_file(k).is_file()

    def replies(self, requests: Sequence[BatchRequest]) -> dict[str, BatchReply]:
        """Every imported round's replies by ``custom_id``.

        Raises:
            DataError: A malformed output line, or an id no request has (:func:`~ceb.backends.batch.read_output`).
        """
        known = {r.custom_id: r for r in requests}
        out: dict[str, BatchReply] = {}
        for k in range(1, self.rounds() + 1):
            if self.output_file(k).is_file():
                out |= read_output(self.output_file(k), known)
        return out

    def write_round(self, k: int, lines: Sequence[BatchRequest]) -> Path:
        """Write round ``k``'s Batch input file atomically and return its path.

        Raises:
            OSError: The write failed (the old file is left).
        """
        path = self.round_file(k)
        write_atomic(path, b"".join(request_line(r) for r in lines))
        return path


@dataclass(frozen=True, slots=True)
class BatchRound:
    """What an export or an import did.

    Attributes:
        path: The newest Batch file to submit (output not imported yet), ``None`` when no request waits.
        round: Its 1-based number; the last round when ``path`` is ``None``.
        summary: The import's run summary (``None`` for an export).
        unanswered: Requests of imported rounds that their output does not answer (failed steps).
        waiting: Round -> its requests, for every round whose output is not imported yet, oldest first.
    """

    path: Path | None
    round: int
    requests: int
    summary: RunSummary | None = None
    unanswered: int = 0
    replies: int = 0
    waiting: Mapping[int, int] = field(default_factory=dict)


def batch_config(config: RunConfig) -> RunConfig:
    """``config`` checked for a Batch export, with a replay's failure budget (:data:`_NO_BUDGET`).

    Raises:
        ConfigError: A method that is not a bank-free baseline, several critics, a separate actor endpoint, or no
            ``backend.model``.
    """
    refused = [m for m in config.methods if not batchable(m)]
    if refused:
        raise ConfigError(
            f"{', '.join(refused)} cannot go through a Batch file: only the bank-free baselines can (ppl, me, ptrue, "
            "cot, verbalized, pro), whose steps ask nothing that depends on another step's reply"
        )
    if config.critics:
        raise ConfigError("a Batch file serves one model: critics (several critic endpoints) cannot be batched")
    if config.baselines.actor_base_url or config.baselines.actor_model:
        raise ConfigError(
            "a Batch file serves one model: unset baselines.actor_base_url / actor_model, or export each model apart"
        )
    if not config.backend.model:
        raise ConfigError("a Batch file names the model in every request: set backend.model (--model)")
    # Each request of a Batch file belongs to one method's lane (its custom_id), so none is shared between lanes.
    baselines = config.baselines.model_copy(update={"share_statistics": False})
    return config.model_copy(update={"fail_on_error": _NO_BUDGET, "baselines": baselines})


def _output_lines(path: Path, known: Mapping[str, BatchRequest]) -> dict[str, bytes]:
    """The lines of a Batch output file by ``custom_id`` (newline included), checked first."""
    read_output(path, known)  # checked first: a broken line is refused naming this file and its line
    lines = (raw.strip() for raw in path.read_bytes().splitlines())
    return {orjson.loads(raw)["custom_id"]: raw + b"\n" for raw in lines if raw}


def _join_outputs(src: BatchDir, outputs: Sequence[Path], by_round: Mapping[int, Sequence[BatchRequest]]) -> None:
    """Join the lines of ``outputs`` into the imported output of the round that holds each one's request."""
    known = {r.custom_id: r for rs in by_round.values() for r in rs}
    rounds = {r.custom_id: k for k, rs in by_round.items() for r in rs}
    given: dict[str, bytes] = {}
    seen: dict[str, Path] = {}
    for path in outputs:
        for cid, raw in _output_lines(path, known).items():
            if cid in seen:
                raise RunError(f"{path}: {cid} is answered in {seen[cid]} too")
            seen[cid] = path
            given[cid] = raw
    touched = sorted({rounds[cid] for cid in given})
    joined: dict[int, bytes] = {}
    for k in touched:
        kept = _output_lines(src.output_file(k), known) if src.imported(k) else {}
        kept = {cid: raw for cid, raw in kept.items() if cid not in given}
        joined[k] = b"".join(kept.values()) + b"".join(raw for cid, raw in given.items() if rounds[cid] == k)
    for k, data in joined.items():
        write_atomic(src.output_file(k), data)


def batchable(name: str) -> bool:
    """Whether method ``name`` can go through a Batch file: a bank-free baseline with a critic of its own.

    Raises:
        ConfigError: ``name`` is no method (:func:`~ceb.stages.methods.resolve_method`).
    """
    spec = resolve_method(name)
    return spec.group == "baseline" and not spec.use_bank and not spec.uses_llm_critic


async def _replay(
    streams: Mapping[str, Sequence[Trajectory]],
    config: RunConfig,
    backend: BatchTransport,
    run_dir: Path,
    *,
    overwrite: bool,
    on_row: Callable[[Row], None] | None = None,
) -> RunSummary:
    stages = llm_stages(config, ChatBackend(backend, max_concurrency=BATCH_CONCURRENCY, retry=config.backend))
    return await run_scoring(streams, config, run_dir, stages=stages, overwrite=overwrite, on_row=on_row)


async def export_batch(
    streams: Mapping[str, Sequence[Trajectory]],
    files: Mapping[str, Sequence[str | Path]],
    config: RunConfig,
    batch_dir: str | Path,
) -> BatchRound:
    """Write round 1 of a Batch export of ``streams`` (read from ``files``, recorded) into a new ``batch_dir``.

    Raises:
        ConfigError: As :func:`batch_config`.
        RunError: ``batch_dir`` already holds an export.
    """
    config = batch_config(config)
    out = BatchDir(batch_dir)
    if out.manifest_file.exists() or out.rounds():
        raise RunError(f"{out.path} already holds a batch export; give a new directory")
    digests = {str(Path(p).resolve()): _digest(Path(p)) for paths in files.values() for p in paths}
    record = {
        "config": config.model_dump(mode="json"),
        "streams": {name: [str(Path(p).resolve()) for p in paths] for name, paths in files.items()},
        "digests": digests,
    }
    tag = export_tag(record)
    backend = BatchTransport(config.backend, tag)
    with tempfile.TemporaryDirectory(prefix="ceb-batch-") as scratch, muted(*_WAITING_EVENTS):
        await _replay(streams, config, backend, Path(scratch), overwrite=False)
    out.path.mkdir(parents=True, exist_ok=True)
    manifest = {"format": _FORMAT, "tag": tag, **record}
    write_atomic(out.manifest_file, json.dumps(manifest, indent=2).encode())  # json: ints past 64 bits too
    path = out.write_round(1, backend.pending)
    return BatchRound(path, 1, len(backend.pending))


async def import_batch(
    streams: Mapping[str, Sequence[Trajectory]],
    batch_dir: str | Path,
    outputs: Sequence[str | Path],
    run_dir: str | Path,
    *,
    overwrite: bool = False,
    on_row: Callable[[Row], None] | None = None,
) -> BatchRound:
    """Join Batch outputs into ``batch_dir`` and score its run into ``run_dir`` from every reply.

    Args:
        streams: The export's streams (:meth:`BatchDir.streams`).
        batch_dir: The export.
        outputs: Output (and error) files of any rounds, in any order; a request answered again takes the new line.
            Empty: use the outputs imported before.
        run_dir: The run directory to write (as ``ceb score --out``).
        overwrite: Replace an earlier import's results there.
        on_row: Called with each row after it is on disk.

    Returns:
        The newest round to submit (``path`` ``None`` when every request has a reply or error), and the summary.

    Raises:
        DataError: A malformed Batch line, an unknown custom id, or an impossible ``usage`` (names file, line, field).
        RunError: No export, changed streams, an id answered in two outputs, no output for the last round, or
            ``run_dir`` holds scored steps without ``overwrite``.
    """
    src = BatchDir(batch_dir)
    doc = src.manifest()
    k = src.rounds()
    if k == 0:
        raise RunError(f"{src.path} holds no Batch file; run ceb batch export")
    run = RunDir(run_dir)
    if not overwrite and run.has_scores and run.scored_anything():  # as run_scoring, before anything is copied in
        raise RunError(
            f"{run.path} already holds results ({run.SCORES}); import with --overwrite to rebuild it from every "
            "round's replies (the Batch files are kept), or give a new --out"
        )
    by_round = src.requests_by_round()
    rounds = {r.custom_id: j for j, rs in by_round.items() for r in rs}
    if outputs:
        _join_outputs(src, [Path(p) for p in outputs], by_round)
    elif not src.imported(k):
        raise RunError(f"round {k} of {src.path} has no imported output; give its Batch output file")
    requests = [r for rs in by_round.values() for r in rs]
    replies = src.replies(requests)
    waiting = {cid for cid, j in rounds.items() if not src.imported(j)}
    config = RunConfig.model_validate(doc["config"])
    backend = BatchTransport(config.backend, str(doc["tag"]), requests, replies, waiting)
    summary = await _replay(streams, config, backend, Path(run_dir), overwrite=overwrite, on_row=on_row)
    unanswered = len(set(backend.unanswered))
    if backend.pending:
        src.write_round(k + 1, backend.pending)
        by_round[k + 1] = backend.pending
    left = {j: len(rs) for j, rs in by_round.items() if not src.imported(j)}
    if not left:
        return BatchRound(None, k, 0, summary, unanswered, len(replies))
    newest = max(left)
    return BatchRound(src.round_file(newest), newest, left[newest], summary, unanswered, len(replies), left)
