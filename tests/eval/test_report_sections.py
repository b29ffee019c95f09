"""The report's section registry: numbering, wiring checks and registration errors."""

from __future__ import annotations

import pytest

from ceb.eval.sections import ReportContext, ReportWriter, registered_sections, section


def test_sections_are_numbered_one_to_thirteen_in_order() -> None:
    sections = registered_sections()
    assert [s.number for s in sections] == list(range(1, 14))
    assert sections[0].heading == "1. Main results (Table 1, section 4.2)"
    assert sections[-1].heading == '13. Retrieval mechanism (table "retrieval")'


def test_every_section_that_reads_the_main_rows_comes_after_the_section_that_yields_them() -> None:
    sections = registered_sections()
    first = next(s.number for s in sections if "rows" in s.yields)
    assert all(s.number > first for s in sections if "rows" in s.needs or "headline" in s.needs)


def _noop(rep: ReportWriter, ctx: ReportContext) -> None:
    del rep, ctx


def test_a_taken_number_is_refused() -> None:
    with pytest.raises(ValueError, match="section 1 is already registered"):
        section(1, "Again")(_noop)


def test_an_unknown_context_field_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\['colours'\] are not ReportContext fields"):
        section(99, "Typo", needs=("colours",))
    assert all(s.number != 99 for s in registered_sections())
