"""``ceb serve``: the live gate over HTTP (:mod:`ceb.serve.app`). Imports stay inside the command."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from ceb.cli._common import PORT_HELP, config_option, config_overrides, endpoint_options, fail
from ceb.errors import CEBError, leaf_error

__all__ = ["serve"]


def _none_if_empty(values: list[str]) -> list[str] | None:
    """No ``--allowed-host`` (or ``--allowed-origin``) given: the config's."""
    return values or None


@endpoint_options("offline (no model) or openai", base=None, panel=None)
def serve(
    config: Annotated[Path | None, typer.Option(help="TOML or JSON config file ([gate] sets the thresholds).")] = None,
    host: Annotated[str, typer.Option(help="Interface to bind; beyond loopback a bearer token is required.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=0, max=65535, help=PORT_HELP)] = 8377,
    state_dir: Annotated[
        Path, typer.Option(help="Folder of each stream's inbox and bank journal; reopened (and replayed) on restart.")
    ] = Path("ceb-state"),
    in_memory: Annotated[
        bool, typer.Option(help="Keep banks in memory only: nothing survives the process, nothing is fsync'd.")
    ] = False,
    token_env: Annotated[
        str, typer.Option(help="Environment variable holding the bearer token (unset: no token, loopback only).")
    ] = "CEB_SERVE_TOKEN",
    endpoint: dict[str, Any] | None = None,
    method: Annotated[str | None, config_option("gate.method", "--method", help="ceb or static")] = None,
    allow: Annotated[
        float | None, config_option("gate.allow", "--allow", help="Scores at or above this are 'allow'")
    ] = None,
    block: Annotated[float | None, config_option("gate.block", "--block", help="Scores below this are 'block'")] = None,
    max_streams: Annotated[
        int | None,
        config_option(
            "gate.max_streams", "--max-streams", min=1, help="Streams the gate holds at most; a new one beyond gets 409"
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        config_option(
            "serve.allowed_hosts",
            "--allowed-host",
            help="A Host name it answers besides its address; repeatable (default: none).",
            base=False,
            convert=_none_if_empty,
        ),
    ] = None,
    allowed_origin: Annotated[
        list[str] | None,
        config_option(
            "serve.allowed_origins",
            "--allowed-origin",
            help="A web origin whose pages may call it; repeatable (default: none).",
            base=False,
            convert=_none_if_empty,
        ),
    ] = None,
    header_timeout: Annotated[
        float | None,
        config_option("serve.header_timeout_s", "--header-timeout", help="Seconds a client may take to send headers"),
    ] = None,
    body_timeout: Annotated[
        float | None,
        config_option("serve.body_timeout_s", "--body-timeout", help="Seconds a client may take to send a body"),
    ] = None,
    max_connections: Annotated[int | None, config_option("serve.max_connections", "--max-connections", min=1)] = None,
    max_body_bytes: Annotated[int | None, config_option("serve.max_body_bytes", "--max-body-bytes", min=1024)] = None,
) -> None:
    """Serve the gate over HTTP: POST /v1/score before an action, POST /v1/trajectories after a run.

    Only requests whose Host names its address (or --allowed-host) and that come from no web page (or an
    --allowed-origin) are answered; a slow client is cut off (--header-timeout, --body-timeout). One bank per
    stream, resumed from --state-dir; a finished trajectory is acknowledged (202) once it is fsync'd, its
    hindsight votes and bank update follow in order. A --state-dir another process holds, or one it cannot
    write, stops it at start (exit 2). GET /openapi.json documents every field; /metrics is Prometheus; /health
    needs no token. A critic endpoint that cannot be reached at start is a warning. Ctrl-C or SIGTERM stops it
    after the requests in flight are answered.
    """
    import anyio

    from ceb.config import load_config
    from ceb.gate import Gate
    from ceb.gc_tuning import quiet_gc
    from ceb.logs import register_secret_env
    from ceb.serve.app import check_bind, run_server

    overrides = {"backend": endpoint} | config_overrides(serve, locals())
    token = os.environ.get(token_env) or None
    served: list[str] = []  # the URL once listening: an OSError after it is not about the address
    try:
        cfg = load_config(config, overrides)
        check_bind(host, token)
        register_secret_env(cfg.backend.api_key_env)
        if cfg.hindsight.api_key_env is not None:
            register_secret_env(cfg.hindsight.api_key_env)
        register_secret_env(token_env)

        def ready(url: str) -> None:
            served.append(url)
            print(f"ceb serve: listening on {url}", flush=True)

        async def main() -> None:
            async with Gate(cfg, state_dir=None if in_memory else state_dir) as gate:
                await run_server(gate, host, port, token=token, ready=ready)

        # Fewer full collections: each walks every bank record alive and stalls every request meanwhile (0.37-0.9 s
        # pauses measured on long scoring runs, docs/serving.md), as ceb score and ceb grid do.
        with quiet_gc():
            anyio.run(main)
    except (CEBError, OSError, BaseExceptionGroup) as exc:  # the server's task group wraps a port in use
        problem = leaf_error(exc)
        if isinstance(problem, CEBError):
            raise fail(problem) from None
        if isinstance(problem, OSError):
            # Before listening: the address (in use, not ours). After: the state (a bank journal on a full disk).
            stopped = "the gate stopped" if in_memory else f"the gate stopped ({state_dir})"
            doing = f"cannot serve on {host}:{port}" if not served else stopped
            raise fail(problem, doing=doing) from None
        raise
