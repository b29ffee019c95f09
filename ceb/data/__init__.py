"""Trajectory streams: the in-memory form, the strict JSONL reader and writer, and the source converters.

Every converter (listed in :data:`CONVERTERS`) writes the stream contract of ``docs/stream-format.md``
(version 1), the only form a stage reads. Shared parts: :mod:`~ceb.data.sources` (checked fields),
:mod:`~ceb.data.predictions` (predictions files), :mod:`~ceb.data.writer` (output), :mod:`~ceb.data.chat`
(chat messages as steps, also ``ceb serve``'s).
"""

from typing import TYPE_CHECKING

from ceb.data.converters import CONVERTERS, Converter, ConverterOption
from ceb.registry import lazy_exports

if TYPE_CHECKING:
    from ceb.data.amex import convert_amex
    from ceb.data.intercode import INTERCODE_ROOT_ENV, convert_intercode, step_labels
    from ceb.data.mind2web import convert_mind2web
    from ceb.data.reader import read_stream, write_stream
    from ceb.data.trajectory import Step, Trajectory
    from ceb.data.writer import ConvertedStream, SkippedTrajectory

__all__ = [
    "CONVERTERS",
    "Converter",
    "ConverterOption",
    "ConvertedStream",
    "INTERCODE_ROOT_ENV",
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

CONVERTERS.register("intercode", "ceb.data.intercode:CONVERTER")
CONVERTERS.register("mind2web", "ceb.data.mind2web:CONVERTER")
CONVERTERS.register("amex", "ceb.data.amex:CONVERTER")
CONVERTERS.register("chat", "ceb.data.chat_transcripts:CONVERTER")
CONVERTERS.register("inspect", "ceb.data.inspect_logs:CONVERTER")  # imports inspect_ai only when it converts


# The converters and readers load on first use (PEP 562): reading a stream need not import every converter.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "convert_amex": "ceb.data.amex",
        **dict.fromkeys(("INTERCODE_ROOT_ENV", "convert_intercode", "step_labels"), "ceb.data.intercode"),
        "convert_mind2web": "ceb.data.mind2web",
        **dict.fromkeys(("read_stream", "write_stream"), "ceb.data.reader"),
        **dict.fromkeys(("Step", "Trajectory"), "ceb.data.trajectory"),
        **dict.fromkeys(("ConvertedStream", "SkippedTrajectory"), "ceb.data.writer"),
    },
    __all__,
)
