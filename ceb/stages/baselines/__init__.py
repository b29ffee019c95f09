"""The training-free baselines of paper section 4.1: each a formula over the statistics of :mod:`ceb.stages.statistics`.

=============  ================================  =========  ==========================================================
name           class                             endpoint   what the endpoint must support
=============  ================================  =========  ==========================================================
``ppl``        :class:`PerplexityCritic`         actor      none with ``actor_logprobs``; else ``prompt_logprobs``,
                                                            ``continue_final_message``, ``add_generation_prompt``
``me``         :class:`MeanEntropyCritic`        actor      ``prompt_logprobs`` (top K), ``continue_final_message``,
                                                            ``add_generation_prompt``
``ptrue``      :class:`PTrueCritic`              critic     ``prompt_logprobs``, ``continue_final_message``,
                                                            ``add_generation_prompt`` (teacher-forced, the default);
                                                            else (``ptrue_forced = false``) ``top_logprobs``
``cot``        :class:`CoTCritic`                critic     plain chat; a JSON schema where the server enforces one
``verbalized`` :class:`VerbalizedCritic`         actor      ``continue_final_message``, ``add_generation_prompt``;
                                                            an integer schema where the server enforces one
``pro``        :class:`PROCritic`                actor      ``n``, ``logprobs``, ``prompt_logprobs``,
                                                            ``continue_final_message``, ``add_generation_prompt``
=============  ================================  =========  ==========================================================

A step a method cannot score (no log-probs, no endpoint, no True/False token) gets ``score=None`` and the status
``not_available``; no number is made up. A baseline is one module: a :class:`~ceb.stages.baselines._common.Baseline`
subclass whose ``score`` reads statistics and applies its formula, and a
:func:`~ceb.stages.baselines._common.register_baseline` call; every module here is imported on the catalogue's
first look-up (:mod:`ceb.stages.methods`).
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
