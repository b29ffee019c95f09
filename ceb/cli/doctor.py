"""``ceb doctor``: probe an endpoint (or an in-process vLLM engine) and say which methods will run there."""

from __future__ import annotations

from typing import Annotated

import anyio
import typer
from rich.table import Table
from rich.text import Text

from ceb.cli._common import EXIT_FAILED, config_option, config_overrides, engine_words, err, out

__all__ = ["doctor"]


def doctor(
    model: Annotated[
        str,
        config_option(
            "backend.model", "--model", help="Model name as the endpoint knows it; with --backend vllm the model path."
        ),
    ],
    base_url: Annotated[
        str | None,
        config_option(
            "backend.base_url", "--base-url", help="API root, e.g. http://127.0.0.1:8000/v1 (backend openai)."
        ),
    ] = None,
    backend: Annotated[
        str,
        config_option(
            "backend.name",
            "--backend",
            help="A registered backend: openai (an endpoint), vllm (an engine in this process).",
            base=False,
        ),
    ] = "openai",
    engine_args: Annotated[
        str | None,
        config_option(
            "backend.engine.args",
            help="--backend vllm: `vllm serve` flags for the engine in one string, e.g. '--dtype bfloat16'.",
            base=False,
            convert=engine_words,
        ),
    ] = None,
    api_key_env: Annotated[str | None, config_option("backend.api_key_env", "--api-key-env")] = None,
    structured_output: Annotated[str | None, config_option("backend.structured_output", "--structured-output")] = None,
    timeout: Annotated[
        float,
        config_option(
            "backend.timeout_s",
            "--timeout",
            min=0.001,
            max=3600,
            help="Seconds per probe request (at most an hour).",
            base=False,
        ),
    ] = 30.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Probe an endpoint: what it supports, and which methods will run there and which will not (and why).

    One small request per feature, no retries; what the endpoint lacks is named, and what ceb sends differently
    to be answered there (UUID request ids, max_tokens, json_object with the schema, n as separate requests).
    With --backend vllm the engine is started in this process first (vLLM installed here; its flags from
    --engine-args) and the same requests go to it. Exits 1 when ceb cannot run there at all (no chat reply).
    """
    import orjson

    from ceb.backends.probe import EndpointReport, probe
    from ceb.config import load_config
    from ceb.stages.methods import all_methods

    # The backend is opened from a `backend` section exactly as a run opens it; unset options keep its defaults.
    settings = load_config(overrides=config_overrides(doctor, locals())).backend
    report: EndpointReport = anyio.run(probe, settings)
    verdicts = {m.name: m.verdict(report.capabilities) for m in all_methods()}
    if as_json:
        doc = report.to_dict() | {"methods": {n: {"runs": ok, "note": note} for n, (ok, note) in verdicts.items()}}
        out.print_json(orjson.dumps(doc).decode())
    else:
        checks = Table("feature", "result", "seconds", "detail", title=f"{model} at {report.base_url}")
        for c in report.checks:
            style = {"ok": "green", "missing": "yellow", "failed": "red"}[c.outcome]
            checks.add_row(c.name, Text(c.outcome, style=style), f"{c.seconds:.2f}", c.detail)
        out.print(checks)
        if report.served is not None and (report.served.root or report.served.server_version):
            root, version = report.served.root or "not reported", report.served.server_version or "not reported"
            out.print(f"Served: weights {root}, server version {version}.", markup=False)
        if report.lacking:
            out.print(f"The endpoint lacks: {', '.join(report.lacking)}.", markup=False)
        if report.adaptations:
            changes = Table("what", "ceb does differently here", title="Adapted to this endpoint")
            for name, note in report.adaptations.items():
                changes.add_row(name, note)
            out.print(changes)
        methods = Table("method", "runs here", "note", title="Methods on this endpoint")
        for name, (ok, note) in verdicts.items():
            methods.add_row(name, Text("yes", "green") if ok else Text("not available", "red"), note)
        out.print(methods)
    if not report.usable:
        err.print("ceb cannot run on this endpoint: no chat reply for this model.", markup=False)
        raise typer.Exit(EXIT_FAILED)
