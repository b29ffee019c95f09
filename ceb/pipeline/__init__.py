"""The streaming scheduler and the live gate.

Lanes (stream x order x method x critic) run in strict stream order, many at once (a method without a bank has
one lane for all orders of a stream, :mod:`ceb.pipeline.reuse`); the gate
(:mod:`ceb.pipeline.gate`) scores one step before it runs and banks one trajectory after it ends.
"""

from ceb.pipeline.gate import Banked, Confidence, Gate, Receipt, StepContext, SyncGate
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
    "Banked",
    "Confidence",
    "Gate",
    "Receipt",
    "StepContext",
    "SyncGate",
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
