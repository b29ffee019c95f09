"""``ceb regenerate``'s batch (appendix "Offline Confidence-Gated Regeneration"): flag steps, re-ask the actor.

At budget ``b`` (percent) a method flags the ``k = round(b/100 * N)`` (half up) lowest-scored of the run's ``N``
labelled order-0 steps, pooled over streams; ties and unscored steps (ranked last) go in stream order. Beside the
methods: Random (a ``numpy.random.default_rng(seed)`` permutation per seed, averaged) and Oracle (label-0 steps
first). Each flagged step is re-predicted once with the fixed critique (:mod:`ceb.stages.regenerate`) and judged
against its reference (:mod:`ceb.data.references`). Records are keyed by ``(trajectory, step)`` and appended to
``regenerations.jsonl`` as they arrive, so a rerun asks only what is missing or failed. :func:`regeneration` does
all but the report (:func:`ceb.eval.regeneration.regenerate_run`).
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import IO, Any

import anyio
import numpy as np
import orjson

from ceb.backends import open_backend
from ceb.backends.base import ChatBackend
from ceb.backends.cache import ReplyCache
from ceb.config import RunConfig
from ceb.data import read_stream
from ceb.data.references import StepReference, step_references
from ceb.data.trajectory import Trajectory
from ceb.dirlock import dir_lock
from ceb.errors import ConfigError, RunError, StreamValidationError, with_path
from ceb.logs import get_logger, register_secret_env
from ceb.pipeline.relabel import require_references
from ceb.pipeline.results import StepRow
from ceb.pipeline.rundir import RunDir, write_atomic
from ceb.stages.assembly import prompt_set
from ceb.stages.base import CallStats
from ceb.stages.regenerate import Regenerator
from ceb.stages.templates import PromptSet

__all__ = [
    "DEFAULT_BUDGETS",
    "DEFAULT_SEEDS",
    "ORACLE",
    "RANDOM",
    "Regeneration",
    "RegenerationDir",
    "RegenerationPlan",
    "RegenerationSettings",
    "RegenerationSummary",
    "StepKey",
    "budget_count",
    "plan_regeneration",
    "regeneration",
]

log = get_logger(__name__)


StepKey = tuple[str, int]
"""A step: ``(trajectory id, 0-based step)``."""

DEFAULT_BUDGETS: tuple[float, ...] = (10.0, 25.0, 50.0)
"""The paper's budgets, in percent of the steps."""

DEFAULT_SEEDS = 5
"""Random's seeds (0 to 4), averaged."""

RANDOM = "random"
ORACLE = "oracle"

WHY_REFERENCES = (
    "a regenerated action is judged against the dataset's reference, so a stream without one (InterCode) cannot be "
    "regenerated"
)


def budget_count(n_steps: int, budget: float) -> int:
    """Steps flagged at ``budget`` percent of ``n_steps``: ``round(budget / 100 * n_steps)``, half up, exactly.

    ``str(budget)`` is used as a decimal so 29% of 50 (14.5) gives 15 despite float error.

    Raises:
        ValueError: ``budget`` outside [0, 100].
    """
    if not 0 <= budget <= 100:
        raise ValueError(f"a budget is a percentage in [0, 100], got {budget}")
    return min(n_steps, math.floor(Fraction(str(budget)) * n_steps / 100 + Fraction(1, 2)))


