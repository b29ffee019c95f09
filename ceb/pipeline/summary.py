"""What a call of :func:`~ceb.pipeline.runner.run_scoring` did, counted as rows are written, and how it ended.

:class:`RunSummary` counts the rows; :func:`summary_doc` is the content of the run directory's ``summary.json``
(:meth:`ceb.pipeline.rundir.RunDir.write_summary`); :class:`FailureBudget` stops a run whose failures pass
``fail_on_error``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ceb.backends.cache import CacheCounts
from ceb.config import RunConfig
from ceb.errors import RunError
from ceb.pipeline.results import HindsightRow, StepRow
from ceb.pipeline.rundir import RunDir
from ceb.pipeline.score_warnings import run_warnings
from ceb.stages.base import CallStats, Stages
from ceb.version import __version__

__all__ = [
    "DISCARDED",
    "SUMMARY_SCHEMA",
    "BankSize",
    "FailureBudget",
    "Labeller",
    "Row",
    "RunSummary",
    "VoteCounts",
    "cache_counts",
    "labellers",
    "summary_doc",
]

Row = StepRow | HindsightRow


@dataclass(frozen=True, slots=True)
class BankSize:
    """The bank of one lane at the end of a run (an entry of ``summary.json``'s ``banks``).

    Attributes:
        path: The saved bank relative to the run directory (``banks/<lane name>.json``), ``None`` without a bank.
    """

    stream: str
    order: int
    method: str
    critic: str
    records: int
    path: str | None


@dataclass(frozen=True, slots=True)
class Labeller:
    """The hindsight labeller ``g_phi`` of one critic (``summary.json``'s ``hindsight_labellers``).

    Attributes:
        backend: Backend name (``offline``: the model-free rules).
        model: The model name requests carried (``""`` without one).
        base_url: Its endpoint root(s); empty in process.
    """

    critic: str
    backend: str
    model: str
    base_url: list[str]


def labellers(config: RunConfig) -> list[Labeller]:
    """Who labels each critic's banks under ``config``: ``hindsight``'s own endpoint, else the critic's."""
    out = []
    for label, cfg in config.critic_configs().items():
        b = cfg.hindsight_backend() or cfg.backend
        out.append(Labeller(label, b.name, b.served_model, list(b.base_urls)))
    return out


def cache_counts(stages: Iterable[Stages]) -> CacheCounts | None:
    """The reply cache counts of ``stages``, summed over their distinct stores; ``None`` without a cache."""
    stores = {id(s.cache): s.cache for s in stages if s.cache is not None}
    return CacheCounts.total(store.counts for store in stores.values())


@dataclass
class VoteCounts:
    """Hindsight votes and pseudo-labels over one stream (``summary.json``'s ``hindsight_votes``), model rows only.

    ``votes_1`` / ``votes_0`` count valid votes over every vote and labelled step, ``votes_failed`` whole votes,
    ``pseudo_1`` / ``pseudo_0`` majority pseudo-labels (Eq. 3).
    """

    votes_1: int = 0
    votes_0: int = 0
    votes_failed: int = 0
    pseudo_1: int = 0
    pseudo_0: int = 0

    def add(self, row: HindsightRow) -> None:
        """Count ``row``'s votes and pseudo-labels."""
        ones = sum(sum(vote) for vote in row.votes)
        self.votes_1 += ones
        self.votes_0 += sum(len(vote) for vote in row.votes) - ones
        self.votes_failed += row.failed_votes
        self.pseudo_1 += sum(row.pseudo_labels)
        self.pseudo_0 += len(row.pseudo_labels) - sum(row.pseudo_labels)


@dataclass
class RunSummary:
    """What a run did, counted as rows were written.

    Attributes:
        steps_unavailable: Rows of a method that cannot score there: neither scored nor failed, never against
            ``fail_on_error``.
        trajectories_not_banked: Trajectories that added no record (no valid vote, or every step abstained).
        wall_s: Seconds from start to the last row.
        requests: Requests sent, retries, re-asks and ``discarded_requests`` included.
        steps_resumed: Step rows kept from before a resume (in ``steps_scored``); ``trajectories_resumed`` likewise.
        prompt_tokens: Server-reported tokens of this call's rows (resumed rows not included).
        steps_reused: Rows copied from another order (:mod:`ceb.pipeline.pool`), in no other outcome count and no
            requests; never resumed.
        hindsight_labellers: Per critic label, the labeller's backend, model and base URL(s) (:func:`labellers`).
        cache: :class:`~ceb.backends.cache.CacheCounts`, ``None`` when off; ``requests`` and tokens include cached
            answers' recorded cost, ``cache.sent`` what was really sent.
        provenance: What scored the run (:mod:`ceb.pipeline.provenance`).
        steps_kept_ahead: Rows scored ahead of the bank and kept (in the outcome counts).
        steps_discarded: Calls scored ahead and discarded (:mod:`ceb.pipeline.lane`); no row holds them. Their cost
            is in ``discarded_requests`` and ``discarded_*_tokens``, included in the totals.
    """

    run_dir: Path
    steps_scored: int = 0
    steps_failed: int = 0
    steps_clipped: int = 0
    trajectories_voted: int = 0
    votes_failed: int = 0
    trajectories_not_banked: int = 0
    wall_s: float = 0.0
    requests: int = 0
    banks: list[BankSize] = field(default_factory=list)
    steps_resumed: int = 0
    trajectories_resumed: int = 0
    steps_unavailable: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    steps_abstained: int = 0
    steps_reused: int = 0
    hindsight_votes: dict[str, VoteCounts] = field(default_factory=dict)
    hindsight_labellers: list[Labeller] = field(default_factory=list)
    cache: CacheCounts | None = None
    provenance: dict[str, Any] | None = None
    steps_kept_ahead: int = 0
    steps_discarded: int = 0
    discarded_requests: int = 0
    discarded_prompt_tokens: int = 0
    discarded_completion_tokens: int = 0

    def warnings(self) -> list[str]:
        """The run's warnings from its rows (:func:`ceb.pipeline.score_warnings.run_warnings`)."""
        return run_warnings(RunDir(self.run_dir))

    def count_resumed(self, row: Row) -> None:
        """Count a row kept from before a resume (its requests were spent by the earlier run)."""
        if isinstance(row, StepRow):
            self.steps_resumed += 1
        else:
            self.trajectories_resumed += 1
        self._count_outcome(row)

    def count(self, row: Row) -> None:
        """Add ``row`` to the counters."""
        self.requests += row.requests
        self.prompt_tokens += row.prompt_tokens or 0
        self.completion_tokens += row.completion_tokens or 0
        self._count_outcome(row)

    def count_ahead(self, kept: int, discarded: int, cost: CallStats) -> None:
        """Add a lane's speculation: ``kept`` steps scored ahead and kept, ``discarded`` ones that cost ``cost``."""
        prompt, completion = cost.prompt_tokens or 0, cost.completion_tokens or 0
        self.steps_kept_ahead += kept
        self.steps_discarded += discarded
        self.discarded_requests += cost.requests
        self.discarded_prompt_tokens += prompt
        self.discarded_completion_tokens += completion
        self.requests += cost.requests
        self.prompt_tokens += prompt
        self.completion_tokens += completion

    def _count_outcome(self, row: Row) -> None:
        if isinstance(row, StepRow):
            if row.reused_from is not None:
                self.steps_reused += 1
            elif row.status == "not_available":
                self.steps_unavailable += 1
            elif row.status == "failed":
                self.steps_failed += 1
            else:
                self.steps_scored += 1
            self.steps_clipped += row.clipped and row.reused_from is None
        else:
            self.trajectories_voted += 1
            if row.requests:
                self.hindsight_votes.setdefault(row.stream, VoteCounts()).add(row)
            self.votes_failed += row.failed_votes
            self.trajectories_not_banked += row.records_added == 0
            self.steps_abstained += len(row.abstained)


DISCARDED = ("steps_discarded", "discarded_requests", "discarded_prompt_tokens", "discarded_completion_tokens")
"""The counts of :class:`RunSummary` that speculation discarded (the report's token-cost section shows them)."""

SUMMARY_SCHEMA = 2
"""Layout version of ``summary.json``; 2: ``banks`` is a list of :class:`BankSize`."""


def summary_doc(summary: RunSummary, outcome: str, error: str, started_at: datetime) -> dict[str, Any]:
    """The content of ``summary.json``: how a call of :func:`~ceb.pipeline.runner.run_scoring` ended and what it did.

    Written once a call passed its start checks, however it ends: ``status`` ``finished``, ``failed`` (with ``error``)
    or ``interrupted``. A resume's counts include the resumed rows, but not their requests and tokens.
    """
    return {
        "schema": SUMMARY_SCHEMA,
        "status": outcome,
        "error": error or None,
        "started_at": started_at.isoformat(timespec="seconds"),
        "ended_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "ceb_version": __version__,
        **{k: v for k, v in asdict(summary).items() if k != "run_dir"},
        "warnings": summary.warnings(),
    }


class FailureBudget:
    """Stops a run whose failed steps pass ``fail_on_error``: a count (>= 1), or a fraction (< 1) from ``MIN_STEPS``."""

    MIN_STEPS = 20

    def __init__(self, fail_on_error: float) -> None:
        self.fail_on_error = fail_on_error

    def check(self, summary: RunSummary, row: Row) -> None:
        """Raise :class:`RunError` when the budget is spent (naming the count and the last reason)."""
        failed, done = summary.steps_failed, summary.steps_failed + summary.steps_scored
        limit = self.fail_on_error
        over = failed > limit if limit >= 1 else done >= self.MIN_STEPS and failed > limit * done
        if over and isinstance(row, StepRow) and row.error is not None:
            raise RunError(
                f"stopping: {failed} of {done} steps failed (fail_on_error = {limit:g}); last failure in stream "
                f"{row.stream}, trajectory {row.trajectory}, step {row.step}: {row.error}. Finished rows are in "
                f"{RunDir(summary.run_dir).scores}"
            )
