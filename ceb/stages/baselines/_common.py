"""What every baseline shares: its fields, its evidence line, and its registration in the catalogue."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from ceb.backends.base import ChatBackend
from ceb.config import BaselineConfig, CriticConfig, RunConfig
from ceb.errors import ConfigError
from ceb.stages.assembly import Stages, actor_chat, prompt_set
from ceb.stages.base import Critic, CriticInput, CriticResult
from ceb.stages.methods import MethodSpec, register_method
from ceb.stages.templates import PromptSet


def evidence(**fields: Any) -> str:
    """The numbers a baseline's score came from, as one line of JSON for :attr:`CriticResult.raw`."""
    return json.dumps(fields, ensure_ascii=False, allow_nan=True)


@dataclass
class Baseline:
    """A baseline critic: :meth:`score` is its formula over statistics of :mod:`ceb.stages.statistics`.

    ``chat`` is the actor's or the critic's endpoint, as registered (``None`` where it scores without one);
    ``readout`` is the critic's section (``readout``, ``top_logprobs``, ``format_retries``...).
    """

    chat: ChatBackend | None
    prompts: PromptSet
    settings: BaselineConfig = field(default_factory=BaselineConfig)
    readout: CriticConfig = field(default_factory=CriticConfig)

    @property
    def endpoint(self) -> ChatBackend:
        """:attr:`chat`, which a method whose ``needs`` hold ``"chat"`` always has.

        Raises:
            ConfigError: It is ``None``.
        """
        if self.chat is None:
            raise ConfigError("this baseline needs an LLM endpoint, and none is set")
        return self.chat

    async def score(self, inp: CriticInput) -> CriticResult:
        """The step's score; never raises for one step's failure.

        Raises:
            FatalBackendError: The endpoint refuses every request.
        """
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class BaselineFactory:
    """Builds a :class:`Baseline` over the actor's endpoint or the critic's."""

    critic: type[Baseline]
    endpoint: Literal["actor", "critic"]
    required: bool

    def __call__(self, config: RunConfig, stages: Stages) -> Critic:
        chat = actor_chat(config, stages) if self.endpoint == "actor" else stages.chat
        critic = self.critic(chat, prompt_set(config), config.baselines, config.critic)
        if self.required:
            critic.endpoint  # noqa: B018 - raises ConfigError without one
        return critic


def register_baseline(
    critic: type[Baseline],
    name: str,
    *,
    label: str,
    order: int,
    description: str,
    endpoint: Literal["actor", "critic"] = "actor",
    needs: tuple[str, ...] = ("chat",),
    uses: tuple[str, ...] = (),
    fallback: str = "",
) -> MethodSpec:
    """Register ``critic`` as the method ``name`` of the ``baseline`` group (no bank, no repetition flag).

    ``endpoint``: whose endpoint its statistics come from; the other arguments are :class:`MethodSpec`'s.
    """
    factory = BaselineFactory(critic, endpoint, "chat" in needs)
    return register_method(
        MethodSpec(
            name,
            label=label,
            group="baseline",
            order=order,
            description=description,
            use_bank=False,
            use_repetition_flag=False,
            critic=factory,
            needs=needs,
            uses=uses,
            fallback=fallback,
        )
    )
