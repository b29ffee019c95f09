"""The batch pipeline: score frozen streams into a run directory.

Lanes (stream x order x method x critic) of the methods with a bank run in strict stream order, many at once; the
methods without one are scored in a step pool per stream, their trajectories concurrently and each once for all
orders (:mod:`ceb.pipeline.pool`). :mod:`~ceb.pipeline.planning` decides the lanes and pools,
:mod:`~ceb.pipeline.runner` executes them, and :class:`~ceb.pipeline.rundir.RunDir` owns the run
directory they write. :mod:`~ceb.pipeline.shard` splits a run N ways, :mod:`~ceb.pipeline.merge` joins the parts,
and :mod:`~ceb.pipeline.ray_launch` runs the parts as Ray tasks. :mod:`~ceb.pipeline.relabel` is ``ceb relabel``'s
batch (an LLM judge's labels into a new stream). The live gate is :mod:`ceb.gate`.
"""

from typing import TYPE_CHECKING

from ceb.registry import lazy_exports

if TYPE_CHECKING:
    from ceb.pipeline.lane import Lane
    from ceb.pipeline.results import (
        HindsightRow,
        ResultWriter,
        StepRow,
        read_hindsight_rows,
        read_rows,
        read_step_rows,
    )
    from ceb.pipeline.rundir import RunDir
    from ceb.pipeline.runner import check_prompts, run_scoring
    from ceb.pipeline.summary import RunSummary

__all__ = [
    "HindsightRow",
    "Lane",
    "ResultWriter",
    "RunDir",
    "RunSummary",
    "StepRow",
    "check_prompts",
    "read_hindsight_rows",
    "read_rows",
    "read_step_rows",
    "run_scoring",
]

# Loaded on first use (PEP 562): a submodule such as ceb.pipeline.rundir must not pay for the lanes, the bank and
# scikit-learn (``ceb score`` on a missing file, ``ceb report``).
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Lane": "ceb.pipeline.lane",
        **dict.fromkeys(
            ("HindsightRow", "ResultWriter", "StepRow", "read_hindsight_rows", "read_rows", "read_step_rows"),
            "ceb.pipeline.results",
        ),
        "RunDir": "ceb.pipeline.rundir",
        **dict.fromkeys(("check_prompts", "run_scoring"), "ceb.pipeline.runner"),
        "RunSummary": "ceb.pipeline.summary",
    },
    __all__,
)