@dataclass(frozen=True, slots=True)
class RegenerationPlan:
    """Every ranking of the run's labelled steps, lowest confidence first; a budget flags a prefix.

    Attributes:
        steps: The population, in stream order.
        methods: Per method (``method`` or ``method@critic``), its ranking of ``steps``.
        random: Per seed, a permutation of ``steps``.
        oracle: Label-0 steps first, then label-1 steps, each in stream order.
    """

    steps: tuple[StepKey, ...]
    labels: Mapping[StepKey, int]
    methods: Mapping[str, tuple[StepKey, ...]]
    random: Mapping[int, tuple[StepKey, ...]]
    oracle: tuple[StepKey, ...]
    budgets: tuple[float, ...]
    seeds: tuple[int, ...]

    def flagged(self, ranking: Sequence[StepKey], budget: float) -> tuple[StepKey, ...]:
        """The steps ``ranking`` flags at ``budget``: its first :func:`budget_count` steps."""
        return tuple(ranking[: budget_count(len(self.steps), budget)])

    def rankings(self) -> Iterator[tuple[str, int | None, tuple[StepKey, ...]]]:
        """``(selection, seed, ranking)``: each method, then Random per seed, then Oracle."""
        for name, ranking in self.methods.items():
            yield name, None, ranking
        for seed, ranking in self.random.items():
            yield RANDOM, seed, ranking
        yield ORACLE, None, self.oracle

    def to_ask(self) -> tuple[StepKey, ...]:
        """Every step some selection flags at some budget, once each, in stream order."""
        largest = max(self.budgets, default=0)
        wanted = {s for _, _, ranking in self.rankings() for s in self.flagged(ranking, largest)}
        return tuple(s for s in self.steps if s in wanted)


def plan_regeneration(
    rows: Iterable[StepRow],
    trajectories: Sequence[Trajectory],
    budgets: Sequence[float] = DEFAULT_BUDGETS,
    seeds: int = DEFAULT_SEEDS,
    methods: Sequence[str] | None = None,
) -> RegenerationPlan:
    """Rank the labelled order-0 steps of a scored run per method, per Random seed and for the Oracle.

    Args:
        rows: The run's step rows; other orders are ignored.
        trajectories: The run's streams, in stream order (the tie-break).
        budgets: Budgets in percent.
        seeds: Number of Random seeds (``0 .. seeds-1``).
        methods: Only these selections (``method`` or ``method@critic``); all of the run's when ``None``.

    Raises:
        RunError: No labelled step, no method, a method not in the run, a budget outside (0, 100], or ``seeds < 1``.
    """
    if seeds < 1:
        raise RunError(f"--seeds must be at least 1, got {seeds}")
    for b in budgets:
        if not 0 < b <= 100:
            raise RunError(f"a budget is a percentage in (0, 100], got {b:g}")
    position = {(t.id, i): (n, i) for n, t in enumerate(trajectories) for i in range(len(t.steps))}
    labels: dict[StepKey, int] = {}
    scores: dict[str, dict[StepKey, float]] = {}
    for row in rows:
        if row.order != 0:
            continue
        key = (row.trajectory, row.step)
        name = f"{row.method}@{row.critic}" if row.critic else row.method
        scores.setdefault(name, {})
        if row.label is not None and key in position:
            labels[key] = row.label
        if row.score is not None and not math.isnan(row.score):
            scores[name][key] = row.score
    if not labels:
        raise RunError("the run has no labelled step of order 0 with a step of its streams; nothing to regenerate")
    if methods is not None:
        unknown = [m for m in methods if m not in scores]
        if unknown:
            raise RunError(f"no such method in the run: {', '.join(unknown)} (it has {', '.join(sorted(scores))})")
        scores = {m: scores[m] for m in methods}
    if not scores:
        raise RunError("the run has no method rows; nothing to rank")
    steps = tuple(sorted(labels, key=position.__getitem__))
    order = {s: i for i, s in enumerate(steps)}

    def rank(own: Mapping[StepKey, float]) -> tuple[StepKey, ...]:
        return tuple(sorted(steps, key=lambda s: (s not in own, own.get(s, 0.0), order[s])))

    return RegenerationPlan(
        steps=steps,
        labels=labels,
        methods={name: rank(own) for name, own in scores.items()},
        random={
            seed: tuple(steps[i] for i in np.random.default_rng(seed).permutation(len(steps))) for seed in range(seeds)
        },
        oracle=tuple(sorted(steps, key=lambda s: (labels[s], order[s]))),
        budgets=tuple(sorted(set(budgets))),  # a budget given twice is one column, not two
        seeds=tuple(range(seeds)),
    )


