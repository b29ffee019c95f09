"""A SIMULATED OpenAI-compatible server behaving like a vLLM server under load. It is not a model.

Its replies are seeded stand-ins (:mod:`ceb.sim.replies`), for benchmarks and failure-path tests, never for scoring;
everything it serves says so (model id and ``owned_by`` ``ceb-simulator``, ``system_fingerprint``, the
``X-CEB-Simulator: 1`` header, the start-up log line).

Load model: at most ``max_num_seqs`` requests in service, later ones in a FIFO queue (vLLM's running batch and waiting
queue). A request is served in ``time_scale * (overhead_s + prompt_tokens / prefill_tok_s + completion_tokens *
decode_s_per_token)`` seconds, in toy tokens (:mod:`ceb.sim.tokenizer`), ``completion_tokens`` the longest choice's;
latency grows with load through queueing alone. Not modelled: prefix caching, chunked prefill, preemption, KV-cache
limits, the extra sequences of ``n > 1``. Faults (:mod:`ceb.sim.faults`): a 429 or 500 is sent at once; a stall waits
``stall_s`` wall-clock seconds before queueing, holding no slot.

Endpoints: ``POST /v1/chat/completions`` (``n``, ``temperature``, ``seed``, ``max_completion_tokens`` / ``max_tokens``
with ``finish_reason: "length"``, ``response_format``, ``logprobs`` / ``top_logprobs`` up to 20, vLLM's
``structured_outputs``, ``guided_json``, ``prompt_logprobs`` up to 20, ``echo``, ``add_generation_prompt``,
``continue_final_message``; ``stream`` is refused, another ``model`` is a 404); ``GET /v1/models``; ``GET /version``;
vLLM's ``POST /tokenize``; ``GET /health``; ``GET /sim/stats``; ``POST /sim/reset`` (zero the statistics, restart the
fault schedule).
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn

import anyio
import orjson
import structlog
from aiohttp import web

from ceb.sim.faults import Fault, FaultKind, FaultSchedule, bad_score_text, cut_in_half, wrong_count
from ceb.sim.replies import (
    Replier,
    ReplyPlan,
    choice_rng,
    classify,
    completion_logprobs,
    default_replier,
    format_critic,
    labels_reply,
    prompt_digest,
    prompt_logprobs,
)
from ceb.sim.settings import SIMULATOR_ID, SimConfig
from ceb.sim.tokenizer import chat_tokens, count_chat_tokens, count_tokens, message_text, token_id, tokenize

__all__ = ["SIMULATOR_HEADER", "SimServer", "SimStats", "run_sim_server", "serve_sim"]

SIMULATOR_HEADER = "X-CEB-Simulator"
"""Response header (value ``1``) on everything the simulator sends."""

_NOTE = "ceb simulator: not a model; replies are seeded stand-ins for benchmarks and tests"
_MAX_N = 128
_MAX_LOGPROBS = 20

log = structlog.get_logger(__name__)


@dataclass
class SimStats:
    """What the simulator has seen since it started or was reset; durations in wall-clock seconds, tokens toy ones.

    ``requests`` counts every chat request (refused and faulted ones too); ``by_status`` the responses per status
    (``"closed"``: closed unanswered); ``faults`` per :data:`~ceb.sim.faults.FaultKind`; ``by_kind`` the answered
    requests per reply kind. ``in_service`` and ``queued`` are now, ``max_*`` their highs; ``busy_s`` and ``queue_s``
    sum the time in service and waiting for a slot.
    """

    requests: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    by_kind: dict[str, int] = field(default_factory=dict)
    tokenize_requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    in_service: int = 0
    queued: int = 0
    max_in_service: int = 0
    max_queue_len: int = 0
    busy_s: float = 0.0
    queue_s: float = 0.0

    def reset(self) -> None:
        """Zero every total; ``in_service`` and ``queued`` stay (requests still in flight)."""
        in_service, queued = self.in_service, self.queued
        fresh = SimStats(in_service=in_service, queued=queued, max_in_service=in_service, max_queue_len=queued)
        self.__dict__.update(fresh.__dict__)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return asdict(self)


class _BadRequest(Exception):
    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


@dataclass(frozen=True, slots=True)
class _Chat:
    """A validated chat-completions request."""

    body: dict[str, Any]
    messages: list[dict[str, Any]]
    n: int
    top_logprobs: int | None
    prompt_logprobs: int | None
    echo: bool
    add_generation_prompt: bool
    continue_final_message: bool
    max_tokens: int | None


def _int_field(body: Mapping[str, Any], name: str, low: int, high: int | None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise _BadRequest(f"`{name}` must be an integer {bound}, got {value!r}", param=name)
    return value


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _BadRequest("`messages` must be a non-empty list", param="messages")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _BadRequest("each message must be an object with a string `role`", param="messages")
    return messages


def _template_flags(body: Mapping[str, Any]) -> tuple[bool, bool]:
    add_generation_prompt = bool(body.get("add_generation_prompt", True))
    continue_final_message = bool(body.get("continue_final_message", False))
    if add_generation_prompt and continue_final_message:
        raise _BadRequest(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            param="continue_final_message",
        )
    return add_generation_prompt, continue_final_message


def _checked(body: Any, config: SimConfig) -> dict[str, Any]:
    """``body`` if it is an object naming no other model; else :class:`_BadRequest` (a 404 for the model)."""
    if not isinstance(body, dict):
        raise _BadRequest("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != config.model:
        raise _BadRequest(f"The model `{model}` does not exist.", status=404, param="model")
    return body


def _parse_chat(body: Any, config: SimConfig) -> _Chat:
    body = _checked(body, config)
    if body.get("stream"):
        raise _BadRequest("the ceb simulator does not stream; send `stream: false`", param="stream")
    messages = _messages(body)
    add_generation_prompt, continue_final_message = _template_flags(body)
    n = _int_field(body, "n", 1, _MAX_N) or 1
    top = _int_field(body, "top_logprobs", 0, _MAX_LOGPROBS)
    if top is not None and not body.get("logprobs"):
        raise _BadRequest("when using `top_logprobs`, `logprobs` must be set to true", param="top_logprobs")
    limit = _int_field(body, "max_completion_tokens", 1, None)
    if limit is None:
        limit = _int_field(body, "max_tokens", 1, None)
    return _Chat(
        body=body,
        messages=messages,
        n=n,
        top_logprobs=(top or 0) if body.get("logprobs") else None,
        prompt_logprobs=_int_field(body, "prompt_logprobs", 0, _MAX_LOGPROBS),
        echo=bool(body.get("echo", False)),
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        max_tokens=limit,
    )


def _seconds_text(seconds: float) -> str:
    return str(int(seconds)) if seconds == int(seconds) else repr(seconds)


async def _label_response(request: web.Request, response: web.StreamResponse) -> None:
    response.headers[SIMULATOR_HEADER] = "1"


def _json(payload: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(payload), status=status, content_type="application/json", headers=headers)


class SimServer:
    """The simulated server (module docstring); start it with :func:`serve_sim` or :meth:`start`; ``stats`` are live.

    ``config`` defaults to ``SimConfig()``; ``replier`` replaces :func:`~ceb.sim.replies.default_replier` (injected
    content faults keep the default formats); ``port`` 0 picks a free one.
    """

    def __init__(
        self,
        config: SimConfig | None = None,
        *,
        replier: Replier | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.config = config or SimConfig()
        self.replier: Replier = replier or default_replier
        self.stats = SimStats()
        self._host = host
        self._requested_port = port
        self._port: int | None = None
        self._faults = FaultSchedule(self.config)
        self._arrivals = 0
        self._runner: web.AppRunner | None = None
        self._slots: anyio.Semaphore | None = None
        self._closing: anyio.Event | None = None

    @property
    def port(self) -> int:
        """The bound TCP port; :class:`RuntimeError` before :meth:`start`."""
        if self._port is None:
            raise RuntimeError("the simulator is not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://<host>:<port>``, the server root."""
        host = "127.0.0.1" if self._host in ("", "0.0.0.0") else "::1" if self._host == "::" else self._host
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://<host>:<port>/v1``, an OpenAI client's ``base_url``."""
        return f"{self.url}/v1"

    @property
    def bound_addresses(self) -> list[Any]:
        """The socket addresses listened on."""
        return list(self._runner.addresses) if self._runner is not None else []

    async def start(self) -> None:
        """Bind ``host:port`` and serve in the running event loop."""
        self._slots = anyio.Semaphore(self.config.max_num_seqs, fast_acquire=True)
        self._closing = anyio.Event()
        app = web.Application(client_max_size=64 * 2**20)
        app.on_response_prepare.append(_label_response)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/version", self._version)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/health", self._health)
        app.router.add_get("/sim/stats", self._stats)
        app.router.add_post("/sim/reset", self._reset)
        # Stalls and service sleeps end when `_closing` is set, so handlers never outlive stop() for long.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._requested_port)
        await site.start()
        self._port = self._runner.addresses[0][1]
        log.info("sim_server_started", base_url=self.base_url, model=self.config.model, note=_NOTE)

    async def stop(self) -> None:
        """End pending stalls and service times, then close every connection and the socket."""
        if self._closing is not None:
            self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def reset_stats(self) -> None:
        """Zero the statistics and restart the fault schedule at arrival 0."""
        self.stats.reset()
        self._arrivals = 0

    def service_seconds(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Service time in seconds of a request of that size (module docstring)."""
        c = self.config
        if c.time_scale == 0:
            return 0.0
        return c.time_scale * (
            c.overhead_s + prompt_tokens / c.prefill_tok_s + completion_tokens * c.decode_s_per_token
        )

    async def _pause(self, seconds: float) -> None:
        if seconds <= 0 or self._closing is None:
            return
        with anyio.move_on_after(seconds):
            await self._closing.wait()

    async def _serve(self, seconds: float) -> None:
        """Wait for a slot (FIFO), hold it ``seconds``, and account both waits."""
        slots = self._slots
        if slots is None:
            raise RuntimeError("the simulator is not started")
        stats = self.stats
        asked = time.perf_counter()
        try:
            slots.acquire_nowait()  # only succeeds when nobody is queued: a release hands its slot over
        except anyio.WouldBlock:
            stats.queued += 1
            stats.max_queue_len = max(stats.max_queue_len, stats.queued)
            try:
                await slots.acquire()
            finally:
                stats.queued -= 1
        got = time.perf_counter()
        stats.queue_s += got - asked
        stats.in_service += 1
        stats.max_in_service = max(stats.max_in_service, stats.in_service)
        try:
            await self._pause(seconds)
        finally:
            stats.in_service -= 1
            slots.release()
            stats.busy_s += time.perf_counter() - got

    def _count(self, status: int | str) -> None:
        key = str(status)
        self.stats.by_status[key] = self.stats.by_status.get(key, 0) + 1

    def _fault(self, kind: FaultKind) -> None:
        self.stats.faults[kind] = self.stats.faults.get(kind, 0) + 1

    def _error(
        self, status: int, message: str, *, param: str | None = None, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        self._count(status)
        kind = {400: "BadRequestError", 404: "NotFoundError", 429: "RateLimitError"}.get(status, "InternalServerError")
        error = {"message": message, "type": kind, "param": param, "code": status}
        return _json({"error": error}, status=status, headers=headers)

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        arrival = self._arrivals
        self._arrivals += 1
        self.stats.requests += 1
        try:
            chat = _parse_chat(orjson.loads(await request.read()), self.config)
            prompt_tokens = count_chat_tokens(
                chat.messages,
                add_generation_prompt=chat.add_generation_prompt,
                continue_final_message=chat.continue_final_message,
            )
            if prompt_tokens > self.config.max_model_len:
                raise _BadRequest(
                    f"the prompt has {prompt_tokens} tokens, more than max_model_len={self.config.max_model_len}",
                    param="messages",
                )
        except orjson.JSONDecodeError:
            return self._error(400, "the request body is not valid JSON")
        except _BadRequest as exc:
            return self._error(exc.status, str(exc), param=exc.param)

        fault = self._faults.draw(arrival)
        if fault is not None:
            if fault.kind == "http_429":
                self._fault("http_429")
                retry_after = {"Retry-After": _seconds_text(self.config.retry_after_s)}
                return self._error(429, "simulated rate limit (ceb simulator)", headers=retry_after)
            if fault.kind == "http_500":
                self._fault("http_500")
                return self._error(500, "simulated server error (ceb simulator)")
            if fault.kind == "stall":
                self._fault("stall")
                await self._pause(self.config.stall_s)
                if fault.variant >= 0.5:
                    return self._close(request)

        plan = classify(chat.body)
        self.stats.by_kind[plan.kind] = self.stats.by_kind.get(plan.kind, 0) + 1
        completion, longest = self._completion(chat, plan, fault, arrival, prompt_tokens)
        await self._serve(self.service_seconds(prompt_tokens, longest))
        payload = orjson.dumps(completion)
        if fault is not None and fault.kind == "malformed_body":
            self._fault("malformed_body")
            payload = payload[: len(payload) // 2]
        self._count(200)
        return web.Response(body=payload, content_type="application/json")

    def _close(self, request: web.Request) -> NoReturn:
        """Drop the connection without an answer."""
        self._count("closed")
        if request.transport is not None:
            request.transport.close()
        # aiohttp turns this into a 503 that finds the socket closed: the client sees a dropped connection.
        raise web.HTTPServiceUnavailable(text="closed by the ceb simulator")

    def _completion(
        self, chat: _Chat, plan: ReplyPlan, fault: Fault | None, arrival: int, prompt_tokens: int
    ) -> tuple[dict[str, Any], int]:
        """The completion body and the longest choice's generated tokens."""
        body = chat.body
        digest = prompt_digest(self.config.seed, body)
        role = "assistant" if chat.add_generation_prompt else str(chat.messages[-1].get("role", "assistant"))
        echoed = ""
        if chat.echo and chat.messages[-1].get("role") == role:
            echoed = message_text(chat.messages[-1].get("content"))
        content_fault = self._content_fault(fault, plan)
        choices = []
        total = longest = 0
        for i in range(chat.n):
            rng = choice_rng(digest, body, i)
            text = self.replier(body, i, rng)
            if content_fault is not None:
                text = self._corrupt(text, content_fault, plan, choice_rng(digest, body, i))
            finish = "stop"
            generated = count_tokens(text)
            if chat.max_tokens is not None and generated > chat.max_tokens:
                text = "".join(tokenize(text)[: chat.max_tokens])
                generated = chat.max_tokens
                finish = "length"
            total += generated
            longest = max(longest, generated)
            logprobs = None
            if chat.top_logprobs is not None:
                logprobs = completion_logprobs(text, chat.top_logprobs, random.Random(rng.getrandbits(64)))
            choices.append(
                {
                    "index": i,
                    "message": {"role": role, "content": echoed + text, "tool_calls": []},
                    "logprobs": logprobs,
                    "finish_reason": finish,
                    "stop_reason": None,
                }
            )
        if content_fault is not None:
            self._fault(content_fault.kind)
        self.stats.prompt_tokens += prompt_tokens
        self.stats.completion_tokens += total
        completion: dict[str, Any] = {
            "id": f"chatcmpl-sim-{arrival}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.config.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": total,
                "total_tokens": prompt_tokens + total,
            },
            "system_fingerprint": SIMULATOR_ID,
            "prompt_logprobs": None,
        }
        if chat.prompt_logprobs is not None:
            completion["prompt_logprobs"] = self._prompt_logprobs(chat)
        return completion, longest

    @staticmethod
    def _content_fault(fault: Fault | None, plan: ReplyPlan) -> Fault | None:
        """The fault that changes reply texts, if it applies to this kind of reply."""
        if fault is None:
            return None
        if fault.kind == "malformed_content":
            return fault
        if fault.kind == "wrong_label_count" and plan.kind == "labels":
            return fault
        if fault.kind == "bad_score" and plan.kind == "critic":
            return fault
        return None

    @staticmethod
    def _corrupt(text: str, fault: Fault, plan: ReplyPlan, rng: random.Random) -> str:
        if fault.kind == "malformed_content":
            return cut_in_half(text)
        if fault.kind == "wrong_label_count":
            return labels_reply(rng, wrong_count(plan.n_labels or 0, fault.variant))
        return format_critic(bad_score_text(fault.variant), "Simulated out-of-range score (ceb simulator fault).")

    def _prompt_logprobs(self, chat: _Chat) -> orjson.Fragment:
        tokens = chat_tokens(
            chat.messages,
            add_generation_prompt=chat.add_generation_prompt,
            continue_final_message=chat.continue_final_message,
        )
        # Seeded by the whole prompt: the same prompt always gets the same values.
        digest = hashlib.blake2b(f"{self.config.seed}|".encode(), digest_size=16)
        for token in tokens:
            digest.update(token.encode())
        rng = random.Random(int.from_bytes(digest.digest(), "little"))
        return prompt_logprobs(tokens, chat.prompt_logprobs or 0, rng)

    async def _models(self, request: web.Request) -> web.Response:
        model = {
            "id": self.config.model,
            "object": "model",
            "created": 0,
            "owned_by": SIMULATOR_ID,
            "root": self.config.root or self.config.model,
            "parent": None,
            "max_model_len": self.config.max_model_len,
        }
        return _json({"object": "list", "data": [model]})

    async def _version(self, request: web.Request) -> web.Response:
        return _json({"version": SIMULATOR_ID})

    async def _tokenize(self, request: web.Request) -> web.Response:
        self.stats.tokenize_requests += 1
        try:
            body = _checked(orjson.loads(await request.read()), self.config)
            if "messages" in body:
                add_generation_prompt, continue_final_message = _template_flags(body)
                tokens = chat_tokens(
                    _messages(body),
                    add_generation_prompt=add_generation_prompt,
                    continue_final_message=continue_final_message,
                )
            elif isinstance(body.get("prompt"), str):
                tokens = tokenize(body["prompt"])
            else:
                raise _BadRequest("send `prompt` (a string) or `messages`", param="prompt")
        except orjson.JSONDecodeError:
            return self._error(400, "the request body is not valid JSON")
        except _BadRequest as exc:
            return self._error(exc.status, str(exc), param=exc.param)
        return _json(
            {
                "count": len(tokens),
                "max_model_len": self.config.max_model_len,
                "tokens": [token_id(t) for t in tokens],
                "token_strs": tokens if body.get("return_token_strs") else None,
            }
        )

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    def _report(self) -> dict[str, Any]:
        return {
            "simulator": SIMULATOR_ID,
            "note": _NOTE,
            "config": self.config.to_dict(),
            "stats": self.stats.to_dict(),
        }

    async def _stats(self, request: web.Request) -> web.Response:
        return _json(self._report())

    async def _reset(self, request: web.Request) -> web.Response:
        self.reset_stats()
        return _json(self._report())


@asynccontextmanager
async def serve_sim(
    config: SimConfig | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    replier: Replier | None = None,
) -> AsyncIterator[SimServer]:
    """Run a :class:`SimServer` for the ``async with`` block; :class:`OSError` when the address cannot be bound."""
    server = SimServer(config, replier=replier, host=host, port=port)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def run_sim_server(
    config: SimConfig | None = None,
    host: str = "127.0.0.1",
    port: int = 8100,
    *,
    replier: Replier | None = None,
    on_started: Callable[[SimServer], None] | None = None,
) -> None:
    """Serve until Ctrl-C (``ceb sim-server``), calling ``on_started`` with the started server."""

    async def main() -> None:
        async with serve_sim(config, host, port, replier) as server:
            if on_started is not None:
                on_started(server)
            await anyio.sleep_forever()

    with suppress(KeyboardInterrupt):
        anyio.run(main)
