"""The live gate: score a proposed action before it runs, and grow its stream's bank after the trajectory ends.

:mod:`~ceb.gate.api` (:class:`Gate`, :class:`SyncGate`), :mod:`~ceb.gate.types` (:class:`StepContext`,
:class:`Confidence`, :class:`Banked`, :class:`Receipt`), :mod:`~ceb.gate.stream` (a stream's bank and worker),
:mod:`~ceb.gate.state` and :mod:`~ceb.gate.inbox` (on disk), :mod:`~ceb.gate.health` (:class:`CriticHealth`).
"""

from typing import TYPE_CHECKING

from ceb.registry import lazy_exports

if TYPE_CHECKING:
    from ceb.gate.api import Gate, SyncGate
    from ceb.gate.health import CriticHealth
    from ceb.gate.types import Banked, Confidence, Decision, Receipt, StepContext, check_stream_name

__all__ = [
    "Banked",
    "Confidence",
    "CriticHealth",
    "Decision",
    "Gate",
    "Receipt",
    "StepContext",
    "SyncGate",
    "check_stream_name",
]

# Loaded on first use (PEP 562): importing one gate module need not load the gate's API and all it runs on.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(("Gate", "SyncGate"), "ceb.gate.api"),
        "CriticHealth": "ceb.gate.health",
        **dict.fromkeys(
            ("Banked", "Confidence", "Decision", "Receipt", "StepContext", "check_stream_name"), "ceb.gate.types"
        ),
    },
    __all__,
)
