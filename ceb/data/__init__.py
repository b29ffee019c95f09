"""Trajectory streams: the in-memory form, the strict JSONL reader and writer, and source converters.

Every loader turns its source into the stream contract of ``../shared/SCHEMA.md`` (version 1); every stage
reads only that form.
"""

from ceb.data.amex import convert_amex
from ceb.data.intercode import DEFAULT_INTERCODE_ROOT, convert_intercode, step_labels
from ceb.data.mind2web import convert_mind2web
from ceb.data.reader import read_stream, write_stream
from ceb.data.trajectory import Step, Trajectory
from ceb.data.writer import ConvertedStream, SkippedTrajectory

__all__ = [
    "DEFAULT_INTERCODE_ROOT",
    "ConvertedStream",
    "SkippedTrajectory",
    "Step",
    "Trajectory",
    "convert_amex",
    "convert_intercode",
    "convert_mind2web",
    "read_stream",
    "step_labels",
    "write_stream",
]
