"""The report's section registry: numbering by declared position, wiring checks and registration errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ceb.errors import ConfigError
from ceb.eval.render import Result, Text
from ceb.eval.sections import SECTIONS, ReportContext, registered_sections, section


def test_sections_are_numbered_one_to_fifteen_in_order() -> None:
    sections = registered_sections()
    assert [s.number for s in sections] == list(range(1, 16))
    assert sections[0].heading == "1. Main results (Table 1, section 4.2)"
    assert sections[1].heading == "2. Paired differences against Static and the references (beyond the paper)"
    assert sections[-2].heading == '14. Retrieval mechanism (table "retrieval")'
    assert sections[-1].heading.startswith("15. Without labels")


def test_a_run_without_labels_keeps_only_the_label_free_sections_numbered_among_themselves() -> None:
    sections = registered_sections(labelled=False)
    assert [(s.number, s.labelled) for s in sections] == [(1, False)]
    assert sections[0].heading.startswith("1. Without labels")


def test_every_section_that_reads_the_main_rows_comes_after_the_section_that_yields_them() -> None:
    sections = registered_sections()
    first = next(s.number for s in sections if "rows" in s.yields)
    assert all(s.number > first for s in sections if "rows" in s.needs or "headline" in s.needs)


@section("Toy", needs=("rows",))
def toy(ctx: ReportContext) -> Result:
    return Result((Text(f"{len(ctx.rows)} rows"),))


@pytest.fixture
def toy_registered() -> Iterator[None]:
    SECTIONS.register("toy", toy)
    yield
    SECTIONS.unregister("toy")


def test_a_new_section_is_one_registration_and_takes_the_next_number(toy_registered: None) -> None:
    sections = registered_sections()
    assert sections[-1].heading == "16. Toy" and sections[-1].write is toy.write
    assert [s.number for s in sections[:-1]] == list(range(1, 16))  # nothing renumbered


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
