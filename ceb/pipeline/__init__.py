"""The batch pipeline: score frozen streams into a run directory.

Bank lanes run in strict stream order (:mod:`~ceb.pipeline.lane`), bank-free methods in step pools
(:mod:`ceb.pipeline.pool`); :mod:`~ceb.pipeline.planning` plans, :mod:`~ceb.pipeline.runner` executes,
:class:`~ceb.pipeline.rundir.RunDir` owns the directory. :mod:`~ceb.pipeline.shard`, :mod:`~ceb.pipeline.merge` and
:mod:`~ceb.pipeline.ray_launch` split, join and distribute a run. The live gate is :mod:`ceb.gate`.
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
