import math

import pytest

from ceb.stages import parse_labels, parse_score


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"score": 0.8, "reason": "ok"}', 0.8),
        ('```json\n{"score": 0.25, "reason": "x"}\n```', 0.25),
        ('Sure! Here is my answer:\n{"score": 0.6, "reason": "y"}\nHope that helps {"score": 0.1}', 0.6),
        ('{"score": "0.7", "reason": "z"}', 0.7),
        ('{"score": " 1 "}', 1.0),
        ('{"score": 0}', 0.0),
        ('{"reason": "a {nested} brace", "score": 0.4}', 0.4),
        ('prefix {"other": 1} then {"score": 0.9}', 0.9),
        ('{"score": 85}', 85.0),  # raw r_t; Eq. 6 clips it later, the parser never rescales 0-100
        ('{"score": -0.2}', -0.2),
    ],
)
def test_parse_score_reads_r_t(text, expected):
    assert parse_score(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("I think it is fine.", "no JSON object"),
        ('{"confidence": 0.8}', "no JSON object"),
        ('{"score": "high"}', "not a number"),
        ('{"score": true}', "boolean"),
        ('{"score": NaN}', "not a finite number"),
        ('{"score": null}', "NoneType"),
        ('{"score": [0.5]}', "list"),
        ('{"score": 0.8', "no JSON object"),
        ("", "no JSON object"),
    ],
)
def test_parse_score_refuses_unreadable_replies(text, why):
    with pytest.raises(ValueError, match=why):
        parse_score(text)


def test_parse_score_never_returns_a_non_finite_number():
    with pytest.raises(ValueError):
        parse_score('{"score": "inf"}')
    assert math.isfinite(parse_score('{"score": "1e-3"}'))


@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [
        ('{"labels": [1, 0, 1]}', 3, (1, 0, 1)),
        ('```\n{"labels": ["1", "0"]}\n```', 2, (1, 0)),
        ('{"labels": [1.0, 0.0]} trailing words', 2, (1, 0)),
    ],
)
def test_parse_labels(text, n, expected):
    assert parse_labels(text, n) == expected


@pytest.mark.parametrize(
    ("text", "n", "why"),
    [
        ('{"labels": [1, 0]}', 3, "expected 3 labels, got 2"),
        ('{"labels": [1, 0, 1, 1]}', 3, "expected 3 labels, got 4"),
        ('{"labels": [1, 2]}', 2, r"labels\[1\] = 2 is not 0 or 1"),
        ('{"labels": [true, false]}', 2, "boolean"),
        ('{"labels": "1,0"}', 2, "not a list"),
        ('{"label": [1, 0]}', 2, "no JSON object"),
    ],
)
def test_parse_labels_refuses_wrong_shapes(text, n, why):
    with pytest.raises(ValueError, match=why):
        parse_labels(text, n)
