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
        stream: Stream name.
        order: Stream order (0: the input order, ``r >= 1``: seeded permutation ``r``).
        method: Method name.
        critic: Critic label (``""`` for one).
        records: Records in the bank.
        path: The saved bank, relative to the run directory (``banks/<lane name>.json``), or ``None`` for a
            method without a bank.
    """

    stream: str
    order: int
    method: str
    critic: str
    records: int
    path: str | None


@dataclass(frozen=True, slots=True)
class Labeller:
    """The hindsight labeller ``g_phi`` of one critic (an entry of ``summary.json``'s ``hindsight_labellers``).

    Attributes:
        critic: Critic label (``""`` for one).
        backend: The labeller's backend name (``offline``: the model-free rules, no model).
        model: The model name requests carried (``""`` without one).
        base_url: Its endpoint root(s); empty for an in-process backend.
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
    """The hindsight labeller's votes and pseudo-labels over one stream (``summary.json``'s ``hindsight_votes``).

    Counted over every bank-using method's hindsight rows; rows that asked no model (the ``ceb-gt-oracle`` bank)
    are not counted.

    Attributes:
        votes_1: Valid votes "productive" (1), over every vote and labelled step.
        votes_0: Valid votes "unproductive" (0).
        votes_failed: Votes without a readable answer (a whole vote, not a step).
        pseudo_1: Majority pseudo-labels 1 (Eq. 3).
        pseudo_0: Majority pseudo-labels 0.
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
        run_dir: Where the results are.
        steps_scored: Step rows with a score.
        steps_failed: Step rows without one (critic failure; reasons in ``scores.jsonl``).
        steps_unavailable: Step rows of a method that cannot score there (``not available: ...``): neither
            scored nor failed, and never counted against ``fail_on_error``.
        steps_clipped: Scores clipped into [0, 1] (Eq. 6).
        trajectories_voted: Hindsight rows written.
        votes_failed: Hindsight votes without a readable answer.
        trajectories_not_banked: Trajectories that added no record to their bank: no valid vote, or the labeler
            abstained on every step.
        wall_s: Seconds from start to the last row.
        requests: Requests sent, retries, re-asks and discarded speculation (``discarded_requests``) included.
        banks: Each lane's bank at the end, the lane's stream, order, method and critic apart.
        steps_resumed: Step rows kept from before a resume (included in ``steps_scored``).
        trajectories_resumed: Hindsight rows kept from before a resume (included in ``trajectories_voted``).
        prompt_tokens: Input tokens the server reported for this call's rows (resumed rows not included).
        completion_tokens: Output tokens likewise.
        steps_abstained: Steps the hindsight labeler gave no label (no evidence to judge by), so not banked.
        steps_reused: Step rows copied from another stream order (:mod:`ceb.pipeline.pool`), whatever their
            source's outcome; not in ``steps_scored``, ``steps_failed`` or ``steps_unavailable``, and no request
            of theirs in ``requests``. A resume writes every copy again, so they are never among the resumed rows.
        hindsight_votes: Per stream, the hindsight votes and pseudo-labels (:class:`VoteCounts`).
        hindsight_labellers: Which model labelled the banks: per critic label, the labeller's backend, model and
            base URL(s) (:func:`labellers`); the critic's own unless ``hindsight`` names another endpoint.
        cache: What the reply cache did (:class:`~ceb.backends.cache.CacheCounts`: hits, misses, requests sent),
            ``None`` when it is off. ``requests`` and the token counts include the recorded cost of answers
            taken from the cache (their rows repeat it); ``cache.sent`` is what this call really sent.
        provenance: What scored the run (:mod:`ceb.pipeline.provenance`): backend, endpoint, served model, the
            server's version, readout, structured output, adaptations, ceb's version and the config digest.
        steps_kept_ahead: Step rows whose critic call was made ahead of the bank (``speculation``) and kept, its
            request being the strict order's (included in ``steps_scored`` and the other outcome counts).
        steps_discarded: Critic calls of steps scored ahead of the bank (``speculation``) and discarded: their
            request was not the strict order's, or came after one that was not (:mod:`ceb.pipeline.lane`). No row
            holds them.
        discarded_requests: Their requests, included in ``requests`` (a call cut by an interruption is not counted).
        discarded_prompt_tokens: Their input tokens as the server reported them, included in ``prompt_tokens``.
        discarded_completion_tokens: Their output tokens likewise, included in ``completion_tokens``.
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
        """The run's warnings, read from the rows in its directory: uninformative scores, one-class pseudo-labels.

        See :func:`ceb.pipeline.score_warnings.run_warnings`; ``summary.json``'s ``warnings`` holds them.
        """
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
"""Layout version of ``summary.json``. 2: ``banks`` is a list of :class:`BankSize` objects (stream, order,
method and critic each a field of its own), no longer an object keyed by lane file names."""


def summary_doc(summary: RunSummary, outcome: str, error: str, started_at: datetime) -> dict[str, Any]:
    """The content of ``summary.json``: how a call of :func:`~ceb.pipeline.runner.run_scoring` ended and what it did.

    Written when a call that got past its start checks (preflight, settings, resume) ends, however it ends:
    ``status`` is ``finished``, ``failed`` (with ``error``) or ``interrupted`` (Ctrl-C, cancellation). A call
    refused at start writes no file at all, so nothing of it blocks the corrected command. A resume writes it
    anew; its counts include the resumed rows, whose requests and tokens were spent by the earlier call and are
    not counted again.
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
    """Stops a run whose failed steps pass ``fail_on_error``: a count (>= 1) or a fraction (< 1).

    A fraction is judged once at least :attr:`MIN_STEPS` steps are in, so one early failure cannot stop a run.
    """

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
