"""The training-free baselines of paper section 4.1, each a :class:`~ceb.stages.base.Critic`.

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

``prompt_logprobs``, ``continue_final_message`` and ``add_generation_prompt`` are vLLM extensions of the chat
API. A step a method cannot score (no log-probs, no endpoint, no True/False token) gets ``score=None`` and the
status ``not_available`` (:meth:`~ceb.stages.base.CriticResult.not_available`); no number is made up.

Each module registers its method in the catalogue (:mod:`ceb.stages.methods`) with a ``build(config, stages)``
factory: ``ptrue`` and ``cot`` ask the critic's endpoint, the others the actor's
(:func:`ceb.stages.assembly.actor_chat`; the paper uses one backbone for both). Every module of this package is
imported on the catalogue's first look-up, so a new baseline is one new file here.
"""

from __future__ import annotations

from ceb.stages.baselines.cot import CoTCritic, parse_confidence_line
from ceb.stages.baselines.mean_entropy import MeanEntropyCritic, top_k_entropy
from ceb.stages.baselines.perplexity import PerplexityCritic, inverse_perplexity
from ceb.stages.baselines.pro import PROCritic, action_key, softmax_weight
from ceb.stages.baselines.ptrue import PTrueCritic, answer_class, p_true
from ceb.stages.baselines.teacher_forcing import ForcedAction, action_span, teacher_force, teacher_forcing_request
from ceb.stages.baselines.verbalized import VerbalizedCritic, parse_stated_confidence

__all__ = [
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
    "softmax_weight",
    "teacher_force",
    "teacher_forcing_request",
    "top_k_entropy",
]
