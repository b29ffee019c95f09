"""A real OpenAI-compatible HTTP server on loopback, for testing backends through our aiohttp client.

The server is an aiohttp app bound to ``127.0.0.1`` on an ephemeral port, started inside the running event
loop. Each test scripts the replies with a *responder*: ``(body, call_index) -> Reply``, called once per
``POST /v1/chat/completions`` with the decoded JSON body and the 0-based index of that call. There is no
default reply: a test that forgot to set one gets a clear failure instead of a plausible-looking answer.

Usage::

    async with serve_openai(lambda body, i: Reply('{"score": 0.9}')) as server:
        settings = BackendConfig(base_url=server.base_url, model=server.model)
        async with OpenAIBackend(settings) as backend:
            response = await backend.complete(ChatRequest(messages=({"role": "user", "content": "hi"},)))
        assert server.requests[0]["messages"][0]["content"] == "hi"

or, in a test, the ``openai_server`` fixture of ``tests/conftest.py`` (set ``openai_server.responder``).

Endpoints:
    ``GET /v1/models``: the one model the server was started with.
    ``POST /v1/chat/completions``: a ``chat.completion`` with ``n`` choices, or the scripted error.

Token counts in ``usage`` are whitespace-split words, not a real tokenizer's count: enough to check that
usage is carried through, not to measure anything.

Log-probabilities are whatever the reply scripts: ``Reply(..., logprobs=...)`` fills each choice's
``logprobs.content`` the way OpenAI does, and ``Reply(..., prompt_logprobs=...)`` adds vLLM's top-level
``prompt_logprobs`` (and ``prompt_token_ids`` when given).

Profiles: ``openai`` (the default) does what the responder scripts. ``llama.cpp`` behaves as llama-cpp-python's
server (``python -m llama_cpp.server``, 0.3.36) was measured to, whatever the responder scripts:

* a request whose ``X-Request-Id`` is not a UUID gets a 400 with an empty body (its request-id middleware);
* ``response_format`` of a type other than ``text`` / ``json_object`` gets a 500 with the validation error
  (it takes ``{"type": "json_object", "schema": ...}``);
* ``max_completion_tokens``, ``n``, ``prompt_logprobs``, ``continue_final_message``, ``add_generation_prompt``,
  ``priority`` and ``structured_outputs`` are ignored: one choice, no prompt log-probs, the whole prompt with a new
  generation prompt (counted into ``prompt_tokens``), and a reply cut only by ``max_tokens`` (in words here);
* there is no ``/metrics``.

Refused requests are kept in ``refused`` (not ``requests``), so a test sees both what was refused and what passed.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID

import anyio
from aiohttp import web

from ceb.backends.openai import PREFLIGHT_MESSAGES

__all__ = [
    "LLAMA_CPP_SCHEMA_ERROR",
    "NoResponderError",
    "OpenAITestServer",
    "PromptPosition",
    "Profile",
    "Reply",
    "Responder",
    "TokenSpec",
    "serve_openai",
]

Profile = Literal["openai", "llama.cpp"]
"""How the server behaves beyond the scripted replies (see the module docstring)."""

LLAMA_CPP_SCHEMA_ERROR = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input "
    "should be 'text' or 'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or 'json_object'\"}}"
    '\n\n  File "llama_cpp/server/app.py", line 376, in create_chat_completion\n    POST /v1/chat/completions'
)
"""The message of llama-cpp-python's 500 to ``response_format.type = "json_schema"`` as 0.3.36 sent it (FastAPI's
validation error for its request model, caught by its route error handler as an internal server error)."""

LLAMA_CPP_PREFLIGHT_REPLY = "OK, here is one word: ok"
"""What the llama.cpp profile answers ceb's one-token preflight when no ``max_tokens`` cuts it."""

TokenSpec = tuple[str, float] | tuple[str, float, Sequence[tuple[str, float]]]
"""One generated token: ``(token, logprob)`` or ``(token, logprob, [(alternative, logprob), ...])``."""

