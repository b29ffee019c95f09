"""The two CEB stages: the pre-execution critic (Eq. 2, 6) and the hindsight labeler (Eq. 3)."""

from ceb.stages.base import (
    CallStats,
    Critic,
    CriticInput,
    CriticResult,
    Hindsight,
    HindsightResult,
    HistoryItem,
)
from ceb.stages.critic import CRITIC_SCHEMA, CriticSettings, LLMCritic, critic_context, repetition_flag
from ceb.stages.hindsight import (
    HindsightSettings,
    LLMHindsight,
    hindsight_context,
    labels_schema,
    majority_vote,
)
from ceb.stages.parsing import find_json_object, parse_labels, parse_score
from ceb.stages.templates import PROMPT_KINDS, PromptLimits, PromptSet, clip

__all__ = [
    "CRITIC_SCHEMA",
    "PROMPT_KINDS",
    "CallStats",
    "Critic",
    "CriticInput",
    "CriticResult",
    "CriticSettings",
    "Hindsight",
    "HindsightResult",
    "HindsightSettings",
    "HistoryItem",
    "LLMCritic",
    "LLMHindsight",
    "PromptLimits",
    "PromptSet",
    "clip",
    "critic_context",
    "find_json_object",
    "hindsight_context",
    "labels_schema",
    "majority_vote",
    "parse_labels",
    "parse_score",
    "repetition_flag",
]
