"""The CEB stages: critic (Eq. 2, 6), hindsight labeler (Eq. 3), baselines, offline stand-ins, methods.

The method catalogue (:mod:`ceb.stages.methods`) names every method; :mod:`ceb.stages.assembly` builds the
stages of a run configuration. :mod:`ceb.stages.judge` is the LLM-as-judge relabeller of ``ceb relabel``
(evaluation only: its labels never reach a scoring stage).
"""

from typing import TYPE_CHECKING

from ceb.registry import lazy_exports

if TYPE_CHECKING:
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

# Loaded on first use (PEP 562): importing one stage module need not load the assembly, the backends and the bank.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(("BACKENDS", "Stages", "build_critic", "build_stages"), "ceb.stages.assembly"),
        **dict.fromkeys(
            (
                "NOT_AVAILABLE",
                "Abstention",
                "CallStats",
                "Critic",
                "CriticInput",
                "CriticResult",
                "Hindsight",
                "HindsightResult",
                "HistoryItem",
                "StepStatus",
            ),
            "ceb.stages.base",
        ),
        **dict.fromkeys(
            (
                "CRITIC_SCHEMA",
                "LLMCritic",
                "actions_match",
                "config_repetition_flag",
                "critic_context",
                "repetition_flag",
            ),
            "ceb.stages.critic",
        ),
        **dict.fromkeys(
            ("LLMHindsight", "hindsight_context", "labels_schema", "majority_vote"), "ceb.stages.hindsight"
        ),
        **dict.fromkeys(("LLMJudge", "judge_context"), "ceb.stages.judge"),
        **dict.fromkeys(
            ("LLM_CRITIC", "MethodSpec", "all_methods", "method_names", "register_method", "resolve_method"),
            "ceb.stages.methods",
        ),
        **dict.fromkeys(("find_json_object", "parse_labels", "parse_score"), "ceb.stages.parsing"),
        **dict.fromkeys(("PROMPT_KINDS", "PromptSet", "clip"), "ceb.stages.templates"),
    },
    __all__,
)
