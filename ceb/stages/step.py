"""One step of Algorithm 1, and one trajectory's hindsight: the code the batch lanes and the live gate share.

:func:`score_step` is lines 4-7 of Algorithm 1 for one proposed action: the state summary ``s'``, the composite
key ``kappa_t``, contrastive retrieval ``R_t+-`` from the bank, the repetition flag ``rho_t`` and the critic call
``z^_t`` (Eq. 6). :func:`label_trajectory` is lines 11-12: the hindsight votes (Eq. 3) and the bank records the
trajectory adds. :class:`~ceb.pipeline.lane.Lane` (frozen streams) and :class:`~ceb.gate.Gate` (a live
agent) both call these two functions and nothing else for those stages, so a stream replayed through the gate
gives the same scores and the same bank as ``ceb score``.

Neither function updates the bank: the caller does (``Bank.add_trajectory`` or a journal), because when and
under which lock it happens is what differs between a lane and a service. Both start a bank with
:func:`new_bank` and report what a step was shown with :func:`precedents`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Required, TypedDict, Unpack

import anyio

from ceb.backends.scheduling import priority
from ceb.bank import RETRIEVERS, Bank, BankRecord, Retrieval, agreement_flag, composite_key
from ceb.config import RunConfig
from ceb.data.trajectory import Step, Trajectory
from ceb.logs import get_logger
from ceb.stages.base import Abstention, Critic, CriticInput, CriticResult, Hindsight, HindsightResult, HistoryItem
from ceb.stages.critic import config_repetition_flag
from ceb.stages.methods import MethodSpec
from ceb.stages.templates import clip
from ceb.stages.tokens import PromptTokenCounter, PromptTokens

__all__ = [
    "NO_LABEL",
    "BankedTrajectory",
    "Precedent",
    "PreparedStep",
    "ScoredStep",
    "StepArgs",
    "ask_critic",
    "hindsight_votes",
    "label_trajectory",
    "new_bank",
    "oracle_hindsight",
    "precedents",
    "prepare_step",
    "score_step",
    "state_summary",
]

log = get_logger(__name__)

NO_LABEL = "no ground-truth label"
"""Why ``ceb-gt-oracle`` abstains on a step: the stream holds no label for it."""


class Precedent(TypedDict):
    """A bank record shown to the critic for a step (an element of ``StepRow.retrieved`` and of the gate's reply)."""

    trajectory: str
    step: int
    pseudo_label: int
    similarity: float


def precedents(retrieval: Retrieval) -> list[Precedent]:
    """The precedents of a retrieval as result rows list them (similarity rounded to 6 decimals)."""
    return [
        Precedent(
            trajectory=h.record.trajectory_id,
            step=h.record.step,
            pseudo_label=h.record.pseudo_label,
            similarity=round(h.similarity, 6),
        )
        for h in retrieval.hits
    ]


def new_bank(method: MethodSpec, config: RunConfig) -> Bank:
    """An empty bank with the method's retriever and the run's eviction and compression settings.

    The retriever is ``ceb.retriever`` unless the method sets its own; ``config.bank`` bounds the bank (no
    eviction or compression by default, as in the paper), its ``usefulness_k`` derived from the method's ``k``
    unless set (:meth:`~ceb.config.BankConfig.for_k`).
    """
    resolved = method.resolve(config.ceb)
    return Bank(RETRIEVERS.get(resolved.retriever)(), config.bank.for_k(resolved.k))


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedStep:
    """One step's critic request before it is sent (:func:`prepare_step`).

    Attributes:
        state_summary: ``s'``: the state clipped to the bank's budget (``prompts.bank_state_chars``); the query
            key's state and, later, the bank record's.
        retrieval: The precedents shown to the critic (empty for a bank-free method).
        repetition_flag: ``rho_t`` (section 3.3), ``False`` for a method without it.
        input: Everything the critic sees.
        bank_size: ``|B_t|`` when the bank was read.
        bank_version: What the caller's ``bank_version`` callback returned then (0 without one).
        retrieval_s: Seconds spent retrieving (a worker thread), waiting for it included.
    """

    state_summary: str
    retrieval: Retrieval
    repetition_flag: bool
    input: CriticInput
    bank_size: int
    bank_version: int = 0
    retrieval_s: float = 0.0

    def scored(self, result: CriticResult, tokens: PromptTokens | None = None, critic_s: float = 0.0) -> ScoredStep:
        """This request with the critic's answer to it (or to a request with the same messages)."""
        return ScoredStep(
            **{f.name: getattr(self, f.name) for f in fields(PreparedStep)},
            result=result,
            tokens=tokens,
            critic_s=critic_s,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoredStep(PreparedStep):
    """What :func:`score_step` did for one proposed action: the request (:class:`PreparedStep`) and its answer.

    Attributes:
        result: The critic's answer: ``score`` in [0, 1] or ``None`` with ``error``.
        tokens: The prompt's token counts, when a counter was given.
        critic_s: Seconds spent in the critic call (waiting for an endpoint slot included).
    """

    result: CriticResult
    tokens: PromptTokens | None = None
    critic_s: float = 0.0


def state_summary(state: str, config: RunConfig) -> str:
    """``s'``: the state as the bank keeps it and as the query key holds it (``prompts.bank_state_chars``)."""
    return clip(state, config.prompts.bank_state_chars)


class StepArgs(TypedDict, total=False):
    """The step :func:`prepare_step` and :func:`score_step` read; the step must be blinded (no ``label``/``reward``).

    Attributes:
        step: ``(s_t, a_t)`` and the agent's logged fields; only ``state``, ``action``, ``reasoning``, ``op``,
            ``element``, ``value`` and ``actor_logprobs`` are read, never ``observation``.
        t: 0-based index of the step in its trajectory.
        task: ``q``.
        domain: Prompt family.
        history: ``h_<t``: the earlier steps with their observations and the critic's own scores; only the last
            ``prompts.history_steps`` reach the critic, and only the repetition window is read besides.
        bank: The stream's bank, read (retrieval) and never updated here.
        method: The method's switches (bank, repetition flag, classes).
        config: The run's configuration (``k``, the repetition window, text budgets).
        actor_prompt: The actor's system prompt, when known (read by some baselines only).
        bank_lock: Held around the retrieval, when the bank may be updated concurrently (the gate, a lane that
            speculates).
        bank_version: Read (under ``bank_lock``) when the bank is read; its value is
            :attr:`PreparedStep.bank_version`.
    """

    step: Required[Step]
    t: Required[int]
    task: Required[str]
    domain: Required[str]
    history: Required[Sequence[HistoryItem]]
    bank: Required[Bank]
    method: Required[MethodSpec]
    config: Required[RunConfig]
    actor_prompt: str | None
    bank_lock: anyio.Lock | None
    bank_version: Callable[[], int] | None


async def score_step(
    *,
    critic: Critic,
    tokens: PromptTokenCounter | None = None,
    request_priority: float = 0.0,
    **args: Unpack[StepArgs],
) -> ScoredStep:
    """Score the proposed action before it runs (Algorithm 1, lines 4-7; Eq. 2 and 6).

    :func:`prepare_step`, then :func:`ask_critic`. A failed critic call is a result with ``score=None``.
    """
    return await ask_critic(await prepare_step(**args), critic, tokens=tokens, request_priority=request_priority)


async def prepare_step(**args: Unpack[StepArgs]) -> PreparedStep:
    """The critic request for the proposed action (:class:`StepArgs`): ``s'``, ``kappa_t``, ``R_t+-`` and ``rho_t``."""
    step, t, task, history = args["step"], args["t"], args["task"], args["history"]
    bank, method, config = args["bank"], args["method"], args["config"]
    bank_lock, bank_version = args.get("bank_lock"), args.get("bank_version")
    resolved = method.resolve(config.ceb)
    summary = state_summary(step.state, config)
    retrieval = Retrieval()
    retrieval_s = 0.0
    bank_size, bank_positive = len(bank), bank.n_positive
    version = bank_version() if bank_version is not None else 0
    if method.use_bank:
        began = anyio.current_time()
        key = composite_key(task, summary, step.action)
        # Retrieval is CPU work: a worker thread keeps the event loop (and every other stream's requests) moving.
        # The caller waits for it, so its bank is never used by two threads at once.
        if bank_lock is None:
            retrieval = await anyio.to_thread.run_sync(bank.retrieve, key, resolved.k)
        else:
            async with bank_lock:
                bank_size, bank_positive = len(bank), bank.n_positive
                version = bank_version() if bank_version is not None else 0
                retrieval = await anyio.to_thread.run_sync(bank.retrieve, key, resolved.k)
        retrieval_s = anyio.current_time() - began
    if method.classes == "positives":
        retrieval = Retrieval(positives=retrieval.positives)
    # Only the latest steps are read (the repetition window, the prompt's history window): a step's cost must not
    # grow with its trajectory's length (issue 24 item 8), so nothing here walks the whole history.
    window = config.ceb.repetition_window
    rho = method.use_repetition_flag and config_repetition_flag(
        [h.action for h in history[max(0, len(history) - window) :]],  # window 0: the empty tail
        step.action,
        config.ceb,
    )
    shown = max(0, len(history) - config.prompts.history_steps)
    inp = CriticInput(
        domain=args["domain"],
        task=task,
        step=t,
        state=step.state,
        action=step.action,
        reasoning=step.reasoning,
        op=step.op,
        element=step.element,
        value=step.value,
        history=tuple(history[shown:]),
        history_start=shown,
        retrieval=retrieval,
        use_bank=method.use_bank,
        repetition_flag=rho,
        bank_size=bank_size,
        bank_positive=bank_positive,
        actor_logprobs=step.actor_logprobs,
        actor_prompt=args.get("actor_prompt"),
    )
    return PreparedStep(
        state_summary=summary,
        retrieval=retrieval,
        repetition_flag=rho,
        input=inp,
        bank_size=bank_size,
        bank_version=version,
        retrieval_s=retrieval_s,
    )


async def ask_critic(
    prepared: PreparedStep,
    critic: Critic,
    *,
    tokens: PromptTokenCounter | None = None,
    request_priority: float = 0.0,
) -> ScoredStep:
    """Send ``prepared`` to ``critic`` (Eq. 6): the critic call ``z^_t``.

    ``tokens`` counts the prompt while the request is in flight (``None``: not counted); ``request_priority`` is
    its requests' priority (:func:`ceb.backends.scheduling.priority`).
    """
    cost: list[PromptTokens] = []
    began = anyio.current_time()
    async with anyio.create_task_group() as tg:
        if tokens is not None:
            # Counting is CPU work that needs nothing from the reply: a worker thread does it while the request is
            # in flight (tiktoken encodes without the GIL).
            tg.start_soon(_count_tokens, tokens, prepared.input, cost)
        with priority(request_priority):
            res = await critic.score(prepared.input)
    return prepared.scored(res, cost[0] if cost else None, anyio.current_time() - began)


async def _count_tokens(tokens: PromptTokenCounter, inp: CriticInput, out: list[PromptTokens]) -> None:
    out.append(await anyio.to_thread.run_sync(tokens.count, inp))


@dataclass(frozen=True, slots=True)
class BankedTrajectory:
    """One finished trajectory's hindsight and the bank records it adds (Algorithm 1, lines 11-12).

    Attributes:
        hindsight: The votes, soft votes and pseudo-labels (Eq. 3), abstentions and cost.
        records: The records to add, one per labelled step, in step order; empty when too few votes were valid.
        votes_needed: Valid votes needed to bank the trajectory (``ceb.min_valid_votes``, else half of ``V``).
    """

    hindsight: HindsightResult
    records: tuple[BankRecord, ...]
    votes_needed: int


def oracle_hindsight(labels: Sequence[int | None]) -> HindsightResult:
    """The held-out labels as one unanimous vote (``ceb-gt-oracle``); it abstains on unlabeled steps."""
    known = tuple(y for y in labels if y is not None)
    return HindsightResult(
        votes=(known,),
        soft_votes=tuple(float(y) for y in known),
        pseudo_labels=known,
        failed_votes=0,
        abstained=tuple(Abstention(step=t, reason=NO_LABEL) for t, y in enumerate(labels) if y is None),
    )


async def hindsight_votes(
    blind: Trajectory,
    *,
    method: MethodSpec,
    config: RunConfig,
    hindsight: Hindsight,
    labels: Sequence[int | None] | None = None,
    request_priority: float = 0.0,
) -> HindsightResult:
    """The ``V`` hindsight votes on a finished trajectory (Eq. 3), or the oracle's held-out labels.

    They read the trajectory and nothing the critic said, so they may be asked before its steps are scored. The
    arguments are :func:`label_trajectory`'s.

    Raises:
        ValueError: An oracle method has no ``labels``.
    """
    if method.oracle_labels:
        if labels is None:
            raise ValueError(f"method {method.name} needs the held-out labels")
        return oracle_hindsight(labels)
    with priority(request_priority):
        return await hindsight.label(blind, method.resolve(config.ceb).votes)


async def label_trajectory(
    blind: Trajectory,
    scores: Sequence[float | None],
    *,
    method: MethodSpec,
    config: RunConfig,
    hindsight: Hindsight,
    labels: Sequence[int | None] | None = None,
    request_priority: float = 0.0,
    reasons_seen: set[str] | None = None,
    stream: str = "",
    voted: HindsightResult | None = None,
) -> BankedTrajectory:
    """Vote on a finished trajectory in hindsight and build its bank records (Algorithm 1, lines 11-12).

    Args:
        blind: The finished trajectory, observations included, blinded (:meth:`Trajectory.blinded`).
        scores: ``z^_t`` the critic gave each step before it ran (``None`` where it gave none); shape ``(T,)``.
        method: The method (its vote count ``V``; ``oracle_labels`` takes ``labels`` instead of votes).
        config: The run's configuration (``min_valid_votes``, text budgets).
        hindsight: The labeler ``g_phi``.
        labels: Held-out labels, read only by the oracle method (evaluation); ``None`` otherwise.
        request_priority: Priority of the labeler's requests.
        reasons_seen: Abstention reasons already logged by the caller; a new one is logged once and added.
        stream: Stream name, for the log.
        voted: The votes, when the caller asked ``hindsight`` already (they read no score, so a lane that
            speculates asks them while the steps are scored); ``None``: asked here.

    Returns:
        The hindsight result and the records; an abstained step gets no record, and a trajectory with fewer
        valid votes than needed gets none at all (logged as a warning).

    Raises:
        ValueError: ``scores`` is not one per step, or an oracle method has no ``labels``.
    """
    if len(scores) != len(blind.steps):
        raise ValueError(f"trajectory {blind.id}: {len(scores)} scores for {len(blind.steps)} steps")
    votes = method.resolve(config.ceb).votes
    if voted is not None:
        hr = voted
    else:
        hr = await hindsight_votes(
            blind, method=method, config=config, hindsight=hindsight, labels=labels, request_priority=request_priority
        )
    # An abstained step gets no record: the bank holds only labels the labeler had evidence for.
    steps = hr.labelled_steps(len(blind.steps))
    seen = reasons_seen if reasons_seen is not None else set()
    for reason in sorted({a["reason"] for a in hr.abstained} - seen):
        # The same for most trajectories of a stream (e.g. no observations at all): said once per caller and reason.
        seen.add(reason)
        log.info(
            "hindsight abstained: such steps add no bank record",
            stream=stream,
            method=method.name,
            trajectory=blind.id,
            reason=reason,
        )
    needed = config.ceb.min_valid_votes or math.ceil(votes / 2)
    records: tuple[BankRecord, ...] = ()
    if method.oracle_labels or len(hr.votes) >= needed:
        records = tuple(
            BankRecord(
                task=blind.task,
                state=state_summary(blind.steps[t].state, config),
                action=blind.steps[t].action,
                observation=clip(blind.steps[t].observation, config.prompts.bank_observation_chars),
                pseudo_label=y,
                soft_vote=soft,
                score=scores[t],
                agreement=agreement_flag(scores[t], y),
                trajectory_id=blind.id,
                step=t,
            )
            for t, y, soft in zip(steps, hr.pseudo_labels, hr.soft_votes, strict=True)
        )
    else:
        log.warning(
            f"{len(hr.votes)} valid hindsight votes of {votes}, {needed} needed; trajectory not banked",
            stream=stream,
            method=method.name,
            trajectory=blind.id,
            errors=list(hr.errors),
        )
    return BankedTrajectory(hindsight=hr, records=records, votes_needed=needed)
