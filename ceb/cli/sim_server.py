"""``ceb sim-server``: serve the ceb SIMULATOR (not a model) until Ctrl-C.

:func:`sim_server` has one option per :class:`~ceb.sim.settings.SimConfig` field plus ``--host`` and ``--port``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ceb.cli._common import PORT_HELP, fail
from ceb.errors import leaf_error
from ceb.sim.settings import SimConfig

if TYPE_CHECKING:
    from ceb.sim.server import SimServer

__all__ = ["banner", "sim_server"]

_D = SimConfig()


def banner(server: SimServer) -> str:
    """The start-up banner: where the simulator listens and that it is not a model."""
    c = server.config
    faults = ", ".join(f"{name}={rate:g}" for name, rate in c.fault_rates().items() if rate > 0) or "none"
    return (
        f"ceb SIMULATOR (not a model) on {server.base_url}\n"
        f"  model id {c.model!r}; replies are seeded stand-ins for benchmarks and tests, never for scoring.\n"
        f"  max_num_seqs={c.max_num_seqs} prefill_tok_s={c.prefill_tok_s:g} "
        f"decode_s_per_token={c.decode_s_per_token:g} overhead_s={c.overhead_s:g} time_scale={c.time_scale:g} "
        f"seed={c.seed}\n"
        f"  faults: {faults}\n"
        f"  statistics: GET {server.url}/sim/stats, reset: POST {server.url}/sim/reset. Ctrl-C stops."
    )


def sim_server(
    host: Annotated[str, typer.Option(help="Interface to bind; keep loopback unless others must reach it.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=0, max=65535, help=PORT_HELP)] = 8100,
    max_num_seqs: Annotated[
        int, typer.Option(help="Requests in service at once (vLLM --max-num-seqs); the rest queue FIFO.")
    ] = _D.max_num_seqs,
    prefill_tok_s: Annotated[
        float, typer.Option(help="Prompt tokens per second of one request's prefill (toy tokens).")
    ] = _D.prefill_tok_s,
    decode_s_per_token: Annotated[
        float, typer.Option(help="Seconds per generated token of one choice.")
    ] = _D.decode_s_per_token,
    overhead_s: Annotated[float, typer.Option(help="Fixed seconds added to every request.")] = _D.overhead_s,
    time_scale: Annotated[
        float, typer.Option(help="Multiplies every service time; 0 serves with no simulated delay.")
    ] = _D.time_scale,
    seed: Annotated[int, typer.Option(help="Seeds the replies and the fault schedule.")] = _D.seed,
    rate_429: Annotated[float, typer.Option(help="Probability of an HTTP 429 with Retry-After.")] = _D.rate_429,
    rate_500: Annotated[float, typer.Option(help="Probability of an HTTP 500.")] = _D.rate_500,
    rate_stall: Annotated[
        float, typer.Option(help="Probability of hanging stall-s seconds, then answering or closing.")
    ] = _D.rate_stall,
    rate_malformed_body: Annotated[
        float, typer.Option(help="Probability of an HTTP 200 whose JSON body is cut in half.")
    ] = _D.rate_malformed_body,
    rate_malformed_content: Annotated[
        float, typer.Option(help="Probability of a completion whose message text is cut in half.")
    ] = _D.rate_malformed_content,
    rate_wrong_label_count: Annotated[
        float, typer.Option(help="Probability of a hindsight reply with one label too many or too few.")
    ] = _D.rate_wrong_label_count,
    rate_bad_score: Annotated[
        float, typer.Option(help="Probability of a critic score above 1, below 0, or NaN.")
    ] = _D.rate_bad_score,
    retry_after_s: Annotated[float, typer.Option(help="Seconds sent in Retry-After with a 429.")] = _D.retry_after_s,
    stall_s: Annotated[
        float, typer.Option(help="Wall-clock seconds of a stall; longer than the client's timeout.")
    ] = _D.stall_s,
    model: Annotated[str, typer.Option(help="The model id served (keep it recognisable as a simulator).")] = _D.model,
    max_model_len: Annotated[
        int, typer.Option(help="Context length in toy tokens; longer prompts get a 400.")
    ] = _D.max_model_len,
    root: Annotated[
        str | None,
        typer.Option(help="The weights /v1/models reports (vLLM's root); default: the model id."),
    ] = _D.root,
) -> None:
    """Serve the ceb SIMULATOR: an OpenAI-compatible server with vLLM-like queueing and seeded fake replies.

    It is not a model. Use it to benchmark the pipeline and the client, and to exercise failure handling.

    Raises:
        typer.BadParameter: The settings are out of range (see :class:`~ceb.sim.settings.SimConfig`).
    """
    try:
        config = SimConfig(
            max_num_seqs=max_num_seqs,
            prefill_tok_s=prefill_tok_s,
            decode_s_per_token=decode_s_per_token,
            overhead_s=overhead_s,
            time_scale=time_scale,
            seed=seed,
            rate_429=rate_429,
            rate_500=rate_500,
            rate_stall=rate_stall,
            rate_malformed_body=rate_malformed_body,
            rate_malformed_content=rate_malformed_content,
            rate_wrong_label_count=rate_wrong_label_count,
            rate_bad_score=rate_bad_score,
            retry_after_s=retry_after_s,
            stall_s=stall_s,
            model=model,
            max_model_len=max_model_len,
            root=root,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    from ceb.sim.server import run_sim_server  # aiohttp: only when the server starts

    try:
        run_sim_server(config, host, port, on_started=lambda server: typer.echo(banner(server)))
    except (OSError, BaseExceptionGroup) as exc:  # the port is taken, or the address is not this machine's
        problem = leaf_error(exc)
        if not isinstance(problem, OSError):
            raise
        raise fail(problem, doing=f"cannot listen on {host}:{port}") from exc
    typer.echo("ceb SIMULATOR stopped.")
