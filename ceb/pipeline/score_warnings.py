"""Warnings that a run's numbers mean little: scores that carry no information, banks of one class.

Computed from the rows alone, so finished, interrupted and merged runs agree; :func:`run_warnings` fills
``summary.json``'s ``warnings``.

- **Degenerate scores**: at most :data:`DEGENERATE_MAX_VALUES` distinct values over at least
  :data:`DEGENERATE_MIN_STEPS` scored steps, per (critic, method) pooled, else per stream; a step scored in
  several orders counts once.
- **One-class pseudo-labels**: at least :data:`ONE_CLASS_SHARE` of one class over at least
  :data:`ONE_CLASS_MIN_LABELS` labels per (stream, critic, method): contrastive retrieval (Sec. 3.3) has nothing
  to contrast. Rows that asked no model are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ceb.errors import ConfigError, RunError
from ceb.pipeline.results import HindsightRow, StepRow, read_hindsight_rows, read_step_rows
from ceb.pipeline.rundir import RunDir
from ceb.stages.methods import resolve_method

__all__ = [
    "DEGENERATE_MAX_VALUES",
    "DEGENERATE_MIN_STEPS",
    "ONE_CLASS_MIN_LABELS",
    "ONE_CLASS_SHARE",
    "degenerate_score_warnings",
    "one_class_warnings",
    "run_warnings",
]

DEGENERATE_MIN_STEPS = 10
"""Scored steps from which a method's scores are checked for :data:`DEGENERATE_MAX_VALUES` distinct values."""
DEGENERATE_MAX_VALUES = 2
"""At most this many distinct score values over :data:`DEGENERATE_MIN_STEPS` or more steps: a warning."""
ONE_CLASS_SHARE = 0.95
"""A method's pseudo-labels of a stream at least this share one class: a warning (Sec. 3.3's contrast is gone)."""
ONE_CLASS_MIN_LABELS = 5
"""Fewer pseudo-labels than this for a (stream, critic, method) are too few to flag."""


def run_warnings(run_dir: RunDir) -> list[str]:
    """The warnings of the rows in ``run_dir`` (degenerate scores first); an unreadable file gives none."""
    try:
        steps = list(read_step_rows(run_dir.scores)) if run_dir.scores.exists() else []
    except RunError:
        steps = []
    try:
        hindsight = list(read_hindsight_rows(run_dir.hindsight)) if run_dir.hindsight.exists() else []
    except RunError:
        hindsight = []
    return degenerate_score_warnings(steps) + one_class_warnings(hindsight)


@dataclass
class _Spread:
    """The distinct scores of one (critic, method), per stream and pooled, each step once."""

    values: set[float] = field(default_factory=set)
    steps: set[tuple[str, str, int]] = field(default_factory=set)
    per_stream: dict[str, tuple[set[float], set[tuple[str, int]]]] = field(default_factory=dict)
    readouts: set[str] = field(default_factory=set)

    def add(self, row: StepRow) -> None:
        assert row.score is not None
        self.values.add(row.score)
        self.steps.add((row.stream, row.trajectory, row.step))
        values, steps = self.per_stream.setdefault(row.stream, (set(), set()))
        values.add(row.score)
        steps.add((row.trajectory, row.step))
        if row.readout is not None:
            self.readouts.add(row.readout)


def _degenerate(values: set[float], steps: int) -> bool:
    return steps >= DEGENERATE_MIN_STEPS and len(values) <= DEGENERATE_MAX_VALUES


def degenerate_score_warnings(rows: Iterable[StepRow]) -> list[str]:
    """One sentence per (critic, method) whose scores carry no information (module docstring).

    For a text readout it suggests ``critic.readout = "expected"``, as a fact when the rows prove log-probs work.
    """
    spreads: dict[tuple[str, str], _Spread] = {}
    logprobs = False
    for row in rows:
        if row.score is None:
            continue
        spreads.setdefault((row.critic, row.method), _Spread()).add(row)
        logprobs = logprobs or row.readout == "expected" or "logprobs" in _needs(row.method)
    out = []
    for (critic, method), s in sorted(spreads.items()):
        if _degenerate(s.values, len(s.steps)):
            where, values, n = f"{len(s.per_stream)} stream(s) pooled", s.values, len(s.steps)
        else:
            bad = [(name, v, len(st)) for name, (v, st) in sorted(s.per_stream.items()) if _degenerate(v, len(st))]
            if not bad:
                continue
            where = ", ".join(f"stream {name}" for name, *_ in bad)
            values = set().union(*(v for _, v, _ in bad))
            n = sum(k for *_, k in bad)
        shown = ", ".join(f"{v:g}" for v in sorted(values))
        who = f"method {method}" + (f" (critic {critic})" if critic else "")
        meaning = (
            "a constant: it ranks nothing (AUROC 0.5) and its ECE and Brier only measure how far that constant is "
            "from the positive rate"
            if len(values) == 1
            else "a two-valued rule, not a graded confidence: it ranks steps in two groups only and its ECE and "
            "Brier read two numbers"
        )
        text = f"{who}: its scores take {len(values)} distinct value(s) ({shown}) over {n} scored steps on {where}"
        out.append(f"{text}; {meaning}{_readout_advice(s.readouts, logprobs)}")
    return out


def _readout_advice(readouts: set[str], logprobs: bool) -> str:
    if not readouts:
        return " (the method has no verbal score, so no readout to change)"
    named = f"; readout: {', '.join(sorted(readouts))}"
    if readouts <= {"expected"}:
        return named
    if logprobs:
        return named + (
            '; this run\'s endpoint returns log-probs, so critic.readout = "expected" would read the '
            "probability-weighted score"
        )
    return named + (
        '; if the endpoint returns log-probs (`ceb doctor` checks), critic.readout = "expected" reads the '
        "probability-weighted score"
    )


def _needs(method: str) -> tuple[str, ...]:
    try:
        return resolve_method(method).needs
    except ConfigError:
        return ()


def one_class_warnings(rows: Iterable[HindsightRow]) -> list[str]:
    """One sentence per (stream, critic, method) whose pseudo-labels are (almost) one class (module docstring)."""
    counts: dict[tuple[str, str, str], list[int]] = {}
    for row in rows:
        if not row.requests:
            continue  # no model asked: the oracle bank or the offline labeller
        c = counts.setdefault((row.stream, row.critic, row.method), [0, 0])
        ones = sum(row.pseudo_labels)
        c[1] += ones
        c[0] += len(row.pseudo_labels) - ones
    out = []
    for (stream, critic, method), (zeros, ones) in sorted(counts.items()):
        n = zeros + ones
        if n < ONE_CLASS_MIN_LABELS or max(zeros, ones) < ONE_CLASS_SHARE * n:
            continue
        cls, same = (1, ones) if ones >= zeros else (0, zeros)
        who = f"method {method}" + (f" (critic {critic})" if critic else "")
        out.append(
            f"stream {stream}, {who}: {same} of {n} hindsight pseudo-labels are {cls}; its banks hold "
            f"{'one class' if same == n else 'almost one class'}, so CEB's contrastive retrieval has little to "
            "contrast"
        )
    return out
