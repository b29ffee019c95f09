"""The ``openai`` transport: ``POST {base_url}/chat/completions`` as vLLM, OpenAI and Azure OpenAI's v1 API serve it.

One :class:`aiohttp.ClientSession` per endpoint with orjson bodies, not the ``openai`` SDK (against :mod:`ceb.sim` at
zero latency the SDK cost about 2.4 ms of client CPU per request, a plain session 0.2 ms). Sessions are made in the
running asyncio loop on first use (aiohttp does not run on trio). Retries are the client's
(:class:`~ceb.backends.base.ChatBackend`). Differences of other servers (llama-cpp-python: UUID request ids,
``json_object`` with the schema, ``max_tokens``, no ``n``) are learnt from their refusals and recorded in
:attr:`OpenAITransport.adaptations` (``docs/llama-cpp.md``). The API key, read from ``api_key_env``, is sent only as
``Authorization: Bearer`` and redacted from error text.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import re
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
import anyio
import orjson
from yarl import URL

from ceb.backends._wire import (
    StructuredOutput,
    chat_body,
    error_message,
    parse_stream_event,
    read_completion,
    retry_after,
)
from ceb.backends.base import ChatBackend, EndpointLimits, RetrySettings, register_backend
from ceb.backends.scheduling import current_lane, current_priority, lane_tag, server_priority
from ceb.backends.transport import (
    ChatRequest,
    Completion,
    ModelIdentity,
    StreamChunk,
    TokenLogprob,
    TransientError,
    Transport,
    public_url,
    weights_digest,
)
from ceb.config import BackendConfig
from ceb.errors import BackendError, ConfigError, FatalBackendError, UnsupportedFeatureError
from ceb.logs import get_logger

__all__ = [
    "SESSION_HEADER",
    "OpenAIBackend",
    "OpenAITransport",
    "ServerPriority",
    "StructuredOutput",
    "model_ids",
    "open_openai",
]

log = get_logger(__name__)


_PLACEHOLDER_KEY = "EMPTY"
"""Sent to loopback and private endpoints when no key is set: vLLM without ``--api-key`` accepts any."""

_KEEPALIVE_S = 4.0
"""Idle seconds a connection is kept: under uvicorn's default 5 s, so the client drops it first."""

_JSON_OPTIONS = orjson.OPT_NON_STR_KEYS
"""Integer keys (``logit_bias`` token ids) become strings, as ``json.dumps`` sends them."""

REQUEST_ID_HEADER = "X-Request-Id"
"""vLLM's request id header (its logs, traces and responses); a new one per attempt."""

SESSION_HEADER = "X-Session-Id"
"""Default header carrying the lane key, for a router to pin a lane to one replica: vLLM production-stack's
``--routing-logic session --session-key <name>``, llm-d's ``session_id_header`` (not its router-issued
``x-session-token``)."""

ServerPriority = Literal["auto", "on", "off"]
"""Whether bodies carry vLLM's ``priority`` field: ``on``, ``off``, or ``auto`` (sent until a 400 names the field, as
OpenAI's 400 does; vLLM 0.32 accepts it under either policy, ordering by it under ``--scheduling-policy priority``)."""


PREFLIGHT_MESSAGES: tuple[dict[str, str], ...] = ({"role": "user", "content": "Reply with one word."},)
"""The messages of the preflight's one-token request."""

_PERMANENT = (aiohttp.ClientSSLError, aiohttp.ClientConnectorDNSError)
"""Connection failures no retry fixes: TLS errors and unresolvable names (a refused connection stays transient)."""


def model_ids(body: bytes) -> list[str] | None:
    """The ids of a ``GET /models`` body in listed order, once each; ``None`` when it is not an OpenAI model list."""
    try:
        return list(dict.fromkeys(str(m["id"]) for m in orjson.loads(body)["data"]))
    except (ValueError, KeyError, TypeError):
        return None


def _listed(body: bytes, model: str) -> dict[str, Any] | None:
    """The entry of ``model`` in a ``GET /models`` body, if listed."""
    try:
        for entry in orjson.loads(body)["data"]:
            if isinstance(entry, dict) and str(entry.get("id")) == model:
                return entry
    except (ValueError, KeyError, TypeError):
        return None
    return None


