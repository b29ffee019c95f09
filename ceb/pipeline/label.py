"""``ceb label``: a judge model's step labels for a stream that has only trajectory outcomes (chat, inspect logs).

:func:`label_stream` asks the hindsight question (paper section 3, Eq. 3) ``V`` times (``ceb.votes``) at
``hindsight.temperature``, with the final outcome appended when recorded; a step's label is the majority of valid
votes, ties productive (:func:`~ceb.stages.hindsight.majority_vote`); a trajectory with no valid vote stays
unlabelled. Labelled trajectories name ``meta.label_source = "judge:<model>"`` (:data:`LABEL_SOURCE`): metrics on
them measure agreement with the judge (:func:`label_sources`). A stream with step labels is refused, so no stream
mixes label sources; :func:`refuse_self_judge` refuses the run's own critic or labeller as judge. Resumable via
``OUT.judgments.jsonl`` (:func:`~ceb.pipeline.relabel.judge_stream`).
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
    """Stream name -> its step labels' source, for streams whose labels name one (trajectories with a label only).

    Raises:
        DataError: A stream mixes label sources (names the stream, trajectory and both sources).
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
    """Refuse a judge that is ``run``'s own critic or hindsight labeller (same model and base URL).

    Raises:
        ConfigError: Names which; ``allow_self_judge`` overrides.
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
    """Refuse a stream with a labelled step.

    Raises:
        DataError: Names the file and line, the trajectory and its first labelled step.
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
    """Label every step of ``trajectories`` by a judge's hindsight votes (module docstring), and write ``out``.

    Args:
        trajectories: The stream, in order; no step may carry a label yet.
        chat: The judge's endpoint.
        prompts: Templates (each domain's hindsight prompt).
        out: The new stream file.
        config: ``ceb.votes``, ``hindsight`` decoding and ``backend.max_concurrency``.
        model: The judge's model name, recorded as ``judge:<model>``.
        judge_name: ``backend:model``, part of each journal key.

    Raises:
        DataError: A step already has a label; nothing is asked.
        RunError: The journal is unreadable or in use.
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
