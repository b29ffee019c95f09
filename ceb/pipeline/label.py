"""``ceb label``: a judge model's step labels for a stream that has none (a user's own chat or inspect logs).

Chat transcripts and inspect_ai logs carry one outcome per trajectory (``meta.label``, as ``ceb convert chat`` and
``ceb convert inspect`` write it), so ECE, Brier and AUROC, which need a label per step, are out of reach without
hand labels. :func:`label_stream` asks a judge model the hindsight question (paper section 3, Eq. 3; appendix
"Hindsight bank-construction prompt"): it reads the whole trajectory, here followed by its final outcome when the
stream records one, and labels every step productive (1) or not (0). It is asked ``V`` times (``ceb.votes``, the
paper's ``V = 5``) at the labeller's temperature (``hindsight.temperature``, the paper's ``tau``), and a step's
label is the majority of the valid votes: 1 when at least half say 1, so a tie counts as productive
(:func:`~ceb.stages.hindsight.majority_vote`). A trajectory with no valid vote gets no label at any step.

The new stream holds the judge's labels as each step's ``label`` and names their source in each labelled
trajectory's ``meta.label_source``, ``judge:<model>`` (:data:`LABEL_SOURCE`). Judge labels are not ground truth:
the metrics of a run on them measure agreement with that judge, and the report's provenance says so
(:func:`label_sources`). A stream that already has step labels is refused (``ceb relabel`` adds a second label set
beside them), so a stream, and so a row of a report, never mixes label sources; a run refuses a stream that does.

A judge that is the run's own critic or hindsight labeller (the same model at the same endpoint) would grade the
critic by its own answers: :func:`refuse_self_judge` refuses it unless asked for explicitly.

Resumable as ``ceb relabel`` is (:func:`~ceb.pipeline.relabel.judge_stream`): each trajectory's labels are
journalled in ``OUT.judgments.jsonl`` as they arrive, keyed on the judge, the votes, the temperature and the exact
messages, and a rerun asks only the trajectories the journal has no labels for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ceb.backends.base import ChatBackend
from ceb.config import BackendConfig, RunConfig
from ceb.data.trajectory import Trajectory
from ceb.errors import ConfigError, DataError, Problem
from ceb.pipeline.relabel import JudgmentLog, RelabelSummary, judge_stream
from ceb.stages.asking import Answer
from ceb.stages.hindsight import LLMHindsight
from ceb.stages.templates import PromptSet

__all__ = [
    "JUDGE_PREFIX",
    "LABEL_SOURCE",
    "label_sources",
    "label_stream",
    "refuse_self_judge",
    "require_unlabelled",
]

LABEL_SOURCE = "label_source"
"""The ``meta`` key naming where a trajectory's step labels came from; absent: the dataset's own labels."""

JUDGE_PREFIX = "judge:"
"""``meta.label_source`` of labels written by ``ceb label``: ``judge:<model>``."""


def label_sources(streams: Mapping[str, Sequence[Trajectory]]) -> dict[str, str]:
    """Stream name -> the source of its step labels, for each stream whose labels name one (``ceb label``'s).

    Only trajectories with at least one label count: a trajectory the judge could not label carries none.

    Raises:
        DataError: A stream mixes label sources (the dataset's own and a judge's, or two judges); names the
            stream, the first trajectory of the second source and both sources.
    """
    found: dict[str, str] = {}
    for name, trajectories in streams.items():
        first: tuple[str, Trajectory] | None = None
        for t in trajectories:
            if all(y is None for y in t.labels):
                continue
            source = str(t.meta.get(LABEL_SOURCE) or "the dataset")
            if first is None:
                first = (source, t)
            elif source != first[0]:
                path, _, line = t.source.rpartition(":")
                message = (
                    f"labelled by {source}, but trajectory {first[1].id!r} by {first[0]}: a stream's labels come "
                    "from one source (label the rest with ceb label, or keep the streams apart)"
                )
                raise DataError(
                    Problem(path or name, int(line) if line.isdigit() else 0, f"meta.{LABEL_SOURCE}", message, t.id)
                )
        if first is not None and first[0] != "the dataset":
            found[name] = first[0]
    return found


def refuse_self_judge(judge: BackendConfig, run: RunConfig) -> None:
    """Refuse a judge that is ``run``'s own critic or hindsight labeller: the same model at the same endpoint.

    Raises:
        ConfigError: The judge's model and base URL are those of one of ``run``'s critics or of its labeller
            (names which); pass ``allow_self_judge`` to :func:`label_stream`'s caller to use it anyway.
    """
    own = [(f"critic {label}".strip(), c.backend) for label, c in run.critic_configs().items()]
    own.append(("hindsight labeller", run.hindsight_backend() or run.backend))

    def where(b: BackendConfig) -> set[str]:
        return {u.rstrip("/") for u in b.base_urls}

    for role, backend in own:
        if backend.name == "offline" or backend.served_model != judge.served_model:
            continue
        if where(backend) == where(judge) or where(backend) & where(judge):
            raise ConfigError(
                f"the judge, model {judge.served_model!r} at {','.join(judge.base_urls) or 'its default endpoint'}, "
                f"is the run's own {role}: it would grade the run by its own answers. Give another judge, or "
                "--allow-self-judge to use it anyway"
            )


def require_unlabelled(trajectories: Sequence[Trajectory]) -> None:
    """Refuse a stream with a labelled step: a judge's labels beside others would mix label sources.

    Raises:
        DataError: Names the file and line (the trajectory's ``source``), the trajectory and its first labelled step.
    """
    for t in trajectories:
        labelled = [i for i, y in enumerate(t.labels) if y is not None]
        if labelled:
            path, _, line = t.source.rpartition(":")
            message = (
                "the stream has step labels already; ceb label writes a judge's labels only into a stream without "
                "any, so that no stream mixes label sources (ceb relabel adds a second label set beside them)"
            )
            lineno = int(line) if line.isdigit() else 0
            field = f"steps[{labelled[0]}].label"
            raise DataError(Problem(path or "<stream>", lineno, field, message, t.id, labelled[0]))


def _with_judge_labels(trajectory: Trajectory, labels: tuple[int, ...] | None, source: str) -> Trajectory:
    if labels is None:
        return trajectory
    steps = tuple(replace(s, label=y) for s, y in zip(trajectory.steps, labels, strict=True))
    return replace(trajectory, steps=steps, meta={**trajectory.meta, LABEL_SOURCE: source})


def _outcome(trajectory: Trajectory) -> int | None:
    """The trajectory's final outcome as the chat and inspect converters record it (``meta.label``), or ``None``."""
    value = trajectory.meta.get("label")
    return value if type(value) is int and value in (0, 1) else None


async def label_stream(
    trajectories: Sequence[Trajectory],
    chat: ChatBackend,
    prompts: PromptSet,
    out: str | Path,
    *,
    config: RunConfig,
    model: str,
    judge_name: str = "",
) -> RelabelSummary:
    """Label every step of ``trajectories`` with a judge asked the hindsight question, and write ``out``.

    Args:
        trajectories: The stream, in order; no step may carry a label yet.
        chat: The judge's endpoint.
        prompts: Templates (the hindsight prompt of each trajectory's domain family).
        out: The new stream file (the module docstring's fields).
        config: Gives the votes ``V`` (``ceb.votes``), the labeller's decoding (``hindsight``) and the
            concurrency (``backend.max_concurrency``).
        model: The judge's model name, recorded as ``judge:<model>``.
        judge_name: The judge (``backend:model``), part of each journal key.

    Returns:
        What was done; ``judged`` counts trajectories labelled, ``unreadable`` those with no valid vote.

    Raises:
        DataError: A step already has a label (:func:`require_unlabelled`); nothing is asked.
        RunError: The journal is unreadable or in use (:func:`~ceb.pipeline.relabel.judge_stream`).
        FatalBackendError: The endpoint refuses every request; nothing is written.
    """
    require_unlabelled(trajectories)
    votes = config.ceb.votes
    hindsight = LLMHindsight(chat, prompts, config.hindsight)
    settings = [votes, config.hindsight.temperature, config.hindsight.seed]
    keys = [JudgmentLog.key(judge_name, [settings, hindsight.messages(t.blinded(), _outcome(t))]) for t in trajectories]

    async def ask(trajectory: Trajectory) -> Answer[tuple[int, ...]]:
        result = await hindsight.label(trajectory.blinded(), votes, _outcome(trajectory))
        error = "; ".join(dict.fromkeys(result.errors)) or "no valid vote"
        return Answer(result.pseudo_labels or None, "", None if result.pseudo_labels else error, result.stats)

    source = f"{JUDGE_PREFIX}{model}"
    return await judge_stream(
        trajectories,
        keys,
        ask,
        lambda t, y: _with_judge_labels(t, y, source),
        out,
        concurrency=config.backend.max_concurrency,
    )