def _version(body: bytes) -> str | None:
    """The version in vLLM's ``GET /version`` body (``{"version": "0.11.0"}``), if any."""
    try:
        doc = orjson.loads(body)
    except ValueError:
        return None
    version = doc.get("version") if isinstance(doc, dict) else None
    return version if isinstance(version, str) and version else None


class _Ids:
    """Per-process unique 32-hex ids: a random 64-bit prefix (new in a forked child) and a counter; no syscall each."""

    def __init__(self) -> None:
        self.renew()
        os.register_at_fork(after_in_child=self.renew)

    def renew(self) -> None:
        """A new prefix, and the count from 0."""
        self._prefix = os.urandom(8).hex()
        self._count = itertools.count()

    def next(self) -> str:
        """The next id."""
        return f"{self._prefix}{next(self._count):016x}"


_IDS = _Ids()


def request_id(stage: str, lane: str | None = None) -> str:
    """``ceb-<stage>-[<lane tag>-]<32 hex>``: a per-attempt id that traces a server log line to its stage and lane.

    Unique across the processes of a run (a random per-process prefix and a count), not a uuid4: an os.urandom call
    per attempt took about 1% of a busy client's time (benchmarks/pipeline.py under py-spy).
    """
    tag = f"{lane_tag(lane)}-" if lane is not None else ""
    return f"ceb-{stage or 'request'}-{tag}{_IDS.next()}"


def _is_uuid(value: str | None) -> bool:
    try:
        uuid.UUID(value or "")
    except ValueError:
        return False
    return True


CONTINUE_FIELDS = ("continue_final_message",)
"""vLLM fields whose silent omission changes a reply's meaning (the model answers afresh instead of continuing), refused
at servers known to ignore unknown fields."""


