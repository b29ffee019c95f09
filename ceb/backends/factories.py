"""Build the critic and hindsight stages of each registered backend from a :class:`~ceb.config.RunConfig`."""

from __future__ import annotations

from ceb.backends import Stages
from ceb.backends.base import ChatBackend, EndpointLimits, RetryPolicy
from ceb.backends.offline import OfflineCritic, OfflineHindsight
from ceb.config import RunConfig
from ceb.errors import ConfigError
from ceb.stages.base import NOT_AVAILABLE, Critic, CriticInput, CriticResult
from ceb.stages.critic import CriticSettings, LLMCritic
from ceb.stages.hindsight import HindsightSettings, LLMHindsight
from ceb.stages.templates import PromptLimits, PromptSet

__all__ = ["UnavailableCritic", "build_critic", "llm_stages", "offline_stages", "openai_stages", "prompt_set"]


def prompt_set(config: RunConfig) -> PromptSet:
    """The templates and text budgets of ``config.prompts``."""
    p = config.prompts
    return PromptSet(p.prompt_dir, PromptLimits(**p.model_dump(exclude={"prompt_dir"})))


def llm_stages(config: RunConfig, chat: ChatBackend) -> Stages:
    """LLM critic and hindsight over one chat endpoint, with the run's prompts and decoding settings."""
    prompts = prompt_set(config)
    critic = LLMCritic(chat, prompts, CriticSettings(**config.critic.model_dump(exclude={"count_tokens"})))
    hindsight = LLMHindsight(
        chat, prompts, HindsightSettings(temperature=config.ceb.tau, **config.hindsight.model_dump())
    )
    return Stages(critic=critic, hindsight=hindsight, chat=chat)


def offline_stages(config: RunConfig, limits: EndpointLimits) -> Stages:
    """The model-free stand-ins of :mod:`ceb.backends.offline`."""
    return Stages(critic=OfflineCritic(), hindsight=OfflineHindsight())


def openai_stages(config: RunConfig, limits: EndpointLimits) -> Stages:
    """LLM stages over an OpenAI-compatible endpoint.

    Raises:
        ConfigError: ``backend.base_url`` or ``backend.model`` is not set, or the API key is missing.
    """
    from ceb.backends.openai import OpenAIBackend, OpenAISettings

    b = config.backend
    if not b.base_url or not b.model:
        raise ConfigError("the openai backend needs backend.base_url and backend.model (--base-url, --model)")
    urls = tuple(u.strip() for u in b.base_url.split(",") if u.strip()) if isinstance(b.base_url, str) else b.base_url
    chat = OpenAIBackend(
        OpenAISettings(
            base_url=urls,
            model=b.model,
            api_key_env=b.api_key_env,
            timeout_s=b.timeout_s,
            structured_output=b.structured_output,
            max_concurrency=b.max_concurrency,
            token_limit_field=b.token_limit_field,
        ),
        retry=RetryPolicy(max_attempts=b.max_attempts, backoff_s=b.backoff_s, max_backoff_s=b.max_backoff_s),
        limits=limits,
    )
    return llm_stages(config, chat)


class UnavailableCritic:
    """A critic that reports ``not available: <reason>`` for every step and never a number.

    Args:
        reason: Why the method cannot score here (e.g. no LLM endpoint).
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def score(self, inp: CriticInput) -> CriticResult:
        """Return no score, with the reason."""
        return CriticResult(score=None, raw="", error=f"{NOT_AVAILABLE}: {self.reason}")


def build_critic(kind: str, config: RunConfig, stages: Stages) -> Critic:
    """The critic stage of a method: the LLM critic of ``stages``, or a baseline over its endpoint.

    Baselines that need the actor model (``verbalized``, ``pro``, teacher forcing) use
    ``baselines.actor_base_url`` / ``actor_model`` when set, else the critic's endpoint.

    Raises:
        ConfigError: Unknown baseline.
    """
    from ceb.pipeline.methods import LLM_CRITIC

    if kind == LLM_CRITIC:
        return stages.critic
    from ceb.stages.baselines import BASELINES, BaselineSettings

    if kind not in BASELINES:
        raise ConfigError(f"unknown critic {kind!r}; known: {LLM_CRITIC}, {', '.join(sorted(BASELINES))}")
    if stages.chat is None and kind not in ("ppl", "me"):
        # No language model behind this backend: the method has nothing to ask, and says so on every step.
        return UnavailableCritic(f"{kind} needs an LLM endpoint; backend {config.backend.name!r} has none")
    b = config.baselines
    actor = stages.chat
    if stages.chat is not None and (b.actor_base_url or b.actor_model):
        actor_cfg = config.model_copy(
            update={
                "backend": config.backend.model_copy(
                    update={
                        "base_url": b.actor_base_url or config.backend.base_url,
                        "model": b.actor_model or config.backend.model,
                    }
                )
            }
        )
        actor = openai_stages(actor_cfg, EndpointLimits()).chat
    settings = BaselineSettings(
        prompt_logprobs=b.prompt_logprobs,
        me_surprisal=b.me_surprisal,
        ptrue_top_logprobs=b.ptrue_top_logprobs,
        cot_max_tokens=b.cot_max_tokens,
        pro_samples=b.pro_samples,
    )
    return BASELINES[kind](stages.chat, actor, prompt_set(config), settings)