PromptPosition = Mapping[int, tuple[str, float, int]] | None
"""One prompt token as vLLM reports it: ``{token_id: (decoded_token, logprob, rank)}``, the prompt's own token
first, then the top alternatives; ``None`` for the first prompt token."""


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer to a chat-completions request.

    Attributes:
        contents: Reply text per choice: a list of exactly ``n`` strings (choice ``i`` gets ``contents[i]``),
            or one string used for every choice.
        status: HTTP status. Anything but 200 sends an OpenAI-style error body (or ``body``).
        headers: Extra response headers, e.g. ``{"Retry-After": "0"}``.
        body: Sent verbatim instead of the generated completion or error: a dict as JSON, a str as
            ``text/plain`` (to test unreadable replies).
        delay_s: Seconds to wait before answering (to trigger client timeouts). Cut short when the server
            stops, so a test never waits on it at teardown.
        logprobs: Per choice (exactly ``n`` lists), the generated tokens as :data:`TokenSpec`; sent as
            ``choices[i].logprobs.content``. ``None``: every choice has ``"logprobs": null``.
        prompt_logprobs: vLLM's ``prompt_logprobs``, one :data:`PromptPosition` per prompt token.
        prompt_token_ids: vLLM's ``prompt_token_ids``, sent only when given.
    """

    contents: str | Sequence[str] = ""
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Mapping[str, Any] | str | None = None
    delay_s: float = 0.0
    logprobs: Sequence[Sequence[TokenSpec]] | None = None
    prompt_logprobs: Sequence[PromptPosition] | None = None
    prompt_token_ids: Sequence[int] | None = None

    @classmethod
    def error(
        cls,
        status: int,
        *,
        headers: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | str | None = None,
        delay_s: float = 0.0,
    ) -> Reply:
        """An error reply: ``Reply.error(429, headers={"Retry-After": "0"})``."""
        return cls(status=status, headers=dict(headers or {}), body=body, delay_s=delay_s)


Responder = Callable[[dict[str, Any], int], Reply]
"""``(request body, 0-based call index) -> Reply``; called once per chat-completions request."""


class NoResponderError(AssertionError):
    """The test did not set a responder before the server got a chat-completions request."""


def _no_responder(body: dict[str, Any], call_index: int) -> Reply:
    raise NoResponderError(
        "OpenAITestServer got a chat-completions request but no responder is set: "
        "pass one to serve_openai(...) or assign openai_server.responder in the test"
    )


def _words(text: object) -> int:
    """Rough token count: whitespace-split words (content parts' ``text`` included). Not a tokenizer."""
    if isinstance(text, str):
        return len(text.split())
    if isinstance(text, list):
        return sum(_words(part.get("text", "")) for part in text if isinstance(part, dict))
    return 0


class OpenAITestServer:
    """An aiohttp app speaking the OpenAI chat API on ``127.0.0.1``; see the module docstring.

    Attributes:
        model: The model ``GET /v1/models`` lists.
        responder: Scripts the replies; assign it at any time.
        requests: JSON body of every chat-completions request, in arrival order.
        headers: Request headers of each entry of ``requests`` (same index), names lower-cased.
        in_flight: Chat-completions requests being handled now (delays included).
        max_in_flight: Highest ``in_flight`` seen.
        failures: Exceptions the responder raised; re-raised when the server stops (see :func:`serve_openai`).
        preflights: Bodies of ``ceb``'s preflight requests, answered ``"ok"`` by the server itself, not the
            responder, and kept out of ``requests`` (a run's own requests keep their call indices).
        answer_preflight: Set ``False`` to hand preflight requests to the responder like any other.
        profile: ``openai`` or ``llama.cpp`` (see the module docstring).
        root: The weights ``GET /v1/models`` reports the model loaded (vLLM's ``root``); ``None``: no ``root``
            field, as from OpenAI. Change it between runs to serve another model under the same name and URL.
        version: What ``GET /version`` (at the server root) reports, as vLLM does; ``None``: a 404, as from OpenAI.
    """

    def __init__(
        self, responder: Responder | None = None, *, model: str = "test-model", profile: Profile = "openai"
    ) -> None:
        self.model = model
        self.profile: Profile = profile
        self.refused: list[tuple[dict[str, str], dict[str, Any] | None, int]] = []
        """llama.cpp profile: ``(headers, body, status)`` of each request refused before the responder saw it."""
        self.responder: Responder = responder or _no_responder
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.failures: list[BaseException] = []
        self.preflights: list[dict[str, Any]] = []
        self.answer_preflight = True
        self.root: str | None = None
        self.version: str | None = None
        self.identity_requests = 0
        """``GET /v1/models`` and ``GET /version`` requests served (a run asks them once per endpoint)."""
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._closing: anyio.Event | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``, the ``base_url`` to give a client."""
        if self._port is None:
            raise RuntimeError("the server is not started")
        return f"http://127.0.0.1:{self._port}/v1"

    async def start(self) -> None:
        """Bind to an ephemeral port on 127.0.0.1 and start serving in the running loop."""
        self._closing = anyio.Event()
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/version", self._version)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        # A short shutdown timeout: handlers never outlive a test (delays end when `_closing` is set).
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """End pending delays and close every connection and the listening socket."""
        if self._closing is not None:
            self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _llama_refusal(self, request: web.Request, body: dict[str, Any] | None) -> web.Response | None:
        """llama.cpp profile: the refusal llama-cpp-python's server gives this request, if any."""
        if self.profile != "llama.cpp":
            return None
        headers = {k.lower(): v for k, v in request.headers.items()}
        rid = headers.get("x-request-id")
        if rid is not None:
            try:
                UUID(rid)
            except ValueError:
                self.refused.append((headers, body, 400))
                return web.Response(status=400, body=b"")
        response_format = (body or {}).get("response_format")
        if isinstance(response_format, dict) and response_format.get("type") not in ("text", "json_object"):
            self.refused.append((headers, body, 500))
            error = {"message": LLAMA_CPP_SCHEMA_ERROR, "type": "internal_server_error", "param": None, "code": None}
            return web.json_response({"error": error}, status=500)
        return None

    async def _models(self, request: web.Request) -> web.Response:
        if (refusal := self._llama_refusal(request, None)) is not None:
            return refusal
        self.identity_requests += 1
        entry = {"id": self.model, "object": "model", "created": 0, "owned_by": "ceb-test"}
        if self.root is not None:
            entry |= {"root": self.root, "max_model_len": 4096}
        return web.json_response({"object": "list", "data": [entry]})

    async def _version(self, request: web.Request) -> web.Response:
        self.identity_requests += 1
        if self.version is None:
            return web.json_response({"detail": "Not Found"}, status=404)
        return web.json_response({"version": self.version})

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if (refusal := self._llama_refusal(request, body)) is not None:
            return refusal
        if self.answer_preflight and body.get("messages") == list(PREFLIGHT_MESSAGES):
            self.preflights.append(body)
            return self._render(Reply(LLAMA_CPP_PREFLIGHT_REPLY if self.profile == "llama.cpp" else "ok"), body, -1)
        call_index = len(self.requests)
        self.requests.append(body)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            try:
                reply = self.responder(body, call_index)
            except Exception as exc:  # surfaced to the test by serve_openai / the fixture
                self.failures.append(exc)
                # 400 so the backend does not retry a broken test script.
                return _error_response(400, f"test responder failed: {exc!r}")
            if reply.delay_s > 0 and self._closing is not None:
                with anyio.move_on_after(reply.delay_s):
                    await self._closing.wait()
            return self._render(reply, body, call_index)
        finally:
            self.in_flight -= 1

    def _render(self, reply: Reply, body: dict[str, Any], call_index: int) -> web.Response:
        headers = dict(reply.headers)
        if isinstance(reply.body, str):
            return web.Response(status=reply.status, text=reply.body, headers=headers)
        if reply.body is not None:
            return web.json_response(dict(reply.body), status=reply.status, headers=headers)
        if reply.status != 200:
            return _error_response(reply.status, f"scripted error {reply.status}", headers)
        if self.profile == "llama.cpp":
            return self._render_llama(reply, body, call_index, headers)
        n = int(body.get("n") or 1)
        contents = [reply.contents] * n if isinstance(reply.contents, str) else list(reply.contents)
        if len(contents) != n:
            exc = AssertionError(f"Reply has {len(contents)} contents but the request asked for n={n}")
            self.failures.append(exc)
            return _error_response(400, str(exc))
        if reply.logprobs is not None and len(reply.logprobs) != n:
            exc = AssertionError(
                f"Reply has logprobs for {len(reply.logprobs)} choices but the request asked for n={n}"
            )
            self.failures.append(exc)
            return _error_response(400, str(exc))
        prompt_tokens = sum(_words(m.get("content")) for m in body.get("messages", []))
        completion_tokens = sum(_words(c) for c in contents)
        completion: dict[str, Any] = {
            "id": f"chatcmpl-test-{call_index}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                    "logprobs": None if reply.logprobs is None else {"content": [_token(t) for t in reply.logprobs[i]]},
                }
                for i, text in enumerate(contents)
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        if reply.prompt_logprobs is not None:
            completion["prompt_logprobs"] = [
                None
                if pos is None
                else {
                    str(token_id): {"logprob": lp, "rank": rank, "decoded_token": text}
                    for token_id, (text, lp, rank) in pos.items()
                }
                for pos in reply.prompt_logprobs
            ]
        if reply.prompt_token_ids is not None:
            completion["prompt_token_ids"] = list(reply.prompt_token_ids)
        return web.json_response(completion, headers=headers)

    def _render_llama(
        self, reply: Reply, body: dict[str, Any], call_index: int, headers: dict[str, str]
    ) -> web.Response:
        """One choice, cut by ``max_tokens`` alone, no prompt log-probs; ``n`` and vLLM's fields go unread."""
        text = reply.contents if isinstance(reply.contents, str) else list(reply.contents)[0]
        words = text.split(" ")
        budget = body.get("max_tokens")
        cut = isinstance(budget, int) and len(words) > budget
        if cut:
            text = " ".join(words[:budget])
        messages = body.get("messages", [])
        # The chat template closes every message and opens a new assistant turn, whatever the body asks:
        # one more "token" than vLLM's continuation of the last message would count.
        prompt_tokens = sum(_words(m.get("content")) for m in messages) + 1
        completion_tokens = _words(text)
        logprobs = None
        if reply.logprobs is not None and body.get("logprobs"):
            logprobs = {"content": [_token(t) for t in reply.logprobs[0]]}
        completion = {
            "id": f"chatcmpl-llama-{call_index}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": logprobs,
                    "finish_reason": "length" if cut else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        return web.json_response(completion, headers=headers)


def _token(spec: TokenSpec) -> dict[str, Any]:
    """One ``logprobs.content`` entry in OpenAI's shape."""
    top = spec[2] if len(spec) == 3 else ()
    return {
        "token": spec[0],
        "logprob": spec[1],
        "bytes": list(spec[0].encode()),
        "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top],
    }


def _error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    error = {"message": message, "type": "test_error", "param": None, "code": None}
    return web.json_response({"error": error}, status=status, headers=dict(headers or {}))


@asynccontextmanager
async def serve_openai(
    responder: Responder | None = None, *, model: str = "test-model", profile: Profile = "openai"
) -> AsyncIterator[OpenAITestServer]:
    """Run an :class:`OpenAITestServer` for the duration of the ``async with`` block.

    Raises:
        AssertionError: On exit, the first exception the responder raised, unless the block is already
            raising (a client usually fails first with that message in its 400 reply).
    """
    server = OpenAITestServer(responder, model=model, profile=profile)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
    if server.failures:
        first = server.failures[0]
        raise AssertionError(f"the test server's responder failed: {first!r}") from first
