"""The streaming scheduler: lanes (stream x order x method x critic) in strict stream order, many at once."""

from ceb.pipeline.lane import Lane
from ceb.pipeline.results import (
    HindsightRow,
    ResultWriter,
    StepRow,
    read_hindsight_rows,
    read_rows,
    read_step_rows,
)
from ceb.pipeline.runner import RunSummary, check_prompts, run_scoring

__all__ = [
    "HindsightRow",
    "Lane",
    "ResultWriter",
    "RunSummary",
    "StepRow",
    "check_prompts",
    "read_hindsight_rows",
    "read_rows",
    "read_step_rows",
    "run_scoring",
]
