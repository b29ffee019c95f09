"""Critic Experience Bank: calibrated step-level confidence for LLM agents (Zeng et al., ICLR 2026).

For a live agent (:mod:`ceb.gate`)::

    from ceb import Gate, StepContext, Step

    async with Gate() as gate:
        confidence = await gate.score("my-agent", StepContext("run-1", "list the files", "shell", Step("", "ls", "")))

From a notebook (:mod:`ceb.notebook`, the ``notebook`` extra)::

    import ceb

    scores = ceb.score("streams/intercode-bash-gpt-4.jsonl", methods=["ceb", "static"])  # a DataFrame
    rows = ceb.read_run("runs/intercode-bash")

The names below load on first use (PEP 562), so ``import ceb`` and ``ceb --help`` stay light.
"""

from typing import TYPE_CHECKING

from ceb.registry import lazy_exports
from ceb.version import __version__

if TYPE_CHECKING:
    from ceb.config import GateConfig, RunConfig, load_config
    from ceb.data.trajectory import Step, Trajectory
    from ceb.gate import Banked, Confidence, Gate, Receipt, StepContext, SyncGate
    from ceb.notebook import ascore, read_run, score

__all__ = [
    "Banked",
    "Confidence",
    "Gate",
    "GateConfig",
    "Receipt",
    "RunConfig",
    "Step",
    "StepContext",
    "SyncGate",
    "Trajectory",
    "__version__",
    "ascore",
    "load_config",
    "read_run",
    "score",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(("Banked", "Confidence", "Gate", "Receipt", "StepContext", "SyncGate"), "ceb.gate"),
        **dict.fromkeys(("GateConfig", "RunConfig", "load_config"), "ceb.config"),
        **dict.fromkeys(("Step", "Trajectory"), "ceb.data.trajectory"),
        **dict.fromkeys(("ascore", "read_run", "score"), "ceb.notebook"),
    },
    __all__,
)
