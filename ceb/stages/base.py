"""What the pipeline asks of a critic and a hindsight labeler, and what they give back.

Both stages are async callables over frozen dataclasses. LLM versions live in :mod:`ceb.stages.critic` and
:mod:`ceb.stages.hindsight`; the offline stand-ins in :mod:`ceb.stages.offline` implement the same
protocols without a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, TypedDict

from ceb.backends.base import ChatBackend, ChatResponse, open_backend
from ceb.backends.cache import ReplyCache
from ceb.backends.scheduling import EndpointLimits
from ceb.bank import Retrieval
from ceb.config import BackendConfig
from ceb.data.trajectory import Trajectory

__all__ = [
    "NOT_AVAILABLE",
    "Abstention",
    "StepStatus",
    "CallStats",
    "Critic",
    "CriticInput",
    "CriticResult",
    "Hindsight",
    "HindsightResult",
    "HistoryItem",
    "Stages",
]

NOT_AVAILABLE = "not available"
"""Start of :attr:`CriticResult.error` (:meth:`CriticResult.not_available`) when a method cannot score a step at all
(no log-probs, no endpoint); for people reading it: code reads :attr:`CriticResult.status`."""

StepStatus = Literal["scored", "failed", "not_available", "reused"]
"""Outcome of one step of one method: ``scored`` (a score in [0, 1]); ``failed`` (no readable reply after the
retries and re-asks; ``error`` says why); ``not_available`` (the method cannot score this step here at all, e.g.
no log-probs; neither a score nor a failure); ``reused`` (a result row copied from another stream order that
sees the same prompts; set by the pipeline, never by a stage)."""


@dataclass(frozen=True, slots=True)
class CallStats:
    """Cost of one stage call, summed over its requests (re-asks and retries included).

    ``latency_s`` is seconds in the server (0 offline), ``queue_s`` seconds waiting for an endpoint slot; token
    counts are the server's, ``None`` when it did not say. ``retries`` counts wire failures sent again (timeout,
    429, 5xx), not re-asks; ``retry_reason`` is the last one's ``"<ExceptionType>: <message>"``.
    """

    latency_s: float = 0.0
    queue_s: float = 0.0
    requests: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    retries: int = 0
    retry_reason: str | None = None

    @classmethod
    def of(cls, response: ChatResponse) -> CallStats:
        """The cost of one answered call (its attempts, tokens, times and retries)."""
        c = response.completion
        return cls(
            response.latency_s,
            response.queue_s,
            response.attempts,
            c.prompt_tokens,
            c.completion_tokens,
            retries=response.attempts - 1,
            retry_reason=response.retry_reason,
        )

    @classmethod
    def failed(cls, exc: Exception) -> CallStats:
        """The cost of a call that failed after ``exc.attempts`` attempts (1 when the error does not say)."""
        attempts: int = getattr(exc, "attempts", 1)
        retried = f"{type(exc).__name__}: {exc}" if attempts > 1 else None
        return cls(requests=attempts, retries=attempts - 1, retry_reason=retried)

    def __add__(self, other: CallStats) -> CallStats:
        def add(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)

        return CallStats(
            latency_s=self.latency_s + other.latency_s,
            queue_s=self.queue_s + other.queue_s,
            requests=self.requests + other.requests,
            prompt_tokens=add(self.prompt_tokens, other.prompt_tokens),
            completion_tokens=add(self.completion_tokens, other.completion_tokens),
            retries=self.retries + other.retries,
            retry_reason=other.retry_reason or self.retry_reason,
        )


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """An earlier step ``i < t`` as the critic sees it (part of ``h_<t``): ``a_i``, ``o_i`` and its own ``z^_i``."""

    action: str
    observation: str
    score: float | None


@dataclass(frozen=True, slots=True)
class CriticInput:
    """Everything the critic may see for step ``t`` (Eq. 2): ``q, s_t, a_t, h_<t, R_t+-, rho_t``.

    Nothing of ``o_t`` or later, nothing evaluation-only (``label``, ``reward``, ``meta``). ``history`` is the last
    ``prompts.history_steps`` steps, ``history_start`` the index of its first; ``use_bank=False`` (``static``)
    leaves the precedent block out; ``actor_logprobs`` are natural-log (read by PPL and ME), and ``actor_prompt`` is
    the trajectory's ``meta["actor_prompt"]``, read only by the baselines that re-run the actor (section 4.1).
    """

    domain: str
    task: str
    step: int
    state: str
    action: str
    reasoning: str | None = None
    op: str | None = None
    element: str | None = None
    value: str | None = None
    history: tuple[HistoryItem, ...] = ()
    history_start: int = 0
    retrieval: Retrieval = field(default_factory=Retrieval)
    use_bank: bool = True
    repetition_flag: bool = False
    bank_size: int = 0
    bank_positive: int = 0
    actor_logprobs: tuple[float, ...] | None = None
    actor_prompt: str | None = None


@dataclass(frozen=True, slots=True)
class CriticResult:
    """The critic's answer for one step: ``score`` is ``z^_t = clip(r_t, 0, 1)`` (Eq. 6), ``None`` with ``error``.

    ``raw`` is the last reply (the offline critic's explanation as JSON); ``available=False``: the method cannot
    score this step (:data:`NOT_AVAILABLE`); ``readout``: ``text``, ``expected`` or ``text_fallback`` for a verbal
    score (:mod:`ceb.stages.readout`), else ``None``.
    """

    score: float | None
    raw: str
    error: str | None = None
    clipped: bool = False
    stats: CallStats = field(default_factory=CallStats)
    available: bool = True
    readout: str | None = None

    @classmethod
    def not_available(cls, reason: str, *, raw: str = "", stats: CallStats | None = None) -> CriticResult:
        """A result with no score because the method cannot give one for this step (never a made-up number)."""
        return cls(score=None, raw=raw, error=f"{NOT_AVAILABLE}: {reason}", stats=stats or CallStats(), available=False)

    @property
    def status(self) -> StepStatus:
        """``scored``, ``failed`` or ``not_available``."""
        if self.score is not None:
            return "scored"
        return "failed" if self.available else "not_available"


class Abstention(TypedDict):
    """A step the hindsight labeler gave no label, and why (one element of :attr:`HindsightResult.abstained`).

    Such a step adds no bank record: a guessed pseudo-label would be retrieved later as if it were evidence.
    """

    step: int
    reason: str


@dataclass(frozen=True, slots=True)
class HindsightResult:
    """Hindsight votes for one trajectory (Eq. 3).

    The votes cover the ``T_l = T - len(abstained)`` steps not abstained on (:meth:`labelled_steps`): ``votes`` has
    shape ``(V_valid, T_l)`` of 0/1; ``soft_votes`` (``y~_t``) and ``pseudo_labels`` (``y^_t = 1[y~_t >= 1/2]``)
    shape ``(T_l,)``, empty when no vote was valid. ``errors`` has one reason per failed vote; an abstention is
    not a failed vote.
    """

    votes: tuple[tuple[int, ...], ...]
    soft_votes: tuple[float, ...]
    pseudo_labels: tuple[int, ...]
    failed_votes: int = 0
    errors: tuple[str, ...] = ()
    raws: tuple[str, ...] = ()
    stats: CallStats = field(default_factory=CallStats)
    abstained: tuple[Abstention, ...] = ()

    def labelled_steps(self, n_steps: int) -> list[int]:
        """The steps the votes label, in order: ``0 .. n_steps - 1`` without the abstained ones; shape ``(T_l,)``."""
        skipped = {a["step"] for a in self.abstained}
        return [t for t in range(n_steps) if t not in skipped]


class Critic(Protocol):
    """The frozen critic ``f_theta`` (Eq. 2)."""

    async def score(self, inp: CriticInput) -> CriticResult:
        """Score the proposed action ``inp.action`` before it runs."""


class Hindsight(Protocol):
    """The hindsight labeler ``g_phi`` (Eq. 3)."""

    async def label(self, trajectory: Trajectory, votes: int) -> HindsightResult:
        """Vote ``votes`` times on every step of a finished, blinded ``trajectory``."""


@dataclass
class Stages:
    """A critic and a hindsight labeler ready to run, the endpoint they share (if any), and the run's slots.

    An async context manager: leaving it closes :attr:`chat` (the critic's; ``None`` without a model), every
    backend opened through :meth:`open_chat` and :attr:`cache`. ``limits`` defaults to ``chat``'s own slots;
    ``hindsight_chat`` is ``None`` when the labeller asks :attr:`chat`.
    """

    critic: Critic
    hindsight: Hindsight
    chat: ChatBackend | None = None
    limits: EndpointLimits | None = None
    hindsight_chat: ChatBackend | None = None
    cache: ReplyCache | None = None
    _opened: dict[str, ChatBackend | None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.limits is None:
            self.limits = self.chat.limits if self.chat is not None else EndpointLimits()

    def open_chat(self, settings: BackendConfig) -> ChatBackend | None:
        """Another endpoint the stages' methods ask (the actor's), opened once per settings, closed with the stages.

        Raises:
            ConfigError: As :func:`~ceb.backends.base.open_backend`.
        """
        key = settings.model_dump_json()
        if key not in self._opened:
            self._opened[key] = open_backend(settings, self.limits, self.cache)
        return self._opened[key]

    @property
    def endpoints(self) -> list[ChatBackend]:
        """The backends the critic and the labeller ask (:attr:`chat`, then :attr:`hindsight_chat`): preflighted."""
        return [b for b in (self.chat, self.hindsight_chat) if b is not None]

    def asked(self) -> list[tuple[str, ChatBackend]]:
        """Every backend the stages may ask, with its role (``critic``, ``hindsight``, ``actor``), for provenance."""
        out = [("critic", self.chat)] if self.chat is not None else []
        if self.hindsight_chat is not None:
            out.append(("hindsight", self.hindsight_chat))
        out += [("actor", b) for b in self._opened.values() if b is not None and b is not self.hindsight_chat]
        return out

    async def __aenter__(self) -> Stages:
        return self

    async def __aexit__(self, *exc: object) -> None:
        opened, self._opened = [b for b in self._opened.values() if b is not None], {}
        try:
            for backend in (*opened, *([self.chat] if self.chat is not None else [])):
                await backend.aclose()
        finally:
            if self.cache is not None:
                self.cache.close()
