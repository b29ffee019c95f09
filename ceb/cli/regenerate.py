"""``ceb regenerate``: offline confidence-gated regeneration of a scored run's lowest-confidence steps."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import typer

from ceb.cli._common import (
    ENDPOINT_PANEL,
    EXIT_FAILED,
    ApiKeyEnv,
    BaseUrl,
    MaxConcurrency,
    ModelName,
    err,
    fail,
    model_config,
    out,
)

__all__ = ["regenerate"]


def regenerate(
    run_dir: Annotated[Path, typer.Argument(help="A run directory scored by `ceb score` or `ceb grid`.")],
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Output directory (default: RUN_DIR/regeneration); a rerun resumes there."),
    ] = None,
    budget: Annotated[
        list[float] | None,
        typer.Option("--budget", help="Regeneration budget in percent of the steps; repeat for more (10 25 50)."),
    ] = None,
    seeds: Annotated[int, typer.Option(min=1, max=1000, help="Random selection's seeds, averaged.")] = 5,
    method: Annotated[
        list[str] | None,
        typer.Option("--method", help="Only this method (METHOD or METHOD@CRITIC); repeat for more (default: all)."),
    ] = None,
    tasks: Annotated[
        list[Path] | None,
        typer.Option(
            "--tasks",
            help="Mind2Web task files or folders the streams were converted from (default: each trajectory's "
            "meta.file).",
        ),
    ] = None,
    elements: Annotated[
        Path | None,
        typer.Option(
            "--elements",
            help="AMEX element_anno folder the streams were converted with (default: element_anno beside each "
            "trajectory's episode file, as ceb convert amex finds it).",
        ),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="TOML or JSON config file (flags override it).")] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            help="The actor: openai (an endpoint) or vllm (a vLLM engine in this process) "
            "(default: the config's backend, else openai).",
            rich_help_panel=ENDPOINT_PANEL,
        ),
    ] = None,
    base_url: BaseUrl = None,
    model: ModelName = None,
    api_key_env: ApiKeyEnv = None,
    max_concurrency: MaxConcurrency = None,
    prompt_dir: Annotated[
        Path | None,
        typer.Option(help="Directory of replacement prompt templates (regenerate_system.j2, regenerate_user.j2)."),
    ] = None,
) -> None:
    """Re-predict each method's lowest-confidence steps once with a fixed critique and re-measure correctness.

    The paper's appendix "Offline Confidence-Gated Regeneration". For each method of the run and budget b, the
    lowest-confidence b% of the labelled steps (order 0) are flagged (ties: the earlier step in stream order;
    a step the method has no score for ranks after every scored one). The actor re-predicts each flagged step
    once, told "A reviewer flagged this step; reconsider.", with a JSON schema fixing an element of the state,
    an operation and a value; the new action is judged against the step's reference by the converter's rule.
    Each distinct step is asked once, whichever methods, budgets and seeds flag it, and recorded in
    regenerations.jsonl as it arrives (a rerun asks only what is missing or failed). Writes regeneration.md and
    .json (per-step positive rate and mean per-task step accuracy per method and budget, Random averaged over
    seeds, Oracle regenerating the wrong steps first) and regeneration.png. Mind2Web and AMEX streams can be
    judged (their references are read again from the converter's input: --tasks, --elements); a stream without
    reference actions is refused. Exits 1 when no flagged step got a regenerated action.
    """
    import os
    import platform

    from ceb.backends import open_backend
    from ceb.backends.cache import ReplyCache
    from ceb.data import read_stream
    from ceb.data.references import step_references
    from ceb.errors import StreamValidationError
    from ceb.eval.plots import plot_regeneration, save_figure
    from ceb.eval.regeneration import regeneration_curves, regeneration_doc, regeneration_table
    from ceb.eval.tables import to_markdown
    from ceb.logs import register_secret_env
    from ceb.pipeline.regenerate import (
        DEFAULT_BUDGETS,
        WHY_REFERENCES,
        RegenerationDir,
        RegenerationSummary,
        plan_regeneration,
        regenerate_steps,
    )
    from ceb.pipeline.relabel import require_references
    from ceb.pipeline.rundir import RunDir
    from ceb.stages.assembly import prompt_set

    cfg = model_config(
        "regenerate",
        config,
        backend=backend,
        base_url=base_url,
        model=model,
        api_key_env=api_key_env,
        max_concurrency=max_concurrency,
        prompt_dir=prompt_dir,
    )
    run = RunDir(run_dir)
    note = run.require_readable()  # the rows of a run killed mid-way, or damaged since, are no base to regenerate on
    if note is not None:
        err.print(f"note: {note}", soft_wrap=True)
    files = run.recorded_stream_files()
    if not files:
        raise fail(f"{run_dir}: the run recorded no stream; nothing to regenerate")
    try:
        trajectories = read_stream([f for names in files.values() for f in names])
    except StreamValidationError as exc:  # its message says "nothing was scored", on several lines
        more = f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else ""
        raise fail(
            f"{exc.problem}{more}; the run's stream files, as {run.config_file} records them (a relative path is "
            "read from the current directory: run from the one `ceb score` ran in)"
        ) from exc
    require_references(trajectories, why=WHY_REFERENCES)  # before anything is asked: a refusal costs no request
    budgets = tuple(budget) if budget else DEFAULT_BUDGETS
    plan = plan_regeneration(run.step_rows(), trajectories, budgets, seeds, method)
    wanted = {s[0] for s in plan.steps}
    in_plan = [t for t in trajectories if t.id in wanted]
    references = step_references(in_plan, tasks, elements)
    prompts = prompt_set(cfg)
    register_secret_env(cfg.backend.api_key_env)
    target = RegenerationDir(out_dir if out_dir is not None else run.regeneration_dir)
    actor = f"{cfg.backend.name}:{cfg.backend.model or ''}"

    async def ask() -> RegenerationSummary:
        cache = ReplyCache.open(cfg.cache)
        try:
            chat = open_backend(cfg.backend, cache=cache)
            if chat is None:
                raise fail(f"ceb regenerate needs an actor model: backend {cfg.backend.name!r} has none")
            async with chat:
                await chat.preflight()
                return await regenerate_steps(
                    plan,
                    in_plan,
                    references,
                    chat,
                    prompts,
                    target,
                    actor=actor,
                    concurrency=cfg.backend.max_concurrency,
                )
        finally:
            if cache is not None:
                cache.close()

    with target.lock():
        target.read(actor, in_plan)  # another actor's or run's records: refused before the endpoint is opened
        s = anyio.run(ask)
        curves = regeneration_curves(plan, s.records)
        url = cfg.backend.base_url
        shown_url = ",".join(url) if isinstance(url, tuple) else url or "-"
        command = _command(
            run_dir,
            out_dir,
            budgets,
            seeds,
            method,
            tasks,
            elements,
            config,
            prompt_dir,
            cfg.backend.name,
            url,
            cfg.backend.model,
        )
        about = {
            "machine": f"{platform.node()}, {os.cpu_count()} CPUs, {platform.system()} {platform.machine()}",
            "backend": f"{cfg.backend.name} {cfg.backend.model or '(default model)'} at {shown_url}",
            "command": command,
        }
        notes = (
            f"{len(plan.steps)} labelled steps in {len({k[0] for k in plan.steps})} trajectories; Random averaged "
            f"over {seeds} seeds (± std); {s.flagged} distinct steps flagged, {s.flagged - s.failed} regenerated, "
            f"{s.failed} kept as logged (no readable action).",
            f"Machine: {about['machine']}. Actor: {about['backend']}.",
            f"Command: {command}",
        )
        table = regeneration_table(curves, notes=notes)
        target.write_table(regeneration_doc(plan, curves, about), to_markdown(table))
        figure = plot_regeneration(
            curves,
            title="Offline confidence-gated regeneration",
            footer=f"{about['machine']} | actor: {about['backend']} | {command}",
        )
        save_figure(figure, target.figure.with_suffix(""))
    out.print(
        f"{s.flagged} distinct steps flagged over {len(plan.methods)} methods, {len(budgets)} budgets and "
        f"{seeds} random seeds: {s.reused} from an earlier run, {s.asked} asked ({s.stats.requests} requests), "
        f"{s.failed} without a regenerated action. Table: {target.table_md}; figure: {target.figure}",
        soft_wrap=True,
    )
    out.print(to_markdown(table), soft_wrap=True, highlight=False, markup=False)
    if s.flagged and s.failed == s.flagged:
        err.print("error: no flagged step got a regenerated action (see regenerations.jsonl)", soft_wrap=True)
        raise typer.Exit(EXIT_FAILED)


def _command(
    run_dir: Path,
    out_dir: Path | None,
    budgets: tuple[float, ...],
    seeds: int,
    methods: list[str] | None,
    tasks: list[Path] | None,
    elements: Path | None,
    config: Path | None,
    prompt_dir: Path | None,
    backend: str,
    base_url: str | tuple[str, ...] | None,
    model: str | None,
) -> str:
    """The command line that reproduces this run (its settings, never an API key)."""
    import shlex

    words = ["ceb", "regenerate", str(run_dir)]
    if out_dir is not None:
        words += ["--out", str(out_dir)]
    for b in budgets:
        words += ["--budget", f"{b:g}"]
    words += ["--seeds", str(seeds)]
    for m in methods or ():
        words += ["--method", m]
    for t in tasks or ():
        words += ["--tasks", str(t)]
    for flag, path in (("--elements", elements), ("--config", config), ("--prompt-dir", prompt_dir)):
        if path is not None:  # each changes which reference judges or what the actor is asked
            words += [flag, str(path)]
    words += ["--backend", backend]
    if base_url:
        words += ["--base-url", base_url if isinstance(base_url, str) else ",".join(base_url)]
    if model:
        words += ["--model", model]
    return shlex.join(words)
