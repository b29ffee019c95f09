"""Trajectory streams: the in-memory form, the strict JSONL reader and writer, and source converters.

Converters (``ceb convert``) are listed in :data:`CONVERTERS` (:mod:`ceb.data.converters`): InterCode
(:mod:`~ceb.data.intercode`), Mind2Web (:mod:`~ceb.data.mind2web`, its pages in
:mod:`~ceb.data.mind2web_dom`, its task files in :mod:`~ceb.data.mind2web_tasks`), AMEX
(:mod:`~ceb.data.amex`, its screens in :mod:`~ceb.data.amex_screen`, its episode files in
:mod:`~ceb.data.amex_episodes`), OpenAI chat transcripts (:mod:`~ceb.data.chat_transcripts`) and inspect_ai eval
logs (:mod:`~ceb.data.inspect_logs`), both through the chat-messages-to-steps mapping of :mod:`~ceb.data.chat`,
which ``ceb serve`` uses too. What they share: :mod:`~ceb.data.sources` (checked input fields),
:mod:`~ceb.data.predictions` (an agent's predictions file) and :mod:`~ceb.data.writer` (written streams).

Every loader turns its source into the stream contract of ``docs/stream-format.md`` (version 1); every stage
reads only that form.
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