@dataclass(frozen=True, slots=True)
class Regeneration:
    """One regenerated step (a line of ``regenerations.jsonl``).

    Attributes:
        original_label: The step's label (0 or 1).
        element_id: The new action's element (``backend_node_id``), ``None`` when none or when it failed.
        op: The new operation (``""`` when it failed).
        label: The new action judged against the reference (:meth:`~ceb.data.references.StepReference.label`);
            ``None`` when the request failed.
        error: Why there is no new action; ``None`` on success.
        actor: The actor that regenerated it (``backend:model``); a directory holds one actor's records only.
    """

    trajectory: str
    step: int
    original_action: str
    original_label: int
    element_id: str | None
    op: str
    value: str
    label: int | None
    raw: str
    error: str | None
    requests: int
    actor: str = ""

    @property
    def key(self) -> StepKey:
        """``(trajectory, step)``."""
        return (self.trajectory, self.step)


class RegenerationDir:
    """The output directory of ``ceb regenerate`` (default :attr:`RunDir.regeneration_dir`), created by :meth:`lock`.

    Files: ``regenerations.jsonl`` (one :class:`Regeneration` a line, appended), ``regeneration.json`` and
    ``regeneration.md`` (the table), ``regeneration.png`` (the figure), ``.lock``.
    """

    RECORDS = "regenerations.jsonl"
    TABLE_JSON = "regeneration.json"
    TABLE_MD = "regeneration.md"
    FIGURE = "regeneration.png"
    LOCK = RunDir.LOCK

    __slots__ = ("path",)

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def records(self) -> Path:
        """``regenerations.jsonl``."""
        return self.path / self.RECORDS

    @property
    def table_json(self) -> Path:
        """``regeneration.json``."""
        return self.path / self.TABLE_JSON

    @property
    def table_md(self) -> Path:
        """``regeneration.md``."""
        return self.path / self.TABLE_MD

    @property
    def figure(self) -> Path:
        """``regeneration.png``."""
        return self.path / self.FIGURE

    def lock(self) -> AbstractContextManager[None]:
        """Hold the directory's lock (:func:`ceb.dirlock.dir_lock`). Raises RunError when another holds it."""
        return dir_lock(self.path, self.LOCK, what="a regeneration directory")

    def read(
        self, actor: str | None = None, trajectories: Sequence[Trajectory] | None = None
    ) -> dict[StepKey, Regeneration]:
        """The recorded regenerations, the last record of a step winning; a torn last piece is ignored.

        Args:
            actor: When given, every record must be this actor's.
            trajectories: When given, a record of one of their steps must have regenerated the action that step logs
                (so another stream with the same ids is never taken for this one).

        Raises:
            RunError: A whole line is not a record, or is another actor's or another action's (names file and line).
        """
        if not self.records.is_file():
            return {}
        logged = {(t.id, i): s.action for t in trajectories or () for i, s in enumerate(t.steps)}
        lines = self.records.read_bytes().split(b"\n")
        if lines.pop():  # the piece after the last newline: empty unless a write was cut short
            log.warning("ignoring a cut last line", file=str(self.records), line=len(lines) + 1)
        found: dict[StepKey, Regeneration] = {}
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = Regeneration(**orjson.loads(line))
            except (orjson.JSONDecodeError, TypeError) as exc:
                raise RunError(f"{self.records}:{n}: not a regeneration record ({exc})") from exc
            if actor is not None and record.actor != actor:
                raise RunError(
                    f"{self.records}:{n}: regenerated by actor {record.actor!r}, not {actor!r}; give another --out "
                    "for another actor"
                )
            if record.key in logged and record.original_action != logged[record.key]:
                raise RunError(
                    f"{self.records}:{n}: step {record.step} of {record.trajectory!r} was regenerated from another "
                    "logged action than the run's (another run's records); give another --out for this run"
                )
            found[record.key] = record
        return found

    def appender(self) -> IO[bytes]:
        """``regenerations.jsonl`` opened for appending (the caller closes it), a torn last line cut off first.

        Raises:
            OSError: The file cannot be opened or cut (names it).
        """
        try:
            if self.records.is_file():
                data = self.records.read_bytes()
                keep = data.rfind(b"\n") + 1
                if keep < len(data):
                    os.truncate(self.records, keep)
            return self.records.open("ab")
        except OSError as exc:
            raise with_path(exc, self.records) from exc

    def write_table(self, doc: Mapping[str, Any], markdown: str) -> None:
        """Write ``regeneration.json`` and ``regeneration.md``, each atomically."""
        write_atomic(self.table_json, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        write_atomic(self.table_md, markdown.encode())


@dataclass(frozen=True, slots=True)
class RegenerationSummary:
    """What :func:`regeneration` did: what its report is drawn from.

    Attributes:
        out: The output directory (held while the report is written).
        flagged: Distinct steps some selection flags.
        reused: Of those, steps answered by an earlier run (read from ``regenerations.jsonl``).
        failed: Steps without a new action after this run (endpoint failure or unreadable reply).
        about: ``machine``, ``backend`` (the actor and its endpoint) and ``command``, for the table and figure.
    """

    plan: RegenerationPlan
    out: RegenerationDir
    flagged: int
    reused: int
    asked: int
    failed: int
    stats: CallStats = field(default_factory=CallStats)
    records: Mapping[StepKey, Regeneration] = field(default_factory=dict)
    about: Mapping[str, str] = field(default_factory=dict)


async def _regenerate_steps(
    plan: RegenerationPlan,
    trajectories: Sequence[Trajectory],
    references: Mapping[StepKey, StepReference],
    recorded: Mapping[StepKey, Regeneration],
    chat: ChatBackend,
    prompts: PromptSet,
    out: RegenerationDir,
    actor: str,
    concurrency: int,
) -> RegenerationSummary:
    """Ask the actor once for every flagged step not yet ``recorded`` (or failed), judging and recording each reply."""
    by_id = {t.id: t for t in trajectories}
    records = dict(recorded)
    flagged = plan.to_ask()
    pending = [s for s in flagged if s not in records or records[s].error is not None]
    reused = len(flagged) - len(pending)
    regenerator = Regenerator(chat, prompts)
    stats = CallStats()
    work = iter(pending)

    with out.appender() as sink:

        async def one(key: StepKey) -> None:
            nonlocal stats
            trajectory = by_id[key[0]]
            step = trajectory.steps[key[1]]
            answer = await regenerator.regenerate(trajectory, key[1])
            stats += answer.stats
            action = answer.value
            record = Regeneration(
                trajectory=key[0],
                step=key[1],
                original_action=step.action,
                original_label=plan.labels[key],
                element_id=action.element_id if action else None,
                op=action.op if action else "",
                value=action.value if action else "",
                label=references[key].label(action.element_id, action.op) if action else None,
                raw=answer.raw,
                error=answer.error,
                requests=answer.stats.requests,
                actor=actor,
            )
            if answer.error is not None:
                log.warning("no regenerated action", trajectory=key[0], step=key[1], reason=answer.error)
            sink.write(orjson.dumps(asdict(record)) + b"\n")
            sink.flush()
            records[key] = record

        async def worker() -> None:
            for key in work:  # one shared iterator: `concurrency` requests in flight, no task per step
                await one(key)

        async with anyio.create_task_group() as tg:
            for _ in range(min(concurrency, len(pending))):
                tg.start_soon(worker)
    failed = sum(1 for s in flagged if records[s].error is not None)
    return RegenerationSummary(
        plan=plan,
        out=out,
        flagged=len(flagged),
        reused=reused,
        asked=len(pending),
        failed=failed,
        stats=stats,
        records={s: records[s] for s in flagged},
    )


@dataclass(frozen=True, slots=True)
class RegenerationSettings:
    """What ``ceb regenerate`` is asked (its options, documented there).

    Attributes:
        config: ``backend`` is the actor, with ``cache`` and ``prompts``.
        out: The output directory; the run's :attr:`~ceb.pipeline.rundir.RunDir.regeneration_dir` when ``None``.
        budgets, seeds, methods: As :func:`plan_regeneration` takes them (``None``: every method of the run).
        tasks, elements: As :func:`~ceb.data.references.step_references` takes them.
        command: The command line that reproduces the run (never an API key).
    """

    run_dir: Path
    config: RunConfig
    out: Path | None = None
    budgets: tuple[float, ...] = DEFAULT_BUDGETS
    seeds: int = DEFAULT_SEEDS
    methods: tuple[str, ...] | None = None
    tasks: tuple[Path, ...] | None = None
    elements: Path | None = None
    command: str = ""


@contextmanager
def regeneration(
    settings: RegenerationSettings, *, note: Callable[[str], None] | None = None
) -> Iterator[RegenerationSummary]:
    """Read the run, plan, ask the actor (``settings.config.backend``, cached) once per flagged step; yield the outcome.

    The ``with`` body (:func:`ceb.eval.regeneration.regenerate_run`) runs with the output directory still locked.
    ``note`` receives what is wrong with a run whose rows are still usable; else it is logged.

    Raises:
        RunError: The run or its streams cannot be read; no stream, labelled step or such method; the output
            directory is in use or holds another actor's or run's records (nothing is asked).
        DataError: A stream without reference actions, or a reference not found (nothing is asked).
        ConfigError: The backend has no model.
        FatalBackendError: The endpoint refuses every request; what was recorded stays.
        OSError: The output directory cannot be written.
    """
    cfg = settings.config
    run = RunDir(settings.run_dir)
    damage = run.require_readable()  # the rows of a run killed mid-way, or damaged since, are no base to regenerate on
    if damage is not None and note is not None:
        note(damage)
    elif damage is not None:
        log.warning(damage, run=str(run.path))
    files = run.recorded_stream_files()
    if not files:
        raise RunError(f"{settings.run_dir}: the run recorded no stream; nothing to regenerate")
    try:
        trajectories = read_stream([f for names in files.values() for f in names])
    except StreamValidationError as exc:  # its message says "nothing was scored", on several lines
        more = f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else ""
        raise RunError(
            f"{exc.problem}{more}; the run's stream files, as {run.config_file} records them (a relative path is "
            "read from the current directory: run from the one `ceb score` ran in)"
        ) from exc
    require_references(trajectories, why=WHY_REFERENCES)  # before anything is asked: a refusal costs no request
    plan = plan_regeneration(run.step_rows(), trajectories, settings.budgets, settings.seeds, settings.methods)
    wanted = {s[0] for s in plan.steps}
    in_plan = [t for t in trajectories if t.id in wanted]
    references = step_references(in_plan, settings.tasks, settings.elements)
    prompts = prompt_set(cfg)
    register_secret_env(cfg.backend.api_key_env)
    target = RegenerationDir(settings.out if settings.out is not None else run.regeneration_dir)
    actor = f"{cfg.backend.name}:{cfg.backend.model or ''}"

    async def ask(recorded: Mapping[StepKey, Regeneration]) -> RegenerationSummary:
        cache = ReplyCache.open(cfg.cache)
        try:
            chat = open_backend(cfg.backend, cache=cache)
            if chat is None:
                raise ConfigError(f"ceb regenerate needs an actor model: backend {cfg.backend.name!r} has none")
            async with chat:
                await chat.preflight()
                return await _regenerate_steps(
                    plan, in_plan, references, recorded, chat, prompts, target, actor, cfg.backend.max_concurrency
                )
        finally:
            if cache is not None:
                cache.close()

    with target.lock():
        recorded = target.read(actor, in_plan)  # another actor's or run's records: refused before asking
        summary = anyio.run(ask, recorded)
        url = cfg.backend.base_url
        shown_url = ",".join(url) if isinstance(url, tuple) else url or "-"
        about = {
            "machine": f"{platform.node()}, {os.cpu_count()} CPUs, {platform.system()} {platform.machine()}",
            "backend": f"{cfg.backend.name} {cfg.backend.model or '(default model)'} at {shown_url}",
            "command": settings.command,
        }
        yield replace(summary, about=about)
