"""Stage assembly: the critic and hindsight stages of a run, built from its :class:`~ceb.config.RunConfig`.

``backend.name`` selects a stage factory from :data:`BACKENDS`:

``offline``: the embedded default, model-free stand-ins (:mod:`ceb.stages.offline`); not a language model.
``openai``: the LLM critic and labeler over any OpenAI-compatible endpoint (vLLM's server, OpenAI, Azure).
``vllm``: the same LLM stages over a vLLM engine inside this process (:mod:`ceb.backends.vllm_engine`).

A method's own critic (a baseline's) is built by :func:`build_critic` from its catalogue entry
(:mod:`ceb.stages.methods`) over the same stages. Transports (how a request reaches a server) live apart in
:mod:`ceb.backends`; this module is the only place that joins the two.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ceb.backends.base import ChatBackend, EndpointLimits, RetryPolicy
from ceb.config import RunConfig
from ceb.errors import ConfigError
from ceb.registry import Registry
from ceb.stages.base import Critic, CriticInput, CriticResult, Hindsight
from ceb.stages.critic import LLMCritic
from ceb.stages.hindsight import LLMHindsight
from ceb.stages.methods import MethodSpec
from ceb.stages.offline import OfflineCritic, OfflineHindsight
from ceb.stages.templates import PromptSet

__all__ = [
    "BACKENDS",
    "StageFactory",
    "Stages",
    "UnavailableCritic",
    "actor_chat",
    "build_critic",
    "build_stages",
    "llm_stages",
    "offline_stages",
    "openai_chat",
    "openai_stages",
    "vllm_chat",
    "vllm_stages",
    "prompt_set",
]


@dataclass
class Stages:
    """A critic and a hindsight labeler ready to run, and the endpoint they share (if any).

    Use as an async context manager so the endpoint's connections are closed.
    """

    critic: Critic
    hindsight: Hindsight
    chat: ChatBackend | None = None

    async def __aenter__(self) -> Stages:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.chat is not None:
            await self.chat.aclose()


StageFactory = Callable[[RunConfig, EndpointLimits], Stages]
"""``(config, limits) -> Stages``: one backend's stages; ``limits`` holds the endpoint slots a run shares."""

BACKENDS: Registry[StageFactory] = Registry("backend")
BACKENDS.register("offline", "ceb.stages.assembly:offline_stages")
BACKENDS.register("openai", "ceb.stages.assembly:openai_stages")
BACKENDS.register("vllm", "ceb.stages.assembly:vllm_stages")


def build_stages(config: RunConfig, limits: EndpointLimits | None = None) -> Stages:
    """Build the stages of ``config.backend.name``.

    Raises:
        ConfigError: Unknown backend, or a setting it needs is missing.
    """
    return BACKENDS.get(config.backend.name)(config, limits or EndpointLimits())


def prompt_set(config: RunConfig) -> PromptSet:
    """The templates and text budgets of ``config.prompts``."""
    return PromptSet(config.prompts.prompt_dir, config.prompts)


def llm_stages(config: RunConfig, chat: ChatBackend) -> Stages:
    """LLM critic and hindsight over one chat endpoint, with the run's prompts and decoding settings."""
    prompts = prompt_set(config)
    critic = LLMCritic(chat, prompts, config.critic)
    hindsight = LLMHindsight(chat, prompts, config.hindsight, tau=config.ceb.tau)
    return Stages(critic=critic, hindsight=hindsight, chat=chat)


def offline_stages(config: RunConfig, limits: EndpointLimits) -> Stages:
    """The model-free stand-ins of :mod:`ceb.stages.offline`."""
    return Stages(critic=OfflineCritic(), hindsight=OfflineHindsight())


