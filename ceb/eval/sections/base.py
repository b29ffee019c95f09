"""The report's section registry, the context sections read, and the helpers the sections share.

A section is a function ``(context) -> parts`` made a :class:`Section` by :func:`section`, naming the
:class:`ReportContext` fields it reads (``needs``) and fills in (``yields``); its number is its place in
:data:`SECTIONS`, and :func:`registered_sections` checks the wiring.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ceb.config import CEBConfig
from ceb.errors import ConfigError
from ceb.eval.ablations import is_sweep_cell
from ceb.eval.bootstrap import MIN_TRAJECTORIES
from ceb.eval.calibration import MetricRow
from ceb.eval.lanes import POOLED, ScoredLane
from ceb.eval.render import Block, Cell, Column, Note, Part, Result, Row, Table, Text, method_label, method_sort_key
from ceb.registry import Registry
from ceb.stages.methods import ResolvedMethod

__all__ = [
    "SECTIONS",
    "AUC",
    "BRIER",
    "ECE",
    "ReportContext",
    "Section",
    "SectionFn",
    "by_stream",
    "critic_blocks",
    "drawn",
    "few_trajectories",
    "figure_methods",
    "finite_or_none",
    "grid",
    "group_by",
    "lane_orders",
    "metric_cells",
    "metric_json",
    "na_notes",
    "registered_sections",
    "section",
    "where",
]


T = TypeVar("T")
K = TypeVar("K")


@dataclass(slots=True)
class ReportContext:
    """What the sections read: the run's lanes and settings, plus what earlier sections computed.

    Attributes:
        base: Each (stream, critic, method)'s lowest-order lane (:func:`ceb.eval.lanes.base_lanes`).
        settings: The run's recorded ``ceb`` settings (defaults without ``config.json``).
        methods: The run's known methods, resolved over ``settings``.
        rows: The main table's metric rows (section 1).
        headline: Each (critic, method)'s headline row (section 1).
        references: The reference rules' lanes (:mod:`ceb.eval.reference_rules`; section 1).
        reference_rows: Their metric rows, per stream and pooled (section 1).
    """

    run: Path
    lanes: Sequence[ScoredLane]
    base: Sequence[ScoredLane]
    n_bins: int
    n_boot: int
    seed: int
    colors: Mapping[str, str]
    settings: CEBConfig
    methods: Mapping[str, ResolvedMethod]
    rows: list[MetricRow] = field(default_factory=list)
    headline: dict[tuple[str, str], MetricRow] = field(default_factory=dict)
    references: list[ScoredLane] = field(default_factory=list)
    reference_rows: list[MetricRow] = field(default_factory=list)
    _slugs: dict[tuple[str, ...], str] = field(default_factory=dict)

    def slug(self, *parts: str) -> str:
        """A file-name-safe stem for ``parts``, unique in the report (the same parts always give the same stem)."""
        if parts not in self._slugs:
            base = re.sub(r"[^A-Za-z0-9._]+", "-", "-".join(p for p in parts if p)).strip("-.") or "stream"
            stem, i = base, 2
            while stem in self._slugs.values():
                stem, i = f"{base}-{i}", i + 1
            self._slugs[parts] = stem
        return self._slugs[parts]


SectionFn = Callable[[ReportContext], Iterable[Part]]
"""A section: yields its parts of the report in order, from the context."""

_YIELDED = frozenset({"rows", "headline", "references", "reference_rows"})
_INPUTS = frozenset(f.name for f in fields(ReportContext) if not f.name.startswith("_")) - _YIELDED


@dataclass(frozen=True, slots=True)
class Section:
    """One section of ``report.md``; ``number`` is set by :func:`registered_sections` (0 before).

    Attributes:
        labelled: It measures against labels: a run without any labelled step leaves it out.
        intro: A fixed paragraph under the heading (a run-dependent one opens the section's parts instead).
    """

    title: str
    needs: tuple[str, ...]
    yields: tuple[str, ...]
    write: SectionFn
    number: int = 0
    labelled: bool = True
    intro: str = ""

    @property
    def heading(self) -> str:
        """The Markdown heading text, e.g. ``"5. Selective execution (section 4.5)"``."""
        return f"{self.number}. {self.title}"

    def __call__(self, ctx: ReportContext) -> Result:
        """The section's result: its intro, then the parts its function yields."""
        return Result((*([Text(self.intro)] if self.intro else []), *self.write(ctx)))


SECTIONS: Registry[Section] = Registry("report section")
"""The report's sections in report order: the order of registration (:mod:`ceb.eval.sections` declares the
built-in ones in one list), so a new section takes its place without renumbering anything by hand."""


def section(
    title: str, *, needs: Sequence[str] = (), yields: Sequence[str] = (), labelled: bool = True, intro: str = ""
) -> Callable[[SectionFn], Section]:
    """Make the decorated function a report section (:class:`Section`); register it in :data:`SECTIONS` to place it.

    Raises:
        ConfigError: A name in ``needs`` / ``yields`` is not a context field.
    """
    unknown = (set(needs) | set(yields)) - _INPUTS - _YIELDED
    if unknown:
        raise ConfigError(f"section {title!r}: {sorted(unknown)} are not ReportContext fields")

    def make(fn: SectionFn) -> Section:
        return Section(title, tuple(needs), tuple(yields), fn, labelled=labelled, intro=intro)

    return make


def registered_sections(*, labelled: bool = True) -> list[Section]:
    """The sections of :data:`SECTIONS` in order, numbered from 1 (only the label-free ones unless ``labelled``).

    Raises:
        ConfigError: A section needs a field that no earlier section yields.
    """
    kept = [s for _, s in SECTIONS.items() if labelled or not s.labelled]
    ordered = [replace(s, number=i) for i, s in enumerate(kept, start=1)]
    available = set(_INPUTS)
    for s in ordered:
        missing = set(s.needs) - available
        if missing:
            raise ConfigError(f"section {s.heading!r} needs {sorted(missing)}, which no earlier section yields")
        available |= set(s.yields)
    return ordered


def few_trajectories(counts: Iterable[tuple[str, int]]) -> tuple[str, ...]:
    """A footnote naming each block (and its trajectory count) whose intervals rest on < ``MIN_TRAJECTORIES``."""
    per_block: dict[str, set[int]] = {}
    for block, n in counts:
        if 0 < n < MIN_TRAJECTORIES:
            per_block.setdefault(block, set()).add(n)
    if not per_block:
        return ()
    named = [f"{b} ({'-'.join(map(str, sorted({min(ns), max(ns)})))} trajectories)" for b, ns in per_block.items()]
    return (
        f"Caveat: intervals over fewer than {MIN_TRAJECTORIES} trajectories are rough (a percentile bootstrap over a "
        f"handful of trajectories sees few distinct replicates and covers less than its 95%): {', '.join(named)}.",
    )


def na_notes(rows: Sequence[MetricRow]) -> list[str]:
    """One note per metric row without numbers, saying where and why it prints n/a."""
    return [
        f"{method_label(r.method)} on {where(r.stream, r.critic)}: n/a ({r.note})" for r in rows if r.summary is None
    ]


def where(stream: str, critic: str, *, pooled: str = "all streams (pooled)") -> str:
    """How the report names a (stream, critic): ``"web / gpt"``, or ``pooled`` for the pooled rows."""
    name = pooled if stream == POOLED else stream
    return f"{name} / {critic}" if critic else name


def metric_json(r: MetricRow) -> dict[str, Any]:
    """A metric row as report.json stores it."""
    return {
        "stream": r.stream,
        "order": r.order,
        "critic": r.critic,
        "method": r.method,
        "n": r.n,
        "failed": r.failed,
        "unlabeled": r.unlabeled,
        "n_trajectories": r.n_trajectories,
        "metrics": None if r.summary is None else r.summary.to_dict(),
        "ci": None if r.ci is None else asdict(r.ci),
        "note": r.note,
    }


def drawn(methods: Iterable[str]) -> set[str]:
    """The methods figures draw: all but the V / k sweep cells (unless only those ran)."""
    names = set(methods)
    sweep = {m for m in names if is_sweep_cell(m)}
    return names if sweep == names else names - sweep


def figure_methods(methods: Sequence[str]) -> tuple[set[str], tuple[Note, ...]]:
    """:func:`drawn`, and a note naming how many sweep cells were left out when some were."""
    shown = drawn(methods)
    left = len(set(methods)) - len(shown)
    if not left:
        return shown, ()
    return shown, (
        Note(f"Figures leave out the {left} V / k sweep cells (see the sweep tables); the table above has them."),
    )


def lane_orders(lanes: Iterable[ScoredLane]) -> dict[tuple[str, str, str], int]:
    """The stream order of each ``(stream, critic, method)`` lane, so report.json rows carry it as a field."""
    return {(lane.stream, lane.critic, lane.method): lane.order for lane in lanes}


def group_by(items: Iterable[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    """``items`` in lists by ``key``, keys and items in the order they come."""
    out: dict[K, list[T]] = {}
    for item in items:
        out.setdefault(key(item), []).append(item)
    return out


def by_stream(items: Mapping[tuple[str, str, str], Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Regroup ``(stream, critic, method)`` keys as ``(stream, critic) -> method -> value``."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for (stream, critic, method), value in items.items():
        out.setdefault((stream, critic), {})[method] = value
    return out


ECE = Column("ECE", "lower")
"""Equal-width ECE, lower is better."""
BRIER = Column("Brier", "lower")
"""Brier score, lower is better."""
AUC = Column("AUC", "higher")
"""AUROC, higher is better."""


def grid(
    keys: Sequence[tuple[str, str, str]],
    columns: tuple[Column, ...],
    cells: Callable[[str, str, str], tuple[Cell, ...] | None],
    *,
    caption: str,
    label: str,
    extra_rows: Callable[[str, Sequence[str]], list[Row]] | None = None,
    notes: Sequence[str] = (),
) -> Table:
    """Blocks per critic, column groups per stream, rows per method, from ``(stream, critic, method)`` keys."""
    streams = list(dict.fromkeys(k[0] for k in keys))
    critics = sorted({k[1] for k in keys})
    blocks = []
    for critic in critics:
        methods = sorted({k[2] for k in keys if k[1] == critic}, key=method_sort_key)
        rows = []
        for method in methods:
            row_cells: list[Cell] = []
            for stream in streams:
                got = cells(stream, critic, method)
                row_cells += list(got) if got is not None else [Cell() for _ in columns]
            rows.append(Row(method_label(method), tuple(row_cells)))
        if extra_rows is not None:
            rows += extra_rows(critic, streams)
        blocks.append(Block(critic, tuple(rows)))
    groups = tuple((stream, columns) for stream in streams)
    return Table(caption=caption, label=label, groups=groups, blocks=tuple(blocks), notes=tuple(notes))


def finite_or_none(value: float) -> float | None:
    """``value`` as a float, or ``None`` (printed ``n/a``) when it is NaN or infinite."""
    return None if not np.isfinite(value) else float(value)


def metric_cells(row: MetricRow | None) -> tuple[Cell, Cell, Cell]:
    """ECE, Brier and AUC cells of a metric row; three ``n/a`` cells when it has no numbers."""
    if row is None or row.summary is None:
        return (Cell(), Cell(), Cell())
    s = row.summary
    return (Cell(s.ece), Cell(s.brier), Cell(s.auroc))


def critic_blocks(rows: Mapping[str, list[Row]]) -> tuple[Block, ...]:
    """One block per critic, in the mapping's order."""
    return tuple(Block(critic, tuple(block)) for critic, block in rows.items())
