"""``ceb regenerate``: offline confidence-gated regeneration of a scored run's lowest-confidence steps."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ceb.cli._common import (
    EXIT_FAILED,
    config_option,
    config_overrides,
    endpoint_options,
    err,
    model_config,
    out,
)

if TYPE_CHECKING:
    from ceb.pipeline.regenerate import RegenerationSettings

__all__ = ["regenerate"]


@endpoint_options()
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
    endpoint: dict[str, Any] | None = None,
    prompt_dir: Annotated[
        Path | None,
        config_option(
            "prompts.prompt_dir",
            help="Directory of replacement prompt templates (regenerate_system.j2, regenerate_user.j2).",
        ),
    ] = None,
) -> None:
    """Re-predict each method's lowest-confidence steps once with a fixed critique and re-measure correctness.

    The paper's appendix "Offline Confidence-Gated Regeneration". For each method and budget b, the
    lowest-confidence b% of the labelled steps (order 0) are flagged (ties: the earlier step; an unscored step
    ranks last). The actor re-predicts each flagged step once, told "A reviewer flagged this step; reconsider.",
    and the new action is judged against the step's reference by the converter's rule. Each distinct step is
    asked once and recorded in regenerations.jsonl (a rerun asks only what is missing or failed). Writes
    regeneration.md and .json (per-step positive rate and mean per-task step accuracy per method and budget,
    Random averaged over seeds, Oracle fixing the wrong steps first) and regeneration.png. Mind2Web and AMEX
    streams can be judged (references from --tasks, --elements); a stream without references is refused. Exits
    1 when no flagged step got a regenerated action.
    """
    from ceb.eval.regeneration import regenerate_run
    from ceb.eval.render import to_markdown
    from ceb.pipeline.regenerate import DEFAULT_BUDGETS, RegenerationSettings

    cfg = model_config("regenerate", config, {"backend": endpoint} | config_overrides(regenerate, locals()))
    settings = RegenerationSettings(
        run_dir=run_dir,
        config=cfg,
        out=out_dir,
        budgets=tuple(budget) if budget else DEFAULT_BUDGETS,
        seeds=seeds,
        methods=tuple(method) if method is not None else None,
        tasks=tuple(tasks) if tasks is not None else None,
        elements=elements,
    )
    settings = replace(settings, command=_command(settings, config, prompt_dir))
    done = regenerate_run(settings, note=lambda text: err.print(f"note: {text}", soft_wrap=True))
    s, target, methods = done.summary, done.summary.out, done.summary.plan.methods
    out.print(
        f"{s.flagged} distinct steps flagged over {len(methods)} methods, {len(settings.budgets)} budgets and "
        f"{seeds} random seeds: {s.reused} from an earlier run, {s.asked} asked ({s.stats.requests} requests), "
        f"{s.failed} without a regenerated action. Table: {target.table_md}; figure: {target.figure}",
        soft_wrap=True,
    )
    out.print(to_markdown(done.table), soft_wrap=True, highlight=False, markup=False)
    if s.flagged and s.failed == s.flagged:
        err.print("error: no flagged step got a regenerated action (see regenerations.jsonl)", soft_wrap=True)
        raise typer.Exit(EXIT_FAILED)


def _command(settings: RegenerationSettings, config: Path | None, prompt_dir: Path | None) -> str:
    """The command line that reproduces this run (its settings, never an API key)."""
    import shlex

    words = ["ceb", "regenerate", str(settings.run_dir)]
    if settings.out is not None:
        words += ["--out", str(settings.out)]
    for b in settings.budgets:
        words += ["--budget", f"{b:g}"]
    words += ["--seeds", str(settings.seeds)]
    for m in settings.methods or ():
        words += ["--method", m]
    for t in settings.tasks or ():
        words += ["--tasks", str(t)]
    for flag, path in (("--elements", settings.elements), ("--config", config), ("--prompt-dir", prompt_dir)):
        if path is not None:  # each changes which reference judges or what the actor is asked
            words += [flag, str(path)]
    backend = settings.config.backend
    words += ["--backend", backend.name]
    if backend.base_url:
        url = backend.base_url
        words += ["--base-url", url if isinstance(url, str) else ",".join(url)]
    if backend.model:
        words += ["--model", backend.model]
    return shlex.join(words)
