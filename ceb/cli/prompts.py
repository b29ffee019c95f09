"""``ceb prompts``: print the exact messages (or request bodies) a method would send for chosen steps of a stream."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import typer

from ceb.cli._common import out

__all__ = ["prompts"]


def prompts(
    stream: Annotated[Path, typer.Argument(help="A trajectory stream (JSONL).")],
    method: Annotated[
        str, typer.Option(help="The method whose requests to render: ceb, static, an ablation or a baseline.")
    ] = "ceb",
    trajectory: Annotated[
        list[str] | None,
        typer.Option(help="Trajectory id to render (repeatable; default: the stream's last, whose bank is fullest)."),
    ] = None,
    step: Annotated[
        list[int] | None,
        typer.Option(min=0, help="0-based step whose critic request to render (repeatable; default: every step)."),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="TOML or JSON config file (prompts, budgets, backend).")] = None,
    prompt_dir: Annotated[Path | None, typer.Option(help="Directory of replacement prompt templates.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per request, with the exact request body.")
    ] = False,
) -> None:
    """Render the requests a method would send for chosen steps, with no endpoint: an audit of the prompts.

    The stream is walked as `ceb score` walks it, offline stand-ins giving the scores and hindsight labels, so
    each chosen step sees the history and bank an offline run would. Printed per chosen step: the critic
    request(s), then, for a method with a bank, the hindsight labeller's request (its V votes differ only in
    their seed). --json prints each body as the openai backend would POST it (model MODEL when none is set).
    """
    import orjson

    from ceb.config import load_config
    from ceb.data import read_stream

    cfg = load_config(config, {"prompts": {"prompt_dir": prompt_dir}})
    trajectories = read_stream([stream])
    from ceb.pipeline.prompts import render_prompts  # the stages and the bank: once the input reads

    rendered = anyio.run(
        lambda: render_prompts(
            trajectories,
            cfg,
            method,
            trajectory_ids=trajectory or None,
            steps=set(step) if step else None,
        )
    )
    if as_json:
        for r in rendered:
            line = {"trajectory": r.trajectory, "step": r.step, "stage": r.stage, "bank_size": r.bank_size}
            out.print(orjson.dumps(line | {"body": r.body}).decode(), soft_wrap=True, highlight=False)
        return
    shown: set[tuple[str, int | None, str]] = set()
    for r in rendered:
        key = (r.trajectory, r.step, orjson.dumps(r.messages).decode())
        if key in shown:  # a hindsight vote repeats the first one's messages (its seed differs)
            continue
        shown.add(key)
        copies = sum(1 for o in rendered if (o.trajectory, o.step, o.messages) == (r.trajectory, r.step, r.messages))
        where = f"step {r.step}" if r.step is not None else "whole trajectory"
        times = f", sent {copies} times" if copies > 1 else ""
        out.print(
            f"=== {method} {r.stage} request: trajectory {r.trajectory}, {where} (bank: {r.bank_size} records{times})",
            soft_wrap=True,
            highlight=False,
        )
        for m in r.messages:
            out.print(f"--- {m['role']}", highlight=False)
            out.print(m["content"], soft_wrap=True, highlight=False)
        out.print("", highlight=False)
    if not rendered:
        out.print(f"{method} sends no request for the chosen steps", highlight=False)
