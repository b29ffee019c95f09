"""``ceb sim-server``: serve the ceb SIMULATOR (not a model) until Ctrl-C.

:data:`sim_server` has one option per :class:`~ceb.sim.settings.SimConfig` field (:mod:`ceb.cli._options`) plus
``--host`` and ``--port``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ceb.cli._common import PORT_HELP, fail
from ceb.cli._options import settings_command
from ceb.errors import leaf_error
from ceb.sim.settings import SimConfig

if TYPE_CHECKING:
    from ceb.sim.server import SimServer

__all__ = ["banner", "sim_server"]


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


def _sim_server(
    config: SimConfig,
    host: Annotated[str, typer.Option(help="Interface to bind; keep loopback unless others must reach it.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=0, max=65535, help=PORT_HELP)] = 8100,
) -> None:
    """Serve the ceb SIMULATOR: an OpenAI-compatible server with vLLM-like queueing and seeded fake replies.

    It is not a model. Use it to benchmark the pipeline and the client, and to exercise failure handling.
    """
    from ceb.sim.server import run_sim_server  # aiohttp: only when the server starts

    try:
        run_sim_server(config, host, port, on_started=lambda server: typer.echo(banner(server)))
    except (OSError, BaseExceptionGroup) as exc:  # the port is taken, or the address is not this machine's
        problem = leaf_error(exc)
        if not isinstance(problem, OSError):
            raise
        raise fail(problem, doing=f"cannot listen on {host}:{port}") from exc
    typer.echo("ceb SIMULATOR stopped.")


sim_server = settings_command(_sim_server)
"""``ceb sim-server``: ``--host``, ``--port`` and one option per :class:`~ceb.sim.settings.SimConfig` field."""
