"""The CEB stages: critic (Eq. 2, 6), hindsight labeler (Eq. 3), baselines, offline stand-ins, methods.

The method catalogue (:mod:`ceb.stages.methods`) names every method; :mod:`ceb.stages.assembly` builds the
stages of a run configuration. :mod:`ceb.stages.judge` is the LLM-as-judge relabeller of ``ceb relabel``
(evaluation only: its labels never reach a scoring stage).
"""

from ceb.stages.assembly import BACKENDS, Stages, build_critic, build_stages
from ceb.stages.base import (
    NOT_AVAILABLE,
    Abstention,
    CallStats,
    Critic,
    CriticInput,
    CriticResult,
    Hindsight,
    HindsightResult,
    HistoryItem,
    StepStatus,
)
from ceb.stages.critic import (
    CRITIC_SCHEMA,
    LLMCritic,
    actions_match,
    config_repetition_flag,
    critic_context,
    repetition_flag,
)
from ceb.stages.hindsight import LLMHindsight, hindsight_context, labels_schema, majority_vote
from ceb.stages.judge import LLMJudge, judge_context
from ceb.stages.methods import LLM_CRITIC, MethodSpec, all_methods, method_names, register_method, resolve_method
from ceb.stages.parsing import find_json_object, parse_labels, parse_score
from ceb.stages.templates import PROMPT_KINDS, PromptSet, clip

__all__ = [
    "BACKENDS",
    "CRITIC_SCHEMA",
    "LLM_CRITIC",
    "NOT_AVAILABLE",
    "PROMPT_KINDS",
    "Abstention",
    "CallStats",
    "Critic",
    "CriticInput",
    "CriticResult",
    "Hindsight",
    "HindsightResult",
    "HistoryItem",
    "LLMCritic",
    "LLMHindsight",
    "LLMJudge",
    "MethodSpec",
    "PromptSet",
    "Stages",
    "StepStatus",
    "build_critic",
    "build_stages",
    "clip",
    "critic_context",
    "find_json_object",
    "hindsight_context",
    "judge_context",
    "labels_schema",
    "actions_match",
    "all_methods",
    "config_repetition_flag",
    "majority_vote",
    "method_names",
    "parse_labels",
    "parse_score",
    "register_method",
    "repetition_flag",
    "resolve_method",
]