def _is_local(url: str) -> bool:
    """Whether ``url``'s host is loopback or private (a DNS name other than ``localhost`` is not)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # a DNS name: cannot tell, so a key is required
    return ip.is_loopback or ip.is_private or ip.is_unspecified


def _env_proxy(url: str) -> str | None:
    """The ``HTTP(S)_PROXY`` for ``url``, honouring ``NO_PROXY`` (``trust_env`` would read ``~/.netrc`` per request)."""
    parts = urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def _jsonable(value: Any) -> Any:
    """Encode read-only mappings as objects (orjson's ``default``)."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_VALIDATION_ERROR = re.compile(r"\b\d+ validation errors?\b")
"""Pydantic's "N validation error(s)": a request the server's model refused."""


class OpenAITransport(Transport):
    """Chat completions over HTTP with aiohttp, one connection pool per endpoint.

    Args:
        settings: The ``backend`` section: ``base_url`` (several: replicas), ``model`` (else the one ``GET /models``
            lists), ``api_key_env`` (unset: ``"EMPTY"`` for loopback and private URLs only), ``timeout_s`` (one attempt,
            whole reply), ``structured_output``, ``token_limit_field``, ``server_priority``, ``session_header``.

    Raises:
        ConfigError: No ``base_url``; no ``model`` with ``preflight`` off; a URL that is not ``http(s)://host``, or
            carries credentials; no key for a non-local endpoint.
    """

    name = "openai"

    def __init__(self, settings: BackendConfig) -> None:
        if not settings.base_urls:
            raise ConfigError("the openai backend needs backend.base_url (--base-url)")
        if not settings.model and not settings.preflight:
            raise ConfigError("the openai backend needs backend.model (--model) when backend.preflight is off")
        super().__init__(settings.base_urls)
        self.settings = settings
        self.model: str = settings.model or ""
        """The model every request names."""
        self.send_priority = settings.server_priority != "off"
        """Bodies carry vLLM's ``priority`` now (``auto`` turns it off on a refusal)."""
        self.structured_output: StructuredOutput = settings.structured_output
        """The mode now: ``json_schema`` becomes ``json_object_schema`` where the server refuses it naming
        ``json_object``."""
        self.token_limit_field: Literal["max_completion_tokens", "max_tokens"] = settings.token_limit_field
        """The budget's wire name now: ``max_tokens`` once the server is seen to run past ``max_completion_tokens``."""
        self.uuid_request_ids = False
        """Request ids are bare UUIDs (the server refused others with an empty 400)."""
        self.n_ignored = False
        """The server ignores ``n``: each choice is asked for in its own request."""
        self.unsupported: dict[str, str] = {}
        """Body fields this server ignores where that changes the meaning, with why: refused, not sent."""
        self._identity: ModelIdentity | None = None
        self._identifying = anyio.Lock()
        for url in self.endpoints:
            try:
                parts = urlsplit(url)
                _ = parts.port  # raises on a port that is not a number in 0..65535
            except ValueError:
                parts = None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"base_url {public_url(url)!r} is not an http(s) URL like http://127.0.0.1:8000/v1")
            if "@" in parts.netloc:  # aiohttp would refuse them at the first request, with a traceback
                raise ConfigError(
                    f"base_url {public_url(url)!r} carries credentials (user:password@, not shown): remove them and "
                    f"put the key in the environment variable {settings.api_key_env}"
                )
        key = os.environ.get(settings.api_key_env)
        if not key:
            remote = [url for url in self.endpoints if not _is_local(url)]
            if remote:
                raise ConfigError(
                    f"no API key: set the environment variable {settings.api_key_env} for {', '.join(remote)}"
                )
            key = _PLACEHOLDER_KEY
        self._key = key
        # Sent with each request rather than as session defaults: aiohttp copies a session's default headers
        # into the proxy's CONNECT request, which would hand the key to a proxy as Proxy-Authorization.
        self._headers = {
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self._urls = {url: URL(url.rstrip("/") + "/chat/completions") for url in self.endpoints}
        self._sessions: dict[str, aiohttp.ClientSession] = {}

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body of ``POST /chat/completions`` for ``request``, exactly as sent.

        :func:`~ceb.backends._wire.chat_body`, plus vLLM's top-level ``priority``
        (:func:`~ceb.backends.scheduling.server_priority` of the caller's priority) when it is not 0,
        :attr:`send_priority` holds and ``request.extra`` does not set it.

        Raises:
            ValueError: ``request.extra`` repeats a field the request sets.
        """
        body = chat_body(
            request,
            model=self.model,
            structured_output=self.structured_output,
            token_limit_field=self.token_limit_field,
        )
        wire_priority = server_priority(current_priority())
        if self.send_priority and wire_priority and "priority" not in body:  # 0 is vLLM's default: left out
            body["priority"] = wire_priority
        return body

    def headers(self, request: ChatRequest) -> dict[str, str]:
        """One attempt's headers: key, content type, a fresh :func:`request_id` (or UUID), the lane as session."""
        key = current_lane()
        rid = str(uuid.uuid4()) if self.uuid_request_ids else request_id(request.stage, key)
        headers = self._headers | {REQUEST_ID_HEADER: rid}
        if key is not None and self.settings.session_header:
            headers[self.settings.session_header] = key
        return headers

    def _session(self, endpoint: str) -> aiohttp.ClientSession:
        """The session of ``endpoint``, made in the running loop on first use."""
        session = self._sessions.get(endpoint)
        if session is None:
            # No connector limit: the client's slots are the one bound, so waits count as queue time, not latency.
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=_KEEPALIVE_S)
            session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.settings.timeout_s),
                proxy=_env_proxy(endpoint),
            )
            self._sessions[endpoint] = session
        return session

    async def send(self, request: ChatRequest, endpoint: str) -> Completion:
        """Send one attempt of ``request`` to ``endpoint`` and read the reply.

        A server that returns fewer than ``n`` choices gets the rest asked one request each (choice ``i`` with ``seed +
        i``), within this attempt; later requests go that way at once.

        Raises:
            TransientError: A timeout, a failed or dropped connection, 429 or 5xx (``retry_after`` from
                ``Retry-After``), or a 2xx body that is not a chat completion.
            FatalBackendError: 401, 403 or 404 (key, model or URL), a TLS failure or a host that does not resolve.
            BackendError: Any other status: the request was refused.
            UnsupportedFeatureError: The request carries a field in :attr:`unsupported`.
            ValueError: ``request.extra`` repeats a field the request sets.
            TypeError: A value of ``request.extra`` is not JSON.
        """
        ignored = [f for f in CONTINUE_FIELDS if request.extra.get(f) and f in self.unsupported]
        if ignored:
            raise UnsupportedFeatureError(
                f"{ignored[0]} cannot be used here: {self.unsupported[ignored[0]]}", backend=self.label
            )
        if request.n > 1 and self.n_ignored:
            return await self._choice_by_choice(request, endpoint, [])
        completion = await self._post(request, endpoint)
        if request.n > 1 and len(completion.texts) < request.n:
            self.n_ignored = True
            self._adapt(
                "n",
                f"the server ignores n ({len(completion.texts)} choice(s) for n={request.n}): ceb asks for each "
                "choice in a request of its own",
            )
            return await self._choice_by_choice(request, endpoint, [completion])
        return completion

    async def _choice_by_choice(self, request: ChatRequest, endpoint: str, got: list[Completion]) -> Completion:
        """``request``'s choices after those in ``got``, one request each, merged."""
        have = sum(len(c.texts) for c in got)
        for i in range(have, request.n):
            seed = None if request.seed is None else request.seed + i
            got.append(await self._post(replace(request, n=1, seed=seed), endpoint))
        return _merge(got, request.n)

    async def _post(self, request: ChatRequest, endpoint: str) -> Completion:
        """One request, sent again at once after a refusal it adapted to."""
        for _ in range(3):  # each adaptation changes what is sent, once: a refusal cannot come back for it
            body = self.payload(request)
            data = orjson.dumps(body, default=_jsonable, option=_JSON_OPTIONS)
            headers = self.headers(request)
            with self._wire_errors(endpoint):
                async with self._session(endpoint).post(self._urls[endpoint], data=data, headers=headers) as resp:
                    status = resp.status
                    raw = await resp.read()
                    wait = retry_after(resp.headers.get("Retry-After")) if status >= 300 else None
            if status >= 300:
                if self._adapt_to_refusal(status, raw, headers, body, endpoint):
                    continue
                raise self._status_error(status, raw, wait, endpoint)
            try:
                return read_completion(
                    raw,
                    default_model=self.model,
                    asked_prompt_logprobs=request.extra.get("prompt_logprobs"),
                )
            except (TypeError, ValueError, KeyError) as exc:  # orjson.JSONDecodeError is a ValueError
                raise TransientError(f"unreadable response body from {endpoint}") from exc
        raise TransientError(f"{endpoint} kept refusing the request after ceb adapted it")

    def _adapt_to_refusal(
        self, status: int, raw: bytes, headers: Mapping[str, str], body: Mapping[str, Any], endpoint: str
    ) -> bool:
        """Adapt to a refusal llama-cpp-python's server (0.3) makes; ``True`` when the request may go again.

        An empty 400 to a non-UUID ``X-Request-Id``, and a 400/422/500 naming ``json_object`` to ``response_format.type
        = "json_schema"``; judged by what the refused request carried, so concurrent ones are resent too.
        """
        if status == 400 and not raw.strip() and not _is_uuid(headers.get(REQUEST_ID_HEADER)):
            self.uuid_request_ids = True
            self._adapt(
                "request_id",
                f"the server refuses {REQUEST_ID_HEADER} values that are not UUIDs (an empty 400): ceb sends UUIDs",
                endpoint,
            )
            return True
        response_format = body.get("response_format")
        if (
            status in (400, 422, 500)
            and isinstance(response_format, Mapping)
            and response_format.get("type") == "json_schema"
            and b"json_object" in raw
        ):
            self.structured_output = "json_object_schema"
            self._adapt(
                "structured_output",
                f"the server refuses response_format json_schema ({status}): ceb sends json_object with the schema "
                '(structured_output = "json_object_schema" skips the refused first request)',
                endpoint,
            )
            return True
        return False

    def _adapt(self, name: str, note: str, endpoint: str | None = None) -> None:
        """Record (and log once) what ceb does differently at this server."""
        if name not in self.adaptations:
            self.adaptations[name] = note
            log.warning("adapting to the server", endpoint=endpoint or ",".join(self.endpoints), change=note)

    def note_budget(self, request: ChatRequest, completion: Completion) -> bool:
        """Switch to ``max_tokens`` where ``completion`` ran past a ``max_completion_tokens`` budget; whether it did."""
        used = completion.completion_tokens
        if self.token_limit_field != "max_completion_tokens" or used is None or used <= request.max_tokens * request.n:
            return False
        self.token_limit_field = "max_tokens"
        self._adapt(
            "max_tokens",
            f"the server ignores max_completion_tokens ({used} tokens for a budget of {request.max_tokens}): ceb sends "
            "max_tokens",
        )
        return True

    @asynccontextmanager
    async def open_stream(self, request: ChatRequest, endpoint: str) -> AsyncIterator[AsyncIterator[StreamChunk]]:
        """Send one attempt with ``stream: true`` and ``include_usage``; yield its server-sent events as they come.

        Leaving early closes the connection: vLLM sees the client gone and aborts the request (``AsyncLLM.generate``).

        Raises:
            TransientError, FatalBackendError, BackendError: On entering, as :meth:`send`; while iterating,
                :class:`TransientError` for a timeout, a dropped connection or an unreadable event.
        """
        body = self.payload(request) | {"stream": True, "stream_options": {"include_usage": True}}
        data = orjson.dumps(body, default=_jsonable, option=_JSON_OPTIONS)
        headers = self.headers(request) | {"Accept": "text/event-stream"}
        with self._wire_errors(endpoint):
            async with self._session(endpoint).post(self._urls[endpoint], data=data, headers=headers) as resp:
                if resp.status >= 300:
                    raw = await resp.read()
                    if self._adapt_to_refusal(resp.status, raw, headers, body, endpoint):
                        raise TransientError(f"{resp.status} from {endpoint}: retrying as this server needs")
                    wait = retry_after(resp.headers.get("Retry-After"))
                    raise self._status_error(resp.status, raw, wait, endpoint)
                yield self._events(resp, endpoint)

    async def _events(self, resp: aiohttp.ClientResponse, endpoint: str) -> AsyncIterator[StreamChunk]:
        with self._wire_errors(endpoint, permanent=False, what="stream from {} broke"):
            async for line in resp.content:
                try:
                    event = parse_stream_event(line)
                except (TypeError, ValueError, KeyError) as exc:
                    raise TransientError(f"unreadable stream event from {endpoint}: {exc}") from exc
                if event is not None:
                    yield event

    @contextmanager
    def _wire_errors(
        self, where: str, *, permanent: bool = True, what: str = "connection to {} failed"
    ) -> Iterator[None]:
        """Raise aiohttp's failures at ``where`` as :class:`TransientError`, or fatal (TLS, DNS) when ``permanent``."""
        try:
            yield
        except TimeoutError as exc:  # aiohttp's total timeout, and its ServerTimeoutError subclasses
            raise TransientError(f"timeout after {self.settings.timeout_s}s at {where}") from exc
        except (aiohttp.ClientError, OSError) as exc:  # refused, reset or dropped connections, a reply not HTTP
            if permanent and isinstance(exc, _PERMANENT):
                raise self._permanent(where, exc) from exc
            raise TransientError(f"{what.format(where)}: {self._redact(str(exc) or repr(exc))}") from exc

    def _status_error(self, status: int, raw: bytes, wait: float | None, endpoint: str) -> Exception:
        """The exception for an error status, carrying the server's message."""
        message = self._redact(error_message(raw))
        if status == 400 and self._priority_refused(message):
            self.send_priority = False
            log.warning("the server refuses the priority field; sending requests without it", endpoint=endpoint)
            return TransientError(f"{status} from {endpoint}: {message} (retrying without priority)")
        if status == 500 and _VALIDATION_ERROR.search(message):
            # llama-cpp-python answers a validation error with a 500; the same body would be refused again.
            return BackendError(f"{status} from server, a request validation error (not retried): {message}")
        if status == 429 or status >= 500:
            return TransientError(f"{status} from {endpoint}: {message}", retry_after=wait)
        if status in (401, 403, 404):
            return FatalBackendError(
                f"{status} from server: {message} (check the key variable {self.settings.api_key_env}, "
                f"the model name {self.model!r} and the base URL {endpoint})",
                backend=self.label,
            )
        return BackendError(f"{status} from server: {message}", backend=self.label)

    def _priority_refused(self, message: str) -> bool:
        """Whether a 400's message refuses the ``priority`` field sent under ``auto``."""
        return self.settings.server_priority == "auto" and self.send_priority and "priority" in message.lower()

    def _permanent(self, endpoint: str, exc: BaseException) -> FatalBackendError:
        """The error for a TLS failure or a host that does not resolve."""
        detail = self._redact(str(exc) or repr(exc))
        if isinstance(exc, aiohttp.ClientSSLError):
            hint = " (an https:// URL for a plain-http server? vLLM serves http unless given --ssl-keyfile)"
            return FatalBackendError(f"TLS handshake with {endpoint} failed{hint}: {detail}", backend=self.label)
        return FatalBackendError(f"cannot resolve the host of {endpoint}: {detail}", backend=self.label)

    async def preflight(self) -> None:
        """Check each endpoint before a run: ``GET /models`` lists the model, and a one-token request is answered.

        One attempt each; a server without ``GET /models`` passes that check.

        Raises:
            FatalBackendError: Nothing listens, the host does not resolve, TLS fails, the key is refused, the model is
                not served or the request fails; names the endpoint.
        """
        for endpoint in self.endpoints:
            try:
                status, body = await self.get("models", endpoint=endpoint)
            except TransientError as exc:
                cause = exc.__cause__
                if isinstance(cause, _PERMANENT):
                    raise self._permanent(endpoint, cause) from exc
                down = isinstance(cause, aiohttp.ClientConnectorError) and isinstance(
                    cause.os_error, ConnectionRefusedError
                )
                what = "nothing is listening there (connection refused)" if down else str(exc)
                raise FatalBackendError(
                    f"preflight: {endpoint} cannot be reached: {what}; is the server up, and is this its URL?",
                    backend=self.label,
                ) from exc
            if status in (401, 403):
                raise self._status_error(status, body, None, endpoint)
            if not self.model:
                self._only_model(endpoint, model_ids(body) if status == 200 else None)
            elif status == 200:
                served = model_ids(body)
                if served is not None and self.model not in served:
                    raise FatalBackendError(
                        f"preflight: {endpoint} does not serve the model {self.model!r}; it serves: "
                        f"{', '.join(sorted(served)) or '(none)'}",
                        backend=self.label,
                    )
            ping = ChatRequest(
                messages=PREFLIGHT_MESSAGES,
                max_tokens=1,
                temperature=0.0,
                stage="preflight",
            )
            try:
                sending = self.send_priority
                try:
                    pong = await self.send(ping, endpoint)
                except TransientError:
                    if not sending or self.send_priority:
                        raise
                    pong = await self.send(ping, endpoint)  # `auto` just dropped the refused priority field
                if self.note_budget(ping, pong):
                    # A server that ignores an unknown budget field would ignore continue_final_message as silently.
                    for field in CONTINUE_FIELDS:
                        self.unsupported.setdefault(
                            field,
                            f"{endpoint} ignores body fields it does not know (it ran past max_completion_tokens), so "
                            "it would answer afresh instead of continuing the last message (a vLLM extension)",
                        )
            except FatalBackendError:
                raise
            except (TransientError, BackendError) as exc:
                why = exc.message if isinstance(exc, BackendError) else str(exc)
                raise FatalBackendError(
                    f"preflight: a one-token chat request to {endpoint} failed: {why}", backend=self.label
                ) from exc

    def _only_model(self, endpoint: str, served: list[str] | None) -> None:
        """Take the one model ``GET /models`` lists as :attr:`model`, or raise :class:`FatalBackendError`."""
        if served is not None and len(served) == 1:
            (self.model,) = served
            self.adaptations["model"] = f"model {self.model!r}: the one model GET /models lists (no --model given)"
            log.info("using the one model the server lists", endpoint=endpoint, model=self.model)
            return
        listed = "it lists no model list" if served is None else f"it serves: {', '.join(sorted(served)) or '(none)'}"
        raise FatalBackendError(
            f"preflight: no --model given and {endpoint} does not list exactly one model; {listed}", backend=self.label
        )

    async def identify(self) -> ModelIdentity:
        """The model as the servers report it, asked once.

        vLLM gives ``root`` and ``max_model_len`` in ``GET /models`` and its version at ``GET /version``; OpenAI
        neither.

        Raises:
            TransientError: A server could not be reached (a later call asks again).
            FatalBackendError: Replicas report different models.
        """
        async with self._identifying:
            if self._identity is None:
                found = [await self._identify(endpoint) for endpoint in self.endpoints]
                for endpoint, other in zip(self.endpoints[1:], found[1:], strict=True):
                    if other != found[0]:
                        raise FatalBackendError(
                            f"the replicas serve different models: {self.endpoints[0]} reports {found[0]}, "
                            f"{endpoint} reports {other}",
                            backend=self.label,
                        )
                self._identity = found[0]
        return self._identity

    async def _identify(self, endpoint: str) -> ModelIdentity:
        status, body = await self.get("models", endpoint=endpoint)
        entry = (_listed(body, self.model) if status == 200 else None) or {}
        root = entry.get("root") if isinstance(entry.get("root"), str) else None
        length = entry.get("max_model_len")
        status, body = await self.get("version", endpoint=endpoint, root=True)
        return ModelIdentity(
            model=self.model,
            root=root,
            server_version=_version(body) if status == 200 else None,
            max_model_len=length if isinstance(length, int) and not isinstance(length, bool) else None,
            weights_digest=weights_digest(root),
        )

    def describe(self) -> dict[str, Any]:
        """The base record with the model, structured-output mode and token field sent now."""
        return super().describe() | {
            "model": self.model,
            "structured_output": self.structured_output,
            "token_limit_field": self.token_limit_field,
        }

    async def get(self, path: str, *, endpoint: str | None = None, root: bool = False) -> tuple[int, bytes]:
        """``GET path`` of ``endpoint`` (default: the first) in one attempt; ``root``: from the server root.

        Returns:
            ``(status, body)``.

        Raises:
            TransientError: A timeout or a failed connection.
        """
        base = endpoint or self.endpoints[0]
        if root:
            parts = urlsplit(base)
            base = f"{parts.scheme}://{parts.netloc}"
        url = base.rstrip("/") + "/" + path.lstrip("/")
        headers = {k: v for k, v in self._headers.items() if k != "Content-Type"}
        with self._wire_errors(url, permanent=False):
            async with self._session(base).get(url, headers=headers) as resp:
                return resp.status, await resp.read()

    def _redact(self, text: str) -> str:
        """``text`` with the API key masked."""
        if self._key == _PLACEHOLDER_KEY:
            return text
        return text.replace(self._key, "***")

    async def aclose(self) -> None:
        """Close every session; a later request opens new ones."""
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()


