"""The gate over HTTP (``ceb serve``): an aiohttp application around one :class:`~ceb.gate.Gate`.

Endpoints (the OpenAPI document at ``GET /openapi.json`` gives every field, :mod:`ceb.serve.openapi`):

=========================  ======================================================================================
``POST /v1/score``         score a proposed action before it runs: the gate's :class:`Confidence` as JSON (200)
``POST /v1/trajectories``  a finished trajectory: 202 once it is durable (``seq``); hindsight and bank update follow
``GET /v1/streams``        bank statistics of every stream (``/v1/streams/{stream}``: one; 404 if unknown)
``GET /health``            liveness, version, uptime and the critic's state; 503 (and why) when the state directory
                           cannot be written (``error``) or the critic keeps failing (``degraded``,
                           :mod:`ceb.gate.health`); never needs the token
``GET /metrics``           Prometheus text format
``GET /openapi.json``      the OpenAPI 3.1 document
=========================  ======================================================================================

Who may call it and for how long (``[serve]``, :class:`~ceb.config.ServeConfig`; ``docs/gate.md``, "What is
protected"): a foreign ``Host`` gets 421, a browser ``Origin`` not allowed 403, a body that is not
``application/json`` 415, a missing or wrong bearer token (when one is set, on loopback too) 401, a body slower
than ``serve.body_timeout_s`` 408, a request beyond ``serve.max_connections`` 503.

Bad input: a body not JSON 400; a field missing, unknown or malformed 422 (``{"error", "field", "problems":
[{"field", "message"}]}``); a body over the limit 413; a stream with ``gate.max_pending`` trajectories waiting
503 with ``Retry-After``; a stream beyond ``gate.max_streams``, or a trajectory id taken with other content, 409
(:class:`~ceb.errors.ConflictError`, which retry policies do not retry). The same id and content again is a
retry: 202 with the first body (same ``seq``) and ``Idempotent-Replayed: true``, banked once. A state directory
that cannot take a trajectory: 507 on a full disk (``ENOSPC``, ``EDQUOT``), 503 on another write error, nothing
acknowledged. An unexpected failure is logged with its traceback and answered with a bare 500.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
from aiohttp import hdrs, web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ceb.config import ServeConfig
from ceb.errors import ConfigError, ConflictError, DataError, OverloadedError, StreamValidationError
from ceb.gate import Gate
from ceb.logs import get_logger
from ceb.serve.openapi import openapi_document
from ceb.serve.payloads import parse_score_request, parse_trajectory_request
from ceb.version import __version__

__all__ = ["DRAIN_S", "GATE", "LOOPBACK", "check_bind", "make_app", "run_server"]

log = get_logger(__name__)

DRAIN_S = 60.0
LINGER_S = 1.0
"""Seconds a connection whose body timed out is still read after its 408, so a client still sending can read it."""
"""Seconds a stopping server (SIGINT, SIGTERM) waits for the requests in flight to be answered; past it they are
cancelled (a trajectory cancelled before its 202 was not acknowledged, so its client's retry is safe)."""


@dataclass(slots=True)
class _Front:
    """Who may call and how long they may take; ``server`` is set once served, to count its connections."""

    token: str | None
    settings: ServeConfig
    server: web.Server | None = None


GATE = web.AppKey("gate", Gate)
_METRICS = web.AppKey("metrics", dict)
_FRONT = web.AppKey("front", _Front)
_OPEN_PATHS = frozenset({"/health"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Latency buckets in seconds: from 100 microseconds (the offline critic) to a minute (a slow LLM).
_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _error(status: int, message: str, field: str | None = None, **extra: Any) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return _json(body | extra, status)


def _metrics() -> dict[str, Any]:
    registry = CollectorRegistry()
    return {
        "registry": registry,
        "requests": Counter(
            "ceb_gate_requests", "HTTP requests by route and status.", ["route", "status"], registry=registry
        ),
        "score_seconds": Histogram(
            "ceb_gate_score_seconds", "Seconds from score call to answer.", buckets=_BUCKETS, registry=registry
        ),
        "overhead_seconds": Histogram(
            "ceb_gate_overhead_seconds",
            "Seconds the gate adds on top of the critic call (retrieval, prompt, bookkeeping).",
            buckets=_BUCKETS,
            registry=registry,
        ),
        "decisions": Counter("ceb_gate_decisions", "Score decisions.", ["decision"], registry=registry),
        "accepted": Counter("ceb_gate_trajectories_accepted", "Trajectories acknowledged.", registry=registry),
        "replayed": Counter(
            "ceb_gate_trajectories_replayed",
            "Trajectories sent again (same id and content): acknowledged again, not banked again.",
            registry=registry,
        ),
        "streams": Gauge("ceb_gate_streams", "Streams the gate holds.", registry=registry),
        "records": Gauge("ceb_gate_bank_records", "Bank records over every stream.", registry=registry),
        "pending": Gauge(
            "ceb_gate_pending_trajectories", "Accepted trajectories waiting for hindsight.", registry=registry
        ),
    }


def _foreign_host(request: web.Request, allowed: tuple[str, ...]) -> bool:
    """``Host`` names neither the address it came in on (or ``localhost`` there) nor an allowed name (any port)."""
    given = request.headers.get(hdrs.HOST)
    sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
    if given is None or not sock:
        return False
    host = given.lower()
    name, _, port = host.rpartition(":") if ":" in host.rpartition("]")[2] else (host, "", "")
    if {host, name} & {a.lower() for a in allowed}:
        return False
    ip, bound_port = sock[0], str(sock[1])
    names = {f"[{ip}]" if ":" in ip else ip} | ({"localhost"} if ipaddress.ip_address(ip).is_loopback else set())
    return not (name in names and (port or "80") == bound_port)


def _refusal(request: web.Request, front: _Front) -> web.Response | None:
    """The answer to a request the gate does not take from this caller (host, origin, connections, token, type)."""
    settings = front.settings
    if _foreign_host(request, settings.allowed_hosts):
        return _error(421, "Host names neither this gate's address nor serve.allowed_hosts", "Host")
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is not None and origin not in settings.allowed_origins:
        return _error(403, "requests from web pages are refused: this Origin is not in serve.allowed_origins", "Origin")
    open_now = len(front.server.connections) if front.server is not None else 0
    if open_now > settings.max_connections:
        response = _error(503, f"{open_now} connections open, over serve.max_connections ({settings.max_connections})")
        response.headers["Retry-After"] = "1"
        response.force_close()
        return response
    if front.token is not None and request.path not in _OPEN_PATHS and request.method != hdrs.METH_OPTIONS:
        given = request.headers.get(hdrs.AUTHORIZATION, "")
        if not hmac.compare_digest(given.encode(), f"Bearer {front.token}".encode()):
            return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)")
    if request.method == hdrs.METH_POST and request.content_type != "application/json":
        return _error(415, "the body must be JSON sent as Content-Type: application/json", "Content-Type")
    return None


def _cors(response: web.StreamResponse, origin: str | None) -> web.StreamResponse:
    """An allowed web origin's page may read the answer (the request was refused before here otherwise)."""
    if origin is not None:
        response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
        response.headers[hdrs.VARY] = hdrs.ORIGIN
    return response


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Who may call (:func:`_refusal`), error mapping (never a traceback to the client) and request counting."""
    front = request.app[_FRONT]
    route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
    counter = request.app[_METRICS]["requests"]
    origin = request.headers.get(hdrs.ORIGIN)
    refused = _refusal(request, front)
    if refused is not None:
        counter.labels(route, str(refused.status)).inc()
        return refused
    if request.method == hdrs.METH_OPTIONS and origin is not None:  # an allowed origin's CORS preflight
        preflight = web.Response(status=204)
        preflight.headers[hdrs.ACCESS_CONTROL_ALLOW_METHODS] = "GET, POST"
        preflight.headers[hdrs.ACCESS_CONTROL_ALLOW_HEADERS] = "Authorization, Content-Type"
        preflight.headers[hdrs.ACCESS_CONTROL_MAX_AGE] = "600"
        return _cors(preflight, origin)
    try:
        response = await handler(request)
    except _BadJSON as exc:
        response = _error(400, exc.reason, "<body>")
    except web.HTTPRequestEntityTooLarge:
        response = _error(413, f"request body over {front.settings.max_body_bytes} bytes", "<body>")
    except _BodyTimeout:  # what did arrive is discarded with the connection
        response = _error(408, f"the body took longer than serve.body_timeout_s ({front.settings.body_timeout_s:g} s)")
        response.force_close()
    except web.HTTPException as exc:
        response = _error(exc.status, exc.reason)
    except DataError as exc:
        found = exc.problems if isinstance(exc, StreamValidationError) else [exc.problem]
        problems = [{"field": p.field, "message": p.message} for p in found]
        response = _error(422, f"field {found[0].field}: {found[0].message}", found[0].field, problems=problems)
    except OverloadedError as exc:
        response = _error(503, str(exc), "stream")
        response.headers["Retry-After"] = "1"
    except ConflictError as exc:
        response = _error(409, str(exc), exc.field)
    except OSError as exc:  # the state directory: nothing was acknowledged (Gate.accept), so a retry is safe
        reason = exc.strerror or str(exc)
        log.error("cannot write the state directory", path=request.path, error=reason, errno=exc.errno)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            response = _error(
                507, f"{reason}: the state directory is full; nothing was accepted, retry once there is room"
            )
        else:
            response = _error(503, f"cannot write the state directory: {reason}; nothing was accepted")
    except Exception:
        log.exception("request failed", path=request.path)
        response = _error(500, "internal error (logged by the server)")
    counter.labels(route, str(response.status)).inc()
    return _cors(response, origin)


async def _body(request: web.Request) -> Any:
    with anyio.move_on_after(request.app[_FRONT].settings.body_timeout_s) as waited:
        raw = await request.read()  # raises HTTPRequestEntityTooLarge past client_max_size
    if waited.cancelled_caught:
        raise _BodyTimeout
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _BadJSON(f"not valid JSON: {exc.msg} (column {exc.colno})") from None


class _BodyTimeout(Exception):
    """The body did not arrive within ``serve.body_timeout_s``."""


class _BadJSON(web.HTTPBadRequest):
    def __init__(self, message: str) -> None:
        super().__init__(reason=message)


async def score(request: web.Request) -> web.Response:
    """``POST /v1/score``: the confidence of a proposed action."""
    req = parse_score_request(await _body(request))
    c = await request.app[GATE].score(req.stream, req.context)
    m = request.app[_METRICS]
    m["score_seconds"].observe(c.latency_s)
    m["overhead_seconds"].observe(c.overhead_s)
    m["decisions"].labels(c.decision).inc()
    return _json(c.to_json())


async def trajectories(request: web.Request) -> web.Response:
    """``POST /v1/trajectories``: accept a finished trajectory; 202 once it is durable (again for a retry)."""
    stream, trajectory = parse_trajectory_request(await _body(request))
    gate = request.app[GATE]
    receipt = await gate.accept(stream, trajectory)
    request.app[_METRICS]["replayed" if receipt.replayed else "accepted"].inc()
    return _json(
        {"stream": stream, "trajectory_id": trajectory.id, "seq": receipt.seq, "durable": gate.state_dir is not None},
        status=202,
        headers={"Idempotent-Replayed": "true"} if receipt.replayed else None,
    )


async def streams(request: web.Request) -> web.Response:
    """``GET /v1/streams``: every stream's bank statistics."""
    return _json(request.app[GATE].stats())


async def one_stream(request: web.Request) -> web.Response:
    """``GET /v1/streams/{stream}``: one stream's bank statistics."""
    name = request.match_info["stream"]
    gate = request.app[GATE]
    if name not in gate.streams:
        return _error(404, f"no stream {name[:60]!r}", "stream")
    return _json(gate.stats(name))


async def health(request: web.Request) -> web.Response:
    """``GET /health``: liveness, whether the state directory can be written and whether the critic answers.

    ``status`` is ``error`` (503) when the state directory cannot be written, else ``degraded`` (503) when the
    critic keeps failing (``critic.reason`` says why), else ``ok`` (200).
    """
    gate = request.app[GATE]
    problem = await gate.state_problem()
    critic = gate.critic_health
    status = "error" if problem is not None else critic.status
    return _json(
        {
            "status": status,
            "state": problem,
            "critic": critic.to_json(),
            "version": __version__,
            "method": gate.method.name,
            "streams": len(gate.streams),
            "durable": gate.state_dir is not None,
            "uptime_s": round(time.time() - gate.started, 3),
        },
        status=200 if status == "ok" else 503,
    )


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus text format."""
    m = request.app[_METRICS]
    stats = request.app[GATE].stats()["streams"]
    m["streams"].set(len(stats))
    m["records"].set(sum(s["records"] for s in stats.values()))
    m["pending"].set(sum(s["pending"] for s in stats.values()))
    return web.Response(body=generate_latest(m["registry"]), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def openapi(request: web.Request) -> web.Response:
    """``GET /openapi.json``: the OpenAPI document."""
    return _json(openapi_document())


def make_app(gate: Gate, *, token: str | None = None, settings: ServeConfig | None = None) -> web.Application:
    """The aiohttp application serving ``gate`` (entered by the caller, who also closes it).

    Args:
        gate: An entered :class:`Gate`.
        token: Bearer token every request but ``/health`` must carry; ``None``: none needed (loopback only,
            which :func:`ceb.cli.serve.serve` enforces).
        settings: Allowed hosts and origins, the body timeout and size (``gate.config.serve`` when ``None``); the
            header timeout and the connection cap are the server's, set by :func:`run_server`.
    """
    settings = settings if settings is not None else gate.config.serve
    app = web.Application(middlewares=[_guard], client_max_size=settings.max_body_bytes)
    app[GATE] = gate
    app[_METRICS] = _metrics()
    app[_FRONT] = _Front(token, settings)
    app.router.add_post("/v1/score", score)
    app.router.add_post("/v1/trajectories", trajectories)
    app.router.add_get("/v1/streams", streams)
    app.router.add_get("/v1/streams/{stream}", one_stream)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi)
    return app


LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
"""Hosts that bind the loopback interface only: the only ones served without a bearer token."""


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve beyond the loopback interface without a bearer token.

    Raises:
        ConfigError: ``host`` is not a loopback address and ``token`` is empty.
    """
    if host not in LOOPBACK and not token:
        raise ConfigError(
            f"binding {host} exposes the gate beyond this machine: set a bearer token (--token-env, default "
            "CEB_SERVE_TOKEN) or bind 127.0.0.1"
        )


async def run_server(
    gate: Gate,
    host: str = "127.0.0.1",
    port: int = 8377,
    *,
    token: str | None = None,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``gate`` (entered by the caller) until SIGINT or SIGTERM.

    A critic endpoint that cannot be reached at start (:meth:`~ceb.gate.Gate.check_critic`) is a warning; the gate
    serves degraded. On a signal the requests in flight get :data:`DRAIN_S` seconds to be answered. The HTTP
    limits are ``gate.config.serve``: the header timeout is aiohttp's keep-alive timeout (from a connection's
    opening and from each answer to the next request's headers); after a body timeout's 408 the connection lingers
    at most :data:`LINGER_S` (aiohttp's lingering time), so a stalled body holds a connection about
    ``body_timeout_s`` + 1 s.

    Args:
        gate: An entered gate.
        host: Interface to bind.
        port: Port; 0 picks a free one.
        token: Bearer token (required beyond loopback, :func:`check_bind`).
        ready: Called with the base URL (``http://127.0.0.1:8377``) once the socket listens.

    Raises:
        ConfigError: A non-loopback ``host`` without ``token``.
        OSError: The address cannot be bound.
    """
    check_bind(host, token)
    problem = await gate.check_critic()
    if problem is not None:
        log.warning(
            "the critic endpoint cannot be reached; serving anyway, every score is gate.on_failure until it answers",
            endpoint=gate.critic_health.endpoint,
            error=problem,
        )
    settings = gate.config.serve
    app = make_app(gate, token=token)
    runner = web.AppRunner(
        app,
        access_log=None,
        shutdown_timeout=DRAIN_S,
        keepalive_timeout=settings.header_timeout_s,
        lingering_time=min(LINGER_S, settings.body_timeout_s),
    )
    await runner.setup()
    app[_FRONT].server = runner.server
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0]
        url = f"http://{host if ':' not in host else f'[{host}]'}:{bound[1]}"
        log.info("serving", url=url, method=gate.method.name, state_dir=str(gate.state_dir))
        if ready is not None:
            ready(url)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                break
    finally:
        await runner.cleanup()
