"""``ceb label``: a judge model's step labels for a stream without any, written as each step's label in a new file."""

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

__all__ = ["label"]


@endpoint_options()
def label(
    stream: Annotated[Path, typer.Argument(help="A stream without step labels (ceb convert chat or inspect).")],
    out_file: Annotated[
        Path, typer.Option("--out", help="The new stream file to write (the input is never modified).")
    ],
    config: Annotated[
        Path | None,
        typer.Option(
            help="The run's TOML or JSON config: its critic and hindsight endpoints are refused as the judge, its "
            "ceb.votes and hindsight section decide the votes (flags override its backend for the judge)."
        ),
    ] = None,
    endpoint: dict[str, Any] | None = None,
    prompt_dir: Annotated[
        Path | None,
        config_option("prompts.prompt_dir", help="Directory of replacement prompt templates (hindsight_*.j2)."),
    ] = None,
    allow_self_judge: Annotated[
        bool,
        typer.Option(
            "--allow-self-judge",
            help="Accept a judge that is the run's own critic or hindsight endpoint and model (refused otherwise).",
        ),
    ] = False,
    overwrite: Annotated[bool, typer.Option(help="Replace OUT if it exists.")] = False,
) -> None:
    """Label every step productive or not with a judge model, for calibration on your own logs.

    The judge is asked the paper's hindsight question over each whole trajectory (with its final outcome,
    meta.label, when the stream records one): one 0/1 per step, V times (ceb.votes) at the hindsight temperature;
    a step's label is the majority of the valid votes (a tie is productive), its source meta.label_source =
    judge:MODEL, which `ceb report` names as not ground truth. A stream with step labels is refused, as is a judge
    that is the run's own critic or labeller (unless --allow-self-judge). A trajectory with no valid vote is left
    unlabelled. Exits 1 when no trajectory got labels (nothing is written).

    Labels are recorded in OUT.judgments.jsonl as they arrive: run again with the same arguments (and
    --overwrite when OUT was written) to ask only the trajectories not labelled yet.
    """
    from ceb.config import load_config
    from ceb.data import read_stream
    from ceb.logs import register_secret_env

    cfg = model_config("label", config, {"backend": endpoint} | config_overrides(label, locals()))
    check_new_stream("label", stream, out_file, overwrite)
    trajectories = read_stream([stream])
    from ceb.pipeline.label import label_stream, refuse_self_judge, require_unlabelled
    from ceb.pipeline.relabel import JudgmentLog
    from ceb.stages.assembly import prompt_set

    require_unlabelled(trajectories)  # before the endpoint is opened: a refused stream or judge costs no request
    if not allow_self_judge:
        refuse_self_judge(cfg.backend, load_config(config))
    judge = cfg.backend.served_model
    prompts = prompt_set(cfg)
    register_secret_env(cfg.backend.api_key_env)
    out_file.parent.mkdir(parents=True, exist_ok=True)

    s = with_model(
        "label",
        cfg.backend,
        lambda chat: label_stream(
            trajectories,
            chat,
            prompts,
            out_file,
            config=cfg,
            model=judge,
            judge_name=f"{cfg.backend.name}:{judge}",
        ),
    )
    out.print(
        f"{s.judged} of {s.trajectories} trajectories labelled by judge:{judge} ({s.steps} steps, majority of "
        f"{cfg.ceb.votes} votes), {len(s.unreadable)} left unlabelled; {s.stats.requests} requests"
        + (f" ({s.reused} labelled by an earlier run, not asked again)" if s.reused else "")
        + (f". New stream: {out_file}" if s.judged else ""),
        soft_wrap=True,
    )
    journal = JudgmentLog(out_file).path
    judged_outcome(s.unreadable, s.judged, out_file, journal, unit="judge labels", got="judge labels")
