"""The critic and hindsight stages of a run, built from its :class:`~ceb.config.RunConfig`.

Over a language model the stages are the LLM critic and labeler, over ``offline`` the stand-ins of
:mod:`ceb.stages.offline`. This module is the only place that joins transports (:mod:`ceb.backends`) and stages.
"""

from __future__ import annotations

from ceb.backends.base import BACKENDS, ChatBackend, open_backend
from ceb.backends.cache import ReplyCache
from ceb.backends.scheduling import EndpointLimits
from ceb.config import RunConfig
from ceb.errors import ConfigError
from ceb.stages.base import Critic, CriticInput, CriticResult, Stages
from ceb.stages.critic import LLMCritic
from ceb.stages.hindsight import LLMHindsight
from ceb.stages.methods import MethodSpec
from ceb.stages.offline import OfflineCritic, OfflineHindsight
from ceb.stages.templates import PromptSet

__all__ = [
    "BACKENDS",
    "Stages",
    "UnavailableCritic",
    "actor_chat",
    "build_critic",
    "build_stages",
    "lacks_endpoint",
    "llm_stages",
    "offline_stages",
    "prompt_set",
]


def build_stages(config: RunConfig, limits: EndpointLimits | None = None) -> Stages:
    """Build the stages of ``config.backend.name`` over the backend it opens.

    The labeller asks its own endpoint when ``hindsight`` names one, else the critic's (as in the paper). The
    stages own the reply cache, if any; ``limits`` (private when ``None``) are shared by every backend opened.

    Raises:
        ConfigError: Unknown backend, or a setting it needs is missing.
    """
    limits = limits or EndpointLimits()
    cache = ReplyCache.open(config.cache)
    try:
        chat = open_backend(config.backend, limits, cache)
        stages = offline_stages(config, limits) if chat is None else llm_stages(config, chat, limits)
        stages.cache = cache
        labeller = config.hindsight_backend()
        if labeller is not None:
            own = stages.open_chat(labeller)
            if own is None:
                raise ConfigError(f"hindsight: backend {labeller.name!r} has no language model to label with")
            stages.hindsight = LLMHindsight(own, prompt_set(config), config.hindsight)
            stages.hindsight_chat = own
    except BaseException:
        if cache is not None:
            cache.close()
        raise
    return stages


def prompt_set(config: RunConfig) -> PromptSet:
    """The templates and text budgets of ``config.prompts``."""
    return PromptSet(config.prompts.prompt_dir, config.prompts)


def llm_stages(config: RunConfig, chat: ChatBackend, limits: EndpointLimits | None = None) -> Stages:
    """LLM critic and hindsight over one chat endpoint (``limits``: ``chat``'s own slots by default)."""
    prompts = prompt_set(config)
    critic = LLMCritic(chat, prompts, config.critic)
    hindsight = LLMHindsight(chat, prompts, config.hindsight)
    return Stages(critic=critic, hindsight=hindsight, chat=chat, limits=limits or chat.limits)


def offline_stages(config: RunConfig, limits: EndpointLimits | None = None) -> Stages:
    """The model-free stand-ins of :mod:`ceb.stages.offline`."""
    return Stages(critic=OfflineCritic(), hindsight=OfflineHindsight(config.hindsight), limits=limits)


def actor_chat(config: RunConfig, stages: Stages) -> ChatBackend | None:
    """The ACTOR model's endpoint for the baselines that ask the actor (``verbalized``, ``pro``, teacher forcing).

    With ``baselines.actor_base_url`` / ``actor_model``, an ``openai`` backend of the run's ``backend`` section with
    those changed (:meth:`Stages.open_chat`); else the critic's (one backbone, as in the paper); ``None`` without LLM.

    Raises:
        ConfigError: As :func:`~ceb.backends.base.open_backend` (no base URL, no key for a remote endpoint).
    """
    b = config.baselines
    if stages.chat is None or not (b.actor_base_url or b.actor_model):
        return stages.chat
    actor = config.backend.model_copy(
        update={
            "name": "openai",
            "base_url": b.actor_base_url or config.backend.base_url,
            "model": b.actor_model or config.backend.model,
        }
    )
    return stages.open_chat(actor)


class UnavailableCritic:
    """A critic that reports ``not available: <reason>`` for every step and never a number."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def score(self, inp: CriticInput) -> CriticResult:
        """Return no score, with the reason."""
        return CriticResult.not_available(self.reason)


def build_critic(method: MethodSpec, config: RunConfig, stages: Stages) -> Critic:
    """The critic stage of ``method``: the LLM critic of ``stages``, or the method's own over its endpoint.

    A method needing ``chat`` on stages without an LLM reports every step not available, not failing the run.

    Raises:
        ConfigError: The method's critic factory cannot be loaded, or refuses the configuration.
    """
    if method.uses_llm_critic:
        return stages.critic
    if lacks_endpoint(method, stages):
        return UnavailableCritic(f"{method.name} needs an LLM endpoint; backend {config.backend.name!r} has none")
    return method.critic_factory()(config, stages)


def lacks_endpoint(method: MethodSpec, stages: Stages) -> bool:
    """Whether ``method`` needs an LLM endpoint the stages lack (an LLM-only baseline on ``offline``)."""
    return not method.uses_llm_critic and stages.chat is None and "chat" in method.needs
