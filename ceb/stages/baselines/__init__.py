"""The training-free baselines of paper section 4.1: each a formula over the statistics of :mod:`ceb.stages.statistics`.

Each module is a :class:`~ceb.stages.baselines._common.Baseline` subclass whose ``score`` reads statistics and
applies its formula, and one :func:`~ceb.stages.baselines._common.register_baseline` call; every module here is
imported on the catalogue's first look-up. What each needs of its endpoint is in docs/methods.md (and each
method's ``needs``); a step a method cannot score gets ``score=None`` and the status ``not_available``.
"""

from __future__ import annotations

from ceb.stages.baselines._common import Baseline, register_baseline
from ceb.stages.baselines.cot import CoTCritic, parse_confidence_line
from ceb.stages.baselines.mean_entropy import MeanEntropyCritic, top_k_entropy
from ceb.stages.baselines.perplexity import PerplexityCritic, inverse_perplexity
from ceb.stages.baselines.pro import PROCritic, action_key, softmax_weight
from ceb.stages.baselines.ptrue import PTrueCritic, answer_class, p_true
from ceb.stages.baselines.verbalized import VerbalizedCritic, parse_stated_confidence
from ceb.stages.statistics import ForcedAction, action_span, teacher_force, teacher_forcing_request

__all__ = [
    "Baseline",
    "CoTCritic",
    "ForcedAction",
    "MeanEntropyCritic",
    "PROCritic",
    "PTrueCritic",
    "PerplexityCritic",
    "VerbalizedCritic",
    "action_key",
    "action_span",
    "answer_class",
    "inverse_perplexity",
    "p_true",
    "parse_confidence_line",
    "parse_stated_confidence",
    "register_baseline",
    "softmax_weight",
    "teacher_force",
    "teacher_forcing_request",
    "top_k_entropy",
]
