"""Every ceb error pickles as itself: a Ray task's error reaches the driver that way (ceb.pipeline.ray_launch)."""

from __future__ import annotations

import pickle

import pytest

from ceb import errors
from ceb.errors import (
    BackendError,
    BankError,
    CEBError,
    ConfigError,
    ConflictError,
    DataError,
    DuplicateTrajectoryError,
    FatalBackendError,
    OverloadedError,
    Problem,
    RunError,
    StreamLimitError,
    StreamValidationError,
    UnsupportedFeatureError,
)

PROBLEM = Problem("data/beta.jsonl", 151, "<line>", "not valid JSON", trajectory_id="b1", step=2)
SAMPLES: list[CEBError] = [
    ConfigError("grid file g.toml: unknown [grid] keys ['x']"),
    DataError(PROBLEM),
    StreamValidationError([PROBLEM, Problem("data/beta.jsonl", 152, "steps", "empty")]),
    BankError("bank b.json: not ceb-bank/1"),
    BackendError("timed out", backend="openai@http://127.0.0.1:9/v1", stream="s", trajectory_id="t", step=1),
    FatalBackendError("401", backend="openai@x"),
    UnsupportedFeatureError("no logprobs", backend="openai@x"),
    RunError("run stopped"),
    OverloadedError("s", 7),
    ConflictError("no", stream="s", field="id"),
    StreamLimitError("s", 10, 10),
    DuplicateTrajectoryError("s", "t1", 3),
]


def test_every_error_class_has_a_sample() -> None:
    classes = {
        c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, CEBError) and c is not CEBError
    }
    assert classes == {type(e) for e in SAMPLES}


@pytest.mark.parametrize("error", SAMPLES, ids=lambda e: type(e).__name__)
def test_an_error_pickles_as_itself(error: CEBError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error) and back.args == error.args
    assert vars(back) == vars(error)
