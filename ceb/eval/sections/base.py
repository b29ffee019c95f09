"""The report's section registry, the context sections read, the report writer and their shared helpers.

A section is a function ``(writer, context) -> None`` made a :class:`Section` by :func:`section` with its
title, naming the :class:`ReportContext` fields it reads (``needs``) and those it fills in (``yields``), and
placed by registering it in :data:`SECTIONS`: its number is its position there. :func:`registered_sections`
returns them in that order and checks the wiring.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ceb.config import CEBConfig
from ceb.errors import ConfigError
from ceb.eval.calibration import MetricRow
from ceb.eval.lanes import POOLED, ScoredLane
from ceb.eval.plots import FigureFormat, save_figure
from ceb.eval.tables import Table, method_label, to_latex, to_markdown
from ceb.registry import Registry
from ceb.stages.methods import ResolvedMethod, resolve_method

__all__ = [
    "SECTIONS",
    "ReportContext",
    "ReportWriter",
    "Section",
    "SectionFn",
    "by_stream",
    "drawn",
    "figure_methods",
    "lane_orders",
    "metric_json",
    "na_notes",
    "registered_sections",
    "section",
    "where",
]


class ReportWriter:
    """Accumulates report.md sections and report.json entries; writes tables and figures as it goes.

    Args:
        out_dir: The report directory.
        figure_formats: Each figure is written once per format (:data:`ceb.eval.plots.FIGURE_FORMATS`).
    """

    def __init__(self, out_dir: Path, figure_formats: Sequence[FigureFormat] = ("png",)) -> None:
        self.out_dir = out_dir
        self.figure_formats = tuple(figure_formats)
        self.lines: list[str] = []
        self.data: dict[str, Any] = {}
        self._slugs: dict[tuple[str, ...], str] = {}

    def heading(self, title: str) -> None:
        """Start a section of report.md titled ``title``."""
        self.lines += ["", f"## {title}", ""]

    def intro(self, text: str) -> None:
        """The paragraph under a section heading saying what the section shows and how it is computed."""
        self.lines += [text, ""]

    def note(self, text: str) -> None:
        """A quoted note (a skipped analysis, a caveat)."""
        self.lines += [f"> {text}", ""]

    def table(self, table: Table) -> None:
        """Write ``table`` as ``<label>.md`` and ``<label>.tex`` and inline its Markdown with links to both."""
        md, tex = f"{table.label}.md", f"{table.label}.tex"
        (self.out_dir / md).write_text(to_markdown(table), encoding="utf-8")
        (self.out_dir / tex).write_text(to_latex(table), encoding="utf-8")
        self.lines += [f"Table: [{md}]({md}) · [{tex}]({tex})", "", to_markdown(table)]

    def figure(self, fig: Figure, stem: str, caption: str) -> None:
        """Write ``fig`` as ``<stem>.<format>`` in each figure format, embed it with its caption, link each file.

        The first PNG or SVG is embedded (Markdown viewers do not show PDF); a PDF-only report links the figure.
        """
        names = [p.name for p in save_figure(fig, self.out_dir / stem, self.figure_formats)]
        shown = next((n for n in names if not n.endswith(".pdf")), None)
        if shown is not None:
            self.lines += [f"![{caption}]({shown})", ""]
        links = " · ".join(f"[{n}]({n})" for n in names)
        self.lines += [f"Figure: {links} — {caption}", ""]

    def slug(self, *parts: str) -> str:
        """A file-name-safe, unique stem for ``parts`` (the same parts always give the same stem)."""
        if parts not in self._slugs:
            base = re.sub(r"[^A-Za-z0-9._]+", "-", "-".join(p for p in parts if p)).strip("-.") or "stream"
            stem, i = base, 2
            while stem in self._slugs.values():
                stem, i = f"{base}-{i}", i + 1
            self._slugs[parts] = stem
        return self._slugs[parts]


@dataclass(slots=True)
class ReportContext:
    """What the sections read: the run's lanes and settings, plus what earlier sections computed.

    Attributes:
        run: The run directory.
        lanes: Every lane of the run, all orders.
        base: Each (stream, critic, method)'s lowest-order lane (:func:`ceb.eval.lanes.base_lanes`).
        n_bins: Equal-width ECE bins.
        n_boot: Bootstrap replicates per metric row.
        seed: Bootstrap seed.
        colors: Figure colour per method.
        settings: The run's recorded ``ceb`` settings (defaults without ``config.json``).
        methods: The run's methods the catalogue knows, resolved over ``settings``.
        rows: The main table's metric rows (filled in by section 1).
        headline: Each (critic, method)'s headline row (filled in by section 1).
        references: The reference rules' lanes, per (stream, critic) (:mod:`ceb.eval.reference_rules`; section 1).
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


