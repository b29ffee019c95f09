"""``ceb score``: score streams with each method and print the metrics; :func:`score_and_report` also runs grids."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from ceb.cli._common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    Limit,
    ShardOption,
    config_option,
    config_overrides,
    endpoint_options,
    engine_words,
    err,
    fail,
    field_options,
    option_group,
    out,
    parse_shard,
)
from ceb.cli._options import split_list
from ceb.cli.metrics import REFERENCE_HELP, print_metrics
from ceb.errors import reported_error

__all__ = ["score", "score_and_report", "sigterm_as_ctrl_c"]


_ENGINE = "vLLM engine (--backend vllm)"
_METHOD = "CEB and prompts"
_ENGINE_FIELDS = (
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "dtype",
    "max_model_len",
    "load_format",
)
_BACKEND = "offline (no model), openai (an endpoint) or vllm (a vLLM engine in this process)"


@option_group("engine", "backend.engine", field_options("backend.engine", _ENGINE_FIELDS, _ENGINE))
@endpoint_options(_BACKEND, base=None, panel=None)
def score(
    streams: Annotated[
        list[str],
        typer.Argument(
            help="Trajectory JSONL files, one stream each, named by the file's stem; NAME=FILE names it; "
            "a.jsonl+b.jsonl joins files into one stream (when no file has that whole name)."
        ),
    ],
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="New directory for the run's results (or use --resume).")
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="Continue the run in this directory where it stopped: finished steps are kept, its bank is "
            "restored, and changed streams or settings are refused, as is a directory that holds no run. Its "
            "recorded config is the base; flags override it."
        ),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="TOML or JSON config file (flags override it).")] = None,
    endpoint: dict[str, Any] | None = None,
    methods: Annotated[
        str | None, config_option("methods", "--methods", help="Comma-separated methods", convert=split_list)
    ] = None,
    engine: dict[str, Any] | None = None,
    engine_args: Annotated[
        str | None,
        config_option(
            "backend.engine.args",
            help="Further `vllm serve` flags in one string, e.g. '--max-logprobs 20'.",
            base=False,
            convert=engine_words,
            rich_help_panel=_ENGINE,
        ),
    ] = None,
    votes: Annotated[
        int | None, config_option("ceb.votes", "--votes", "-V", help="Hindsight votes V", rich_help_panel=_METHOD)
    ] = None,
    k: Annotated[
        int | None, config_option("ceb.k", "--top-k", "-k", help="Precedents per class k", rich_help_panel=_METHOD)
    ] = None,
    tau: Annotated[
        float | None,
        config_option("hindsight.temperature", "--tau", help="Hindsight temperature (tau)", rich_help_panel=_METHOD),
    ] = None,
    prompt_dir: Annotated[
        Path | None,
        config_option("prompts.prompt_dir", help="Directory of replacement prompt templates.", rich_help_panel=_METHOD),
    ] = None,
    bins: Annotated[int | None, config_option("ece_bins", "--bins", help="ECE bins")] = None,
    orders: Annotated[
        int | None,
        config_option("orders", "--orders", help="Stream orders R: the input order plus R-1 seeded permutations"),
    ] = None,
    speculation: Annotated[
        int | None,
        config_option(
            "speculation",
            "--speculation",
            min=0,
            help="Trajectories a bank lane scores ahead of its bank, each step kept only when its request is the "
            "strict order's; 0: the strict order",
        ),
    ] = None,
    limit: Limit = None,
    shard: ShardOption = None,
    overwrite: Annotated[bool, typer.Option(help="Replace the results of an earlier run in OUT.")] = False,
    reference: Annotated[bool, typer.Option("--reference", help=REFERENCE_HELP)] = False,
) -> None:
    """Score every step of every stream with each method, then print ECE, Brier and AUROC.

    Each stream is scored in order (a trajectory sees only earlier ones' bank records); streams and methods run
    concurrently. OUT gets scores.jsonl (a row per step and method), hindsight.jsonl, banks/, config.json and
    metrics.json as they finish. An interrupted run continues with --resume OUT (a second Ctrl-C aborts at
    once). With --shard i/N only that shard's lanes are scored; `ceb merge` joins the parts.
    """
    from ceb.config import load_config
    from ceb.data import read_stream
    from ceb.data.streams import parse_stream_specs

    overrides = config_overrides(score, locals())
    overrides["backend"] |= endpoint or {}
    overrides["backend"]["engine"] |= engine or {}
    part = parse_shard(shard)
    if resume is not None:
        if out_dir is not None and out_dir != resume:
            raise typer.BadParameter("--out and --resume name different directories; give one of them")
        out_dir = resume
    if out_dir is None:
        raise typer.BadParameter("give --out DIR for a new run, or --resume DIR to continue one")
    if resume is not None:
        from ceb.pipeline.rundir import RunDir  # here: it loads the bank and scikit-learn, a missing file need not

        RunDir(resume).require_run()  # before reading the streams: a directory with no run is refused at once
    if resume is not None and config is None:
        # The run's own effective config is the base of its resume; flags still override it.
        cfg = load_config(overrides=overrides, base=RunDir(resume).recorded_config().model_dump(mode="json"))
    else:
        cfg = load_config(config, overrides)
    data = {name: read_stream(paths) for name, paths in parse_stream_specs(streams).items()}
    score_and_report(
        data, cfg, out_dir, overwrite=overwrite, resume=resume is not None, shard=part, reference=reference
    )


@contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """Within the block SIGTERM, and SIGINT even where it was ignored (``nohup``), stop the run as Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # SIGTERM is relayed as SIGINT, so anyio's runner cancels the main task (raising KeyboardInterrupt here could
    # land inside the loop's machinery and hang). A background process has SIGINT ignored: restored for the block.
    sigint = signal.getsignal(signal.SIGINT)
    if sigint is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: signal.raise_signal(signal.SIGINT))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if sigint is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def score_and_report(
    data: dict[str, Any],
    cfg: Any,
    run_dir: Path,
    *,
    overwrite: bool,
    resume: bool,
    resume_hint: str | None = None,
    shard: Any = None,
    reference: bool = False,
) -> None:
    """Score ``data`` into ``run_dir`` under ``cfg``, then print metrics and a summary (``ceb score``, ``ceb grid``).

    Args:
        data: Stream name -> its trajectories, in stream order.
        cfg: The run's effective :class:`~ceb.config.RunConfig`.
        run_dir: The run directory (:func:`ceb.pipeline.run_scoring` writes it).
        overwrite: Replace an earlier run's results there.
        resume: Continue the run there.
        resume_hint: How to continue after an interruption (default: ``--resume RUN_DIR`` of ``ceb score``).
        shard: Score only this :class:`~ceb.pipeline.shard.Shard` of the lanes (``None``: all).
        reference: Print the reference rows per stream (:func:`~ceb.cli.metrics.print_metrics`).

    Raises:
        CEBError: The run failed.
        typer.Exit: ``EXIT_INTERRUPTED`` on Ctrl-C or SIGTERM; ``EXIT_FAILED`` when steps were scored and none got
            a score; a file error (:func:`~ceb.cli._common.fail`).
    """
    from ceb.eval import run_metrics, write_metrics
    from ceb.logs import register_secret_env
    from ceb.pipeline import run_scoring
    from ceb.pipeline.provenance import scored_by
    from ceb.pipeline.rundir import RunDir
    from ceb.pipeline.runner import progress_callbacks
    from ceb.progress import Progress

    register_secret_env(cfg.backend.api_key_env)  # its value is redacted from every log line from now on
    if cfg.hindsight.api_key_env is not None:
        register_secret_env(cfg.hindsight.api_key_env)
    started = time.perf_counter()
    progress = Progress("scoring", None, "steps")
    on_row, on_start = progress_callbacks(progress)

    scores = RunDir(run_dir).scores
    again = resume_hint or f"the same command and --resume {run_dir}"
    try:
        with sigterm_as_ctrl_c(), progress:
            summary = anyio.run(
                lambda: run_scoring(
                    data,
                    cfg,
                    run_dir,
                    on_row=on_row,
                    on_start=on_start,
                    overwrite=overwrite,
                    resume=resume,
                    shard=shard,
                )
            )
        metrics = run_metrics(run_dir, n_bins=cfg.ece_bins)
        write_metrics(run_dir, metrics)
    except BaseException as exc:  # Ctrl-C (or SIGTERM) may land inside a task and reach here in a group
        interrupted = isinstance(exc, KeyboardInterrupt) or (
            isinstance(exc, BaseExceptionGroup) and exc.subgroup(KeyboardInterrupt) is not None
        )
        if interrupted:
            err.print(f"interrupted: every finished step is in {scores}; continue with {again}")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        fault = reported_error(exc)
        if isinstance(fault, OSError) and RunDir(run_dir).started:  # a full disk, say: the resume carries on
            raise fail(
                fault, path=run_dir, kept=f"every finished step is kept in {scores}", then=f"continue with {again}"
            ) from exc
        if isinstance(fault, OSError):  # before the run was recorded: there is nothing to resume
            raise fail(fault, path=run_dir) from exc
        raise
    print_metrics(metrics, run_dir=Path(run_dir), reference=reference)
    wall = time.perf_counter() - started
    s = summary
    out.print(
        f"{s.steps_scored} steps scored, {s.steps_failed} failed, {s.steps_clipped} clipped; "
        f"{s.trajectories_voted} trajectories voted in hindsight ({s.votes_failed} failed votes, "
        f"{s.trajectories_not_banked} not banked"
        + (f", {s.steps_abstained} steps abstained" if s.steps_abstained else "")
        + f"); {s.requests} requests"
        + (f" ({s.discarded_requests} asked ahead of the bank and discarded)" if s.discarded_requests else "")
        + "; "
        + (f"{s.steps_reused} step rows copied from another stream order; " if s.steps_reused else "")
        + (f"{s.steps_resumed} steps kept from before the resume; " if resume else "")
        + f"wall time {wall:.1f} s. Results in {run_dir}/"
    )
    if s.cache is not None:
        c = s.cache
        out.print(
            f"reply cache {c.path} ({c.mode}): {c.hits} hits, {c.misses} misses, {c.uncacheable} not cacheable, "
            f"{c.stored} stored; {c.sent} requests sent"
            + (f"; {c.failed_writes} replies not stored (the first failure was logged)" if c.failed_writes else "")
            + (f"; {c.failed_reads} look-ups failed (asked instead)" if c.failed_reads else ""),
            soft_wrap=True,
        )
    out.print(scored_by(s.provenance), soft_wrap=True)  # the last line: what scored the run (issue 32)
    recorded = RunDir(run_dir).recorded_summary() or {}
    # summary.json's, found once at the run's end by reading its rows (a sharded part's too)
    for warning in recorded["warnings"] if "warnings" in recorded else s.warnings():
        err.print(f"warning: {warning}", soft_wrap=True)  # one line, as errors are
    if shard is not None and not s.banks:  # every lane this call ran is listed in banks, bank-free ones too
        err.print(
            f"note: shard {shard} holds none of the run's lanes (more shards than lanes leaves some empty), so it "
            f"scored nothing; `ceb merge` takes it with the other parts",
            soft_wrap=True,
        )
    if s.steps_failed and not s.steps_scored:
        err.print(f"error: every step failed (no score); the reasons are in {RunDir(run_dir).scores}")
        raise typer.Exit(EXIT_FAILED)
