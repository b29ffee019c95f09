"""``ceb relabel``: an LLM judge's permissive labels for a stream, written as ``meta.alt_labels`` in a new file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ceb.cli._common import (
    check_new_stream,
    config_option,
    config_overrides,
    endpoint_options,
    judged_outcome,
    model_config,
    out,
    with_model,
)

__all__ = ["relabel"]


@endpoint_options()
def relabel(
    stream: Annotated[Path, typer.Argument(help="A stream file with reference actions (Mind2Web, AMEX).")],
    out_file: Annotated[
        Path, typer.Option("--out", help="The new stream file to write (the input is never modified).")
    ],
    name: Annotated[
        str,
        typer.Option(help="The judge's column in meta.alt_labels (letters, digits, '_', '-', '.')."),
    ] = "llm_judge",
    config: Annotated[Path | None, typer.Option(help="TOML or JSON config file (flags override it).")] = None,
    endpoint: dict[str, Any] | None = None,
    prompt_dir: Annotated[
        Path | None,
        config_option(
            "prompts.prompt_dir", help="Directory of replacement prompt templates (judge_system.j2, judge_user.j2)."
        ),
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace OUT if it exists.")] = False,
) -> None:
    """Relabel every step with an LLM judge (the paper's permissive policy) into a new stream file.

    One request per trajectory at temperature 0: the judge sees every step's action, the reference action and
    the reasoning, and returns one 0/1 per step, written to meta.alt_labels.NAME; `ceb report` shows metrics
    under both label sets. A stream without reference actions is refused. A reply unreadable after one re-ask
    leaves its trajectory without a judge label. Exits 1 when no trajectory got one (nothing is written).

    Judgments are recorded in OUT.judgments.jsonl as they arrive: run again with the same arguments to ask only
    the trajectories not judged yet.
    """
    import re

    from ceb.data import read_stream
    from ceb.logs import register_secret_env

    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise typer.BadParameter(f"{name!r}: use letters, digits, '_', '-' and '.'", param_hint="--name")
    cfg = model_config("relabel", config, {"backend": endpoint} | config_overrides(relabel, locals()))
    check_new_stream("relabel", stream, out_file, overwrite)
    trajectories = read_stream([stream])
    # The judge's modules (the stages, the bank, aiohttp) load once the input reads: a missing file is said at once.
    from ceb.pipeline.relabel import JudgmentLog, relabel_stream, require_references
    from ceb.stages.assembly import prompt_set

    require_references(trajectories)  # before the endpoint is opened: a refused stream costs no request
    prompts = prompt_set(cfg)
    register_secret_env(cfg.backend.api_key_env)
    out_file.parent.mkdir(parents=True, exist_ok=True)

    s = with_model(
        "relabel",
        cfg.backend,
        lambda chat: relabel_stream(
            trajectories,
            chat,
            prompts,
            out_file,
            name=name,
            concurrency=cfg.backend.max_concurrency,
            judge_name=f"{cfg.backend.name}:{cfg.backend.model or ''}",
        ),
    )
    out.print(
        f"{s.judged} of {s.trajectories} trajectories judged ({s.steps} steps labelled {name}), "
        f"{len(s.unreadable)} left without a judge label; {s.stats.requests} requests"
        + (f" ({s.reused} judged by an earlier run, not asked again)" if s.reused else "")
        + (f". New stream: {out_file}" if s.judged else ""),
        soft_wrap=True,
    )
    journal = JudgmentLog(out_file).path
    judged_outcome(s.unreadable, s.judged, out_file, journal, unit="judge label", got="a judge label")