SectionFn = Callable[[ReportWriter, ReportContext], None]
"""A section: writes its part of ``report.md`` (and its files) through the writer."""

_YIELDED = frozenset({"rows", "headline", "references", "reference_rows"})
_INPUTS = frozenset(f.name for f in fields(ReportContext)) - _YIELDED


@dataclass(frozen=True, slots=True)
class Section:
    """One section of ``report.md``; its number is its position in :data:`SECTIONS`.

    Attributes:
        title: Heading text after the number.
        needs: :class:`ReportContext` fields the section reads.
        yields: :class:`ReportContext` fields the section fills in for later sections.
        write: The section function.
        number: Its number in the report (1 for the first); set by :func:`registered_sections`, 0 before.
    """

    title: str
    needs: tuple[str, ...]
    yields: tuple[str, ...]
    write: SectionFn
    number: int = 0

    @property
    def heading(self) -> str:
        """The Markdown heading text, e.g. ``"5. Selective execution (section 4.5)"``."""
        return f"{self.number}. {self.title}"

    def __call__(self, rep: ReportWriter, ctx: ReportContext) -> None:
        """Write the section (the decorated function keeps working as a function)."""
        self.write(rep, ctx)


SECTIONS: Registry[Section] = Registry("report section")
"""The report's sections in report order: the order of registration (:mod:`ceb.eval.sections` declares the
built-in ones in one list), so a new section takes its place without renumbering anything by hand."""


def section(title: str, *, needs: Sequence[str] = (), yields: Sequence[str] = ()) -> Callable[[SectionFn], Section]:
    """Make the decorated function a report section; register it in :data:`SECTIONS` to place it.

    Args:
        title: Heading text after the number.
        needs: :class:`ReportContext` fields the section reads.
        yields: :class:`ReportContext` fields the section fills in.

    Returns:
        A decorator that turns the function into a (callable) :class:`Section`.

    Raises:
        ConfigError: A name in ``needs`` / ``yields`` is not a context field.
    """
    unknown = (set(needs) | set(yields)) - _INPUTS - _YIELDED
    if unknown:
        raise ConfigError(f"section {title!r}: {sorted(unknown)} are not ReportContext fields")

    def make(fn: SectionFn) -> Section:
        return Section(title, tuple(needs), tuple(yields), fn)

    return make


def registered_sections() -> list[Section]:
    """The sections of :data:`SECTIONS` in order, numbered from 1, their wiring checked.

    Raises:
        ConfigError: A section needs a field that no earlier section yields.
    """
    ordered = [replace(s, number=i) for i, (_, s) in enumerate(SECTIONS.items(), start=1)]
    available = set(_INPUTS)
    for s in ordered:
        missing = set(s.needs) - available
        if missing:
            raise ConfigError(f"section {s.heading!r} needs {sorted(missing)}, which no earlier section yields")
        available |= set(s.yields)
    return ordered


def na_notes(rows: Sequence[MetricRow]) -> list[str]:
    """One note per metric row without numbers, saying where and why it prints n/a."""
    return [
        f"{method_label(r.method)} on {where(r.stream, r.critic)}: n/a ({r.note})" for r in rows if r.summary is None
    ]


def where(stream: str, critic: str) -> str:
    """How the report names a (stream, critic): ``"web / gpt"``, or ``"all streams (pooled)"``."""
    name = "all streams (pooled)" if stream == POOLED else stream
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
    """The methods figures draw: all but the V / k sweep cells, which have their own tables (the sweep sections).

    A figure of 30 curves reads as none; when only sweep cells ran, they are drawn.
    """
    names = set(methods)
    sweep = {m for m in names if is_sweep_cell(m)}
    return names if sweep == names else names - sweep


def is_sweep_cell(method: str) -> bool:
    try:
        return resolve_method(method).group == "sweep"
    except ConfigError:
        return False


def figure_methods(methods: Sequence[str], rep: ReportWriter) -> set[str]:
    """:func:`drawn`, with a note in the report naming how many sweep cells were left out."""
    shown = drawn(methods)
    if len(shown) < len(set(methods)):
        left = len(set(methods)) - len(shown)
        rep.note(f"Figures leave out the {left} V / k sweep cells (see the sweep tables); the table above has them.")
    return shown


def lane_orders(lanes: Iterable[ScoredLane]) -> dict[tuple[str, str, str], int]:
    """The stream order of each ``(stream, critic, method)`` lane, so report.json rows carry it as a field."""
    return {(lane.stream, lane.critic, lane.method): lane.order for lane in lanes}


def by_stream(items: Mapping[tuple[str, str, str], Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Regroup ``(stream, critic, method)`` keys as ``(stream, critic) -> method -> value``."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for (stream, critic, method), value in items.items():
        out.setdefault((stream, critic), {})[method] = value
    return out
