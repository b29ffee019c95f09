"""The report's section registry: numbering by declared position, wiring checks and registration errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ceb.errors import ConfigError
from ceb.eval.sections import SECTIONS, ReportContext, ReportWriter, registered_sections, section


def test_sections_are_numbered_one_to_fourteen_in_order() -> None:
    sections = registered_sections()
    assert [s.number for s in sections] == list(range(1, 15))
    assert sections[0].heading == "1. Main results (Table 1, section 4.2)"
    assert sections[1].heading == "2. Paired differences against Static and the references (beyond the paper)"
    assert sections[-1].heading == '14. Retrieval mechanism (table "retrieval")'


def test_every_section_that_reads_the_main_rows_comes_after_the_section_that_yields_them() -> None:
    sections = registered_sections()
    first = next(s.number for s in sections if "rows" in s.yields)
    assert all(s.number > first for s in sections if "rows" in s.needs or "headline" in s.needs)


@section("Toy", needs=("rows",))
def toy(rep: ReportWriter, ctx: ReportContext) -> None:
    rep.intro(f"{len(ctx.rows)} rows")


@pytest.fixture
def toy_registered() -> Iterator[None]:
    SECTIONS.register("toy", toy)
    yield
    SECTIONS.unregister("toy")


def test_a_new_section_is_one_registration_and_takes_the_next_number(toy_registered: None) -> None:
    sections = registered_sections()
    assert sections[-1].heading == "15. Toy" and sections[-1].write is toy.write
    assert [s.number for s in sections[:-1]] == list(range(1, 15))  # nothing renumbered


def test_a_section_placed_before_what_it_needs_is_refused() -> None:
    SECTIONS.register("toy", toy, before="main-results")
    try:
        with pytest.raises(ConfigError, match=r"section '1. Toy' needs \['rows'\], which no earlier section yields"):
            registered_sections()
    finally:
        SECTIONS.unregister("toy")


def test_an_unknown_context_field_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"\['colours'\] are not ReportContext fields"):
        section("Typo", needs=("colours",))