def openai_chat(config: RunConfig, limits: EndpointLimits) -> ChatBackend:
    """The OpenAI-compatible transport of ``config.backend``.

    Raises:
        ConfigError: ``backend.base_url`` or ``backend.model`` is not set, or the API key is missing.
    """
    from ceb.backends.openai import OpenAIBackend, OpenAISettings

    b = config.backend
    if not b.base_url or not b.model:
        raise ConfigError("the openai backend needs backend.base_url and backend.model (--base-url, --model)")
    urls = tuple(u.strip() for u in b.base_url.split(",") if u.strip()) if isinstance(b.base_url, str) else b.base_url
    return OpenAIBackend(
        OpenAISettings(
            base_url=urls,
            model=b.model,
            api_key_env=b.api_key_env,
            timeout_s=b.timeout_s,
            structured_output=b.structured_output,
            max_concurrency=b.max_concurrency,
            token_limit_field=b.token_limit_field,
            server_priority=b.server_priority,
            routing=b.routing,
            session_header=b.session_header,
        ),
        retry=RetryPolicy(max_attempts=b.max_attempts, backoff_s=b.backoff_s, max_backoff_s=b.max_backoff_s),
        limits=limits,
    )


def openai_stages(config: RunConfig, limits: EndpointLimits) -> Stages:
    """LLM stages over an OpenAI-compatible endpoint (see :func:`openai_chat` for the errors raised)."""
    return llm_stages(config, openai_chat(config, limits))


def vllm_chat(config: RunConfig, limits: EndpointLimits) -> ChatBackend:
    """The in-process vLLM engine transport of ``config.backend`` (started on first use).

    Raises:
        ConfigError: ``backend.model`` is not set, or vLLM is not installed here (the message says how).
    """
    from ceb.backends.vllm_engine import VLLMEngineBackend, VLLMEngineSettings, require_vllm, settings_args

    b = config.backend
    if not b.model:
        raise ConfigError("the vllm backend needs backend.model, the model directory or hub name (--model)")
    require_vllm()
    e = b.engine
    flags = e.model_dump(exclude={"args"})
    return VLLMEngineBackend(
        VLLMEngineSettings(
            model=b.model,
            **flags,
            args=settings_args(e.args),
            structured_output=b.structured_output,
            max_concurrency=b.max_concurrency,
        ),
        retry=RetryPolicy(max_attempts=b.max_attempts, backoff_s=b.backoff_s, max_backoff_s=b.max_backoff_s),
        limits=limits,
    )


def vllm_stages(config: RunConfig, limits: EndpointLimits) -> Stages:
    """LLM stages over a vLLM engine in this process (see :func:`vllm_chat` for the errors raised)."""
    return llm_stages(config, vllm_chat(config, limits))


def actor_chat(config: RunConfig, stages: Stages) -> ChatBackend | None:
    """The ACTOR model's endpoint for the baselines that ask the actor (``verbalized``, ``pro``, teacher forcing).

    ``baselines.actor_base_url`` / ``actor_model`` when set, else the critic's own endpoint (the paper uses one
    backbone for both); ``None`` when the stages have no LLM at all.
    """
    b = config.baselines
    if stages.chat is None or not (b.actor_base_url or b.actor_model):
        return stages.chat
    backend = config.backend.model_copy(
        update={"base_url": b.actor_base_url or config.backend.base_url, "model": b.actor_model or config.backend.model}
    )
    return openai_chat(config.model_copy(update={"backend": backend}), EndpointLimits())


class UnavailableCritic:
    """A critic that reports ``not available: <reason>`` for every step and never a number.

    Args:
        reason: Why the method cannot score here (e.g. no LLM endpoint).
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def score(self, inp: CriticInput) -> CriticResult:
        """Return no score, with the reason."""
        return CriticResult.not_available(self.reason)


def build_critic(method: MethodSpec, config: RunConfig, stages: Stages) -> Critic:
    """The critic stage of ``method``: the LLM critic of ``stages``, or the method's own over its endpoint.

    A method that needs an LLM (``"chat"`` in :attr:`MethodSpec.needs`) on stages without one reports every
    step as not available rather than failing the run.

    Raises:
        ConfigError: The method's critic factory cannot be loaded, or refuses the configuration.
    """
    if method.uses_llm_critic:
        return stages.critic
    if lacks_endpoint(method, stages):
        return UnavailableCritic(f"{method.name} needs an LLM endpoint; backend {config.backend.name!r} has none")
    return method.critic_factory()(config, stages)


def lacks_endpoint(method: MethodSpec, stages: Stages) -> bool:
    """Whether ``method`` cannot score on ``stages`` at all.

    True when it needs an LLM endpoint (not the stages' own critic) and the stages have none: an LLM-only
    baseline on the ``offline`` backend.
    """
    return not method.uses_llm_critic and stages.chat is None and "chat" in method.needs
