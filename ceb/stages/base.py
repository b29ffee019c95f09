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
"""Start of :attr:`CriticResult.error` when a method cannot give a number for a step at all (no log-probs, no
endpoint...); such a result is made by :meth:`CriticResult.not_available` and has ``available=False``. The prefix
is for people reading the error; code reads :attr:`CriticResult.status`. A method never fabricates a score in
its place."""

StepStatus = Literal["scored", "failed", "not_available", "reused"]
"""Outcome of one step of one method: ``scored`` (a score in [0, 1]); ``failed`` (no readable reply after the
retries and re-asks; ``error`` says why); ``not_available`` (the method cannot score this step here at all, e.g.
no log-probs; neither a score nor a failure); ``reused`` (a result row copied from another stream order that
sees the same prompts; set by the pipeline, never by a stage)."""


@dataclass(frozen=True, slots=True)
class CallStats:
    """Cost of one stage call, summed over its requests.

    Attributes:
        latency_s: Seconds in the server (0 for offline stages).
        queue_s: Seconds waiting for an endpoint slot.
        requests: Requests sent, re-asks and retries included.
        prompt_tokens: Input tokens the server counted, when it said.
        completion_tokens: Output tokens the server counted, when it said.
        retries: Attempts the backend sent again after a wire failure (timeout, 429, 5xx, dropped connection);
            re-asks after an unreadable reply are not retries.
        retry_reason: Why the last retried attempt failed (``"<ExceptionType>: <message>"``), ``None`` without
            retries.
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
    """An earlier step ``i < t`` of the same trajectory as the critic sees it (part of ``h_<t``).

    Attributes:
        action: ``a_i``.
        observation: ``o_i``: what happened after it (known by step ``t``).
        score: The critic's own pre-execution score ``z^_i``, ``None`` if that call failed.
    """

    action: str
    observation: str
    score: float | None


@dataclass(frozen=True, slots=True)
class CriticInput:
    """Everything the critic may see for step ``t`` (Eq. 2): ``q, s_t, a_t, h_<t, R_t+-, rho_t``.

    It holds nothing of ``o_t`` or later steps, and nothing evaluation-only (``label``, ``reward``, ``meta``).

    Attributes:
        domain: Prompt family selector.
        task: ``q``.
        step: 0-based index ``t``.
        state: ``s_t``.
        action: ``a_t``.
        reasoning: The agent's stated reason, if logged.
        op: Structured operation (web / GUI), if logged.
        element: Target element (web / GUI), if logged.
        value: Typed value (web / GUI), if logged.
        history: Earlier steps with their observations and the critic's own scores: the last
            ``prompts.history_steps`` of them (all of them in a trajectory no longer than that).
        history_start: 0-based index of ``history[0]`` in the trajectory: how many earlier steps are not shown.
        retrieval: Contrastive precedents from the bank.
        use_bank: ``False`` for the bank-free ``static`` critic: the precedent block is left out entirely.
        repetition_flag: ``rho_t`` (section 3.3).
        bank_size: ``|B_t|`` when the step was scored.
        bank_positive: ``|B_t+|`` when the step was scored.
        actor_logprobs: Natural-log probabilities of the action's tokens as the actor generated them, when the
            stream logged them (the step's ``actor_logprobs``); read by the PPL and ME baselines only.
        actor_prompt: The actor's system prompt, when the stream carries one (the trajectory's
            ``meta["actor_prompt"]``): the actor's own input, known before execution; read only by the
            baselines that re-run the actor (section 4.1: PPL, ME, Verbalization, PRO).
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
    """The critic's answer for one step.

    Attributes:
        score: ``z^_t = clip(r_t, 0, 1)`` (Eq. 6), or ``None`` when no reply could be read.
        raw: The last reply text (or the offline critic's explanation as JSON).
        error: Why ``score`` is ``None``; ``None`` on success.
        clipped: ``r_t`` was outside [0, 1] and was clipped.
        stats: Requests, tokens and time spent.
        available: ``False`` when the method cannot score this step at all (see :data:`NOT_AVAILABLE`).
        readout: For a verbal score (the CEB critic, ``static``, ``verbalized``, ``cot``), which readout gave it:
            ``text``, ``expected`` or ``text_fallback`` (:mod:`ceb.stages.readout`); ``None`` for the methods that
            read no verbal score and for a step without a score.
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

    A labeler abstains when it has nothing to judge the step by (the offline rules on an empty web
    observation); ``ceb-gt-oracle`` abstains on a step without a ground-truth label. Such a step adds no record
    to the bank: a guessed pseudo-label would be retrieved later as if it were evidence.
    """

    step: int
    reason: str


@dataclass(frozen=True, slots=True)
class HindsightResult:
    """Hindsight votes for one trajectory (Eq. 3).

    The votes cover the steps the labeler did not abstain on, in step order: ``T_l = T - len(abstained)`` of
    them (:meth:`labelled_steps`). Without abstentions ``T_l = T``.

    Attributes:
        votes: Valid votes, each one 0/1 label per labelled step; shape ``(V_valid, T_l)``.
        soft_votes: ``y~_t``, mean over valid votes; shape ``(T_l,)``; empty when no vote was valid.
        pseudo_labels: ``y^_t = 1[y~_t >= 1/2]``; shape ``(T_l,)``; empty when no vote was valid.
        failed_votes: Votes that gave no readable answer after their re-asks.
        errors: One reason per failed vote.
        raws: Reply text of every valid vote, in vote order.
        stats: Requests, tokens and time spent over all votes.
        abstained: Steps given no label, each with its reason, in step order. An abstention is not a failed
            vote: it is the labeler saying it has no evidence for that step.
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
        """The steps the votes label, in order: ``0 .. n_steps - 1`` without the abstained ones; shape ``(T_l,)``.

        Args:
            n_steps: ``T``, the trajectory's number of steps.
        """
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

    Use as an async context manager: leaving it closes :attr:`chat`, every backend opened through
    :meth:`open_chat` (the labeller's own endpoint, the actor endpoint of the baselines) and :attr:`cache`.

    Attributes:
        critic: The critic stage.
        hindsight: The hindsight labeler.
        chat: The critic's endpoint; ``None`` on a backend without a language model.
        limits: The run's endpoint slots, shared by :attr:`chat` and every backend opened through
            :meth:`open_chat`; ``chat``'s own slots when not given.
        hindsight_chat: The labeller's endpoint when it has its own (``hindsight.base_url`` / ``model``,
            opened through :meth:`open_chat`); ``None`` when it asks :attr:`chat`.
        cache: The reply cache every backend of these stages consults first (:mod:`ceb.backends.cache`), or
            ``None``; owned by the stages.
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
        """Another endpoint the stages' methods ask (the actor's), opened once per settings with the run's slots.

        The backend is :func:`~ceb.backends.base.open_backend`'s, so it is built the one way every backend is;
        it is closed with the stages.

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
        """Every backend the stages asked or may ask, with its role, for the run's provenance.

        ``critic`` (:attr:`chat`), ``hindsight`` (:attr:`hindsight_chat`, when it has its own) and ``actor`` (an
        endpoint a baseline opened through :meth:`open_chat`).
        """
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