class OpenAIBackend(ChatBackend):
    """The :class:`~ceb.backends.base.ChatBackend` over an :class:`OpenAITransport`, without a cache."""

    transport: OpenAITransport

    def __init__(
        self, settings: BackendConfig, *, retry: RetrySettings | None = None, limits: EndpointLimits | None = None
    ) -> None:
        super().__init__(
            OpenAITransport(settings),
            max_concurrency=settings.max_concurrency,
            retry=retry or settings,
            limits=limits,
            routing=settings.routing,
        )


@register_backend("openai")
def open_openai(settings: BackendConfig) -> OpenAITransport:
    """The ``openai`` backend; :class:`~ceb.errors.ConfigError` as :class:`OpenAITransport` raises it."""
    return OpenAITransport(settings)


def _merge(parts: list[Completion], n: int) -> Completion:
    """The first ``n`` choices of ``parts`` as one completion, token counts summed."""
    texts = tuple(t for c in parts for t in c.texts)[:n]
    logprobs: list[tuple[TokenLogprob, ...] | None] = []
    for c in parts:
        logprobs += list(c.logprobs) if c.logprobs is not None else [None] * len(c.texts)

    def total(counts: list[int | None]) -> int | None:
        return None if any(x is None for x in counts) else sum(x for x in counts if x is not None)

    return Completion(
        texts=texts,
        prompt_tokens=total([c.prompt_tokens for c in parts]),
        completion_tokens=total([c.completion_tokens for c in parts]),
        model=parts[0].model,
        logprobs=tuple(logprobs[:n]) if any(x is not None for x in logprobs[:n]) else None,
        prompt_logprobs=parts[0].prompt_logprobs,
    )
