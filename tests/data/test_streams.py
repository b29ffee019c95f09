"""Issue 24 item 7: stream names from files, ``NAME=path``, ``+`` joins only of existing parts, collisions named."""

from __future__ import annotations

from pathlib import Path

import pytest

from ceb.data.streams import parse_stream_specs
from ceb.errors import ConfigError


@pytest.fixture
def files(tmp_path: Path) -> Path:
    for name in ["a/x.jsonl", "b/x.jsonl", "p+q.jsonl", "p.jsonl", "q.jsonl", "n=1.jsonl"]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    return tmp_path


def test_a_stream_is_named_by_its_file_stem(files: Path) -> None:
    assert parse_stream_specs(["a/x.jsonl"], base=files) == {"x": [files / "a/x.jsonl"]}


def test_two_files_with_one_stem_are_refused_naming_both_and_suggesting_name(files: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_stream_specs(["a/x.jsonl", "b/x.jsonl"], base=files)
    message = str(caught.value)
    assert str(files / "a/x.jsonl") in message and str(files / "b/x.jsonl") in message and "NAME=" in message


def test_name_equals_path_tells_them_apart(files: Path) -> None:
    got = parse_stream_specs(["ax=a/x.jsonl", "bx=b/x.jsonl"], base=files)
    assert got == {"ax": [files / "a/x.jsonl"], "bx": [files / "b/x.jsonl"]}


def test_a_file_whose_name_holds_plus_or_equals_is_one_stream(files: Path) -> None:
    assert parse_stream_specs(["p+q.jsonl"], base=files) == {"p+q": [files / "p+q.jsonl"]}
    assert parse_stream_specs(["n=1.jsonl"], base=files) == {"n=1": [files / "n=1.jsonl"]}


def test_plus_joins_files_when_no_file_has_the_whole_name(files: Path) -> None:
    assert parse_stream_specs(["q.jsonl+p.jsonl"], base=files) == {"q+p": [files / "q.jsonl", files / "p.jsonl"]}
    assert parse_stream_specs(["both=q.jsonl+p.jsonl"], base=files) == {"both": [files / "q.jsonl", files / "p.jsonl"]}


def test_a_plus_join_with_a_missing_part_names_it(files: Path) -> None:
    with pytest.raises(ConfigError, match="'nope.jsonl'"):
        parse_stream_specs(["p.jsonl+nope.jsonl"], base=files)


@pytest.mark.parametrize("spec", [1, None, "", "bad name=p.jsonl"])
def test_specs_that_are_not_file_names_are_refused(files: Path, spec: object) -> None:
    with pytest.raises(ConfigError):
        parse_stream_specs([spec], base=files)


def test_grid_globs_expand_one_stream_per_file(files: Path) -> None:
    assert list(parse_stream_specs(["*.jsonl"], base=files, globs=True)) == ["n=1", "p+q", "p", "q"]  # in path order
    with pytest.raises(ConfigError, match="matches no file"):
        parse_stream_specs(["zz*.jsonl"], base=files, globs=True)


@pytest.mark.parametrize("name", ["x\n", "../v", "a\\b", "..", "", "x" * 129])
def test_a_name_that_cannot_name_a_file_is_refused(files: Path, name: str) -> None:
    with pytest.raises(ConfigError, match="cannot name a stream: a stream name is 1 to 128 letters, digits"):
        parse_stream_specs([f"{name}=a/x.jsonl"])


def test_a_stem_that_cannot_name_a_stream_asks_for_name_equals(tmp_path: Path) -> None:
    odd = tmp_path / "x\n.jsonl"
    odd.write_text("{}\n")
    with pytest.raises(ConfigError, match=r"its files name it 'x\\n', but a stream name .* name it with NAME=path"):
        parse_stream_specs([str(odd)])
    assert list(parse_stream_specs([f"x={odd}"])) == ["x"]
