"""One step of Algorithm 1, and one trajectory's hindsight: the code the batch lanes and the live gate share.

:func:`score_step` is Algorithm 1 lines 4-7 (``s'``, ``kappa_t``, ``R_t+-``, ``rho_t``, ``z^_t``, Eq. 6) and
:func:`label_trajectory` lines 11-12 (Eq. 3 and the bank records). The lanes and :class:`~ceb.gate.Gate` call only
these, so a stream replayed through the gate gives the same scores and bank as ``ceb score``. Neither updates the
bank: when and under which lock is the caller's (a lane's or a service's) choice.
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
    "bank_records",
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
    """An empty bank with the method's retriever and ``config.bank`` (``usefulness_k`` from the method's ``k``)."""
    resolved = method.resolve(config.ceb)
    return Bank(RETRIEVERS.get(resolved.retriever)(), config.bank.for_k(resolved.k))


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedStep:
    """One step's critic request before it is sent (:func:`prepare_step`).

    ``state_summary`` is ``s'`` (:func:`state_summary`); ``bank_size`` is ``|B_t|`` and ``bank_version`` the
    caller's callback (0 without one) when the bank was read; ``retrieval_s`` is seconds retrieving, waiting
    included.
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
    """The request (:class:`PreparedStep`) and its answer; ``critic_s``: seconds in the call, slot wait included."""

    result: CriticResult
    tokens: PromptTokens | None = None
    critic_s: float = 0.0


def state_summary(state: str, config: RunConfig) -> str:
    """``s'``: the state as the bank keeps it and as the query key holds it (``prompts.bank_state_chars``)."""
    return clip(state, config.prompts.bank_state_chars)


class StepArgs(TypedDict, total=False):
    """The step :func:`prepare_step` and :func:`score_step` read; the step must be blinded (no ``label``/``reward``).

    ``step.observation`` is never read; of ``history`` (``h_<t``) only the last ``prompts.history_steps`` and the
    repetition window. ``bank`` is read, never updated; ``bank_lock`` is held around the retrieval when the bank
    may be updated concurrently (the gate, a lane that speculates), and ``bank_version`` called under it.
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
    """Score the proposed action before it runs (Algorithm 1, lines 4-7; Eq. 2 and 6); a failure is ``score=None``."""
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
    """One finished trajectory's hindsight (Eq. 3) and the bank records it adds (Algorithm 1, lines 11-12).

    ``records`` has one per labelled step, empty when fewer than ``votes_needed`` votes were valid.
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


def _votes_needed(method: MethodSpec, config: RunConfig) -> int:
    """Valid votes a trajectory needs to be banked: ``ceb.min_valid_votes``, default ``ceil(V / 2)``."""
    return config.ceb.min_valid_votes or math.ceil(method.resolve(config.ceb).votes / 2)


def bank_records(
    blind: Trajectory,
    scores: Sequence[float | None],
    hr: HindsightResult,
    *,
    method: MethodSpec,
    config: RunConfig,
) -> tuple[BankRecord, ...] | None:
    """The bank records of a voted trajectory (Algorithm 1, line 12), one per labelled step, in step order.

    ``scores`` are the steps' ``z^_t`` (``None`` where none), shape ``(T,)``. ``None`` when fewer than
    ``ceb.min_valid_votes`` (default ``ceil(V / 2)``) votes were valid and the oracle is not voting: not banked.
    """
    if not method.oracle_labels and len(hr.votes) < _votes_needed(method, config):
        return None
    # An abstained step gets no record: the bank holds only labels the labeler had evidence for.
    steps = hr.labelled_steps(len(blind.steps))
    return tuple(
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

    ``blind`` is blinded (:meth:`Trajectory.blinded`), observations included; ``scores`` are each step's ``z^_t``
    (``None`` where none), shape ``(T,)``; ``labels`` are read by the oracle method only; a reason not yet in
    ``reasons_seen`` is logged once and added; ``voted``: the votes when the caller asked them already.

    Raises:
        ValueError: ``scores`` is not one per step, or an oracle method has no ``labels``.
    """
    if len(scores) != len(blind.steps):
        raise ValueError(f"trajectory {blind.id}: {len(scores)} scores for {len(blind.steps)} steps")
    if voted is not None:
        hr = voted
    else:
        hr = await hindsight_votes(
            blind, method=method, config=config, hindsight=hindsight, labels=labels, request_priority=request_priority
        )
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
    votes, needed = method.resolve(config.ceb).votes, _votes_needed(method, config)
    records = bank_records(blind, scores, hr, method=method, config=config)
    if records is None:
        records = ()
        log.warning(
            f"{len(hr.votes)} valid hindsight votes of {votes}, {needed} needed; trajectory not banked",
            stream=stream,
            method=method.name,
            trajectory=blind.id,
            errors=list(hr.errors),
        )
    return BankedTrajectory(hindsight=hr, records=records, votes_needed=needed)
