"""A persistent cache of model replies: a wrapper :class:`ChatBackend` over any backend, and its SQLite store.

:func:`~ceb.backends.base.open_backend`, the one place backends are opened, wraps a backend in
:class:`CachedBackend` when the run's ``[cache]`` section (:class:`~ceb.config.CacheConfig`) is not ``off``, so
every backend (``openai``, ``vllm``, a plugin's) is cached the same way and none knows of it.

What is a key. The SHA-256 of the whole request (:class:`~ceb.backends.base.ChatRequest`: messages, temperature,
budget, ``n``, schema, seed, log-prob options, extra body fields; not ``stage``, which is never sent) and of the
endpoint that answers it (backend name, served model, base URL(s), structured-output mode, which changes what is
sent). A re-ask after an unreadable reply is another request (the reply and the correction are appended), so it is
its own entry.

What is cached. Only requests whose reply is determined by the request: temperature 0, or an explicit seed;
sampled ones (the hindsight votes at ``tau`` without ``hindsight.seed``) only when ``cache.nondeterministic`` is
on. The ``V`` votes of one trajectory are ``V`` identical sampled requests with ``V`` different answers, so a
sampled request's key also holds its lane (:func:`~ceb.backends.scheduling.current_lane`) and how many identical
ones that lane asked before it in this process: the second run replays the first run's samples one for one, in
the order they were asked, instead of one sample ``V`` times (which would change the majority). A failed request
(an exception: timeouts after the retries, refusals) is never cached. A reply that was read and found unreadable
IS cached: it is what the model answers to that request, and the re-ask that follows is its own key, so a second
run replays the same re-asks and writes the same rows. Streamed requests (``critic.early_score``) pass through
uncached: a cut stream is not a whole reply.

What a hit returns. The stored :class:`~ceb.backends.base.Completion` (texts, token counts, log-probs) with the
attempts and retry reason recorded when it was first asked, so a row answered from the cache is byte-identical
to the first run's except for its timing: ``latency_s`` is the look-up's (about 0) and ``queue_s`` 0. Its
``requests`` and token counts are the answer's recorded cost; :class:`CacheCounts` says how many answers came from
the cache and how many requests were really sent.

Several processes. The store is one SQLite file in WAL mode with a busy timeout: any number of processes (a
grid's runs, a gate and a batch run) read and write it at once; the first reply stored under a key stays.
Look-ups and writes run in a worker thread, so a busy file never stalls the event loop.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, fields
from typing import Any

import anyio
import orjson
import structlog

from ceb.backends.base import ChatBackend, ChatRequest, ChatResponse, Completion, StreamReply, TokenLogprob
from ceb.backends.scheduling import current_lane
from ceb.config import BackendConfig, CacheConfig
from ceb.errors import ConfigError

__all__ = [
    "CACHE_FORMAT",
    "CacheCounts",
    "CachedBackend",
    "ReplyCache",
    "cacheable",
    "deterministic",
    "endpoint_identity",
    "request_key",
]

log = structlog.get_logger(__name__)

CACHE_FORMAT = 1
"""Layout of a stored reply (part of every key: a new layout starts an empty cache, never misreads an old one)."""

BUSY_TIMEOUT_MS = 30_000
"""How long a write waits for another process's write to end before it gives up, in milliseconds."""


@dataclass
class CacheCounts:
    """What one store did (``summary.json``'s ``cache``, printed by ``ceb score``).

    Attributes:
        mode: The ``cache.mode`` it was opened with.
        path: The cache file.
        hits: Requests answered from the cache (no request sent).
        misses: Cacheable requests not found, so sent (and stored under ``read-write`` when they succeeded).
        uncacheable: Requests sent without a look-up: sampled ones without ``cache.nondeterministic``.
        stored: Replies written to the cache.
        sent: Requests sent to endpoints through the cache's backends, retries included (misses and
            uncacheable ones; re-asks are requests of their own).
    """

    mode: str
    path: str
    hits: int = 0
    misses: int = 0
    uncacheable: int = 0
    stored: int = 0
    sent: int = 0

    @classmethod
    def total(cls, counts: Iterable[CacheCounts]) -> CacheCounts | None:
        """The sum of ``counts`` (several stores, or the parts of a merged run); ``None`` when there are none.

        The sum carries the first one's ``mode`` and ``path``.
        """
        every = list(counts)
        if not every:
            return None
        out = cls(mode=every[0].mode, path=every[0].path)
        for c in every:
            out.hits += c.hits
            out.misses += c.misses
            out.uncacheable += c.uncacheable
            out.stored += c.stored
            out.sent += c.sent
        return out


class ReplyCache:
    """The on-disk store: one SQLite file, WAL mode, a busy timeout; the only code that knows its layout.

    Open it with :meth:`open` (``None`` when the cache is off); close it with :meth:`close`. Thread-safe: one
    connection behind a lock, used from worker threads.

    Args:
        settings: The ``[cache]`` section.

    Raises:
        ConfigError: The file cannot be opened or created (names it).
    """

    def __init__(self, settings: CacheConfig) -> None:
        self.settings = settings
        self.path = settings.path
        self.counts = CacheCounts(mode=settings.mode, path=str(settings.path))
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")  # WAL: a crash loses no committed entry
            with self._db:
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, endpoint TEXT NOT NULL, "
                    "reply BLOB NOT NULL, stored_at REAL NOT NULL)"
                )
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open the reply cache {self.path}: {exc}") from exc

    @classmethod
    def open(cls, settings: CacheConfig) -> ReplyCache | None:
        """The store of ``settings``, or ``None`` when ``mode`` is ``off``."""
        return None if settings.mode == "off" else cls(settings)

    @property
    def writes(self) -> bool:
        """New replies are stored (``read-write``)."""
        return self.settings.mode == "read-write"

    def get(self, key: str) -> ChatResponse | None:
        """The reply stored under ``key`` (with zero timings), or ``None``. Blocking: call it from a thread."""
        with self._lock:
            row = self._db.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        return None if row is None else _decode(row[0])

    def put(self, key: str, endpoint: str, response: ChatResponse) -> bool:
        """Store ``response`` under ``key`` unless an entry is there; whether it was stored. Blocking."""
        blob = _encode(response)
        with self._lock:
            with self._db:
                cur = self._db.execute(
                    "INSERT OR IGNORE INTO replies (key, endpoint, reply, stored_at) VALUES (?, ?, ?, ?)",
                    (key, endpoint, blob, time.time()),
                )
            return cur.rowcount == 1  # read under the lock: another thread's statement would reset it

    def wrap(self, backend: ChatBackend, settings: BackendConfig) -> ChatBackend:
        """``backend``, opened from ``settings``, with its replies cached here (called by ``open_backend``)."""
        return CachedBackend(backend, self, settings)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0])

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._db.close()


def deterministic(request: ChatRequest) -> bool:
    """Whether ``request``'s reply is determined by the request: temperature 0, or an explicit seed."""
    return request.temperature == 0 or request.seed is not None


def cacheable(request: ChatRequest, settings: CacheConfig) -> bool:
    """Whether ``request``'s reply may be cached: deterministic (temperature 0, or a seed), or opted in."""
    return deterministic(request) or settings.nondeterministic


def endpoint_identity(settings: BackendConfig) -> dict[str, Any]:
    """What of a backend's settings decides its replies: backend, served model, base URL(s), structured output."""
    return {
        "backend": settings.name,
        "model": settings.served_model,
        "base_url": list(settings.base_urls),
        "structured_output": settings.structured_output,
    }


def request_key(request: ChatRequest, endpoint: Mapping[str, Any]) -> str:
    """The cache key of ``request`` at ``endpoint``: SHA-256 hex of both, as sorted-key JSON."""
    body = {f.name: getattr(request, f.name) for f in fields(request) if f.name != "stage"}
    doc = {"format": CACHE_FORMAT, "endpoint": endpoint, "request": body}
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS, default=_mapping)).hexdigest()


def _mapping(obj: object) -> object:
    if isinstance(obj, Mapping):
        return dict(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON")


def _encode(response: ChatResponse) -> bytes:
    c = response.completion
    return orjson.dumps(
        {
            "texts": c.texts,
            "prompt_tokens": c.prompt_tokens,
            "completion_tokens": c.completion_tokens,
            "model": c.model,
            "logprobs": None if c.logprobs is None else [_tokens(choice) for choice in c.logprobs],
            "prompt_logprobs": _tokens(c.prompt_logprobs),
            "attempts": response.attempts,
            "retry_reason": response.retry_reason,
        }
    )


def _tokens(tokens: tuple[TokenLogprob | None, ...] | None) -> list[Any] | None:
    if tokens is None:
        return None
    return [None if t is None else [t.token, t.logprob, t.top, t.rank] for t in tokens]


def _token(t: list[Any]) -> TokenLogprob:
    return TokenLogprob(t[0], t[1], tuple((alt, lp) for alt, lp in t[2]), t[3])


def _decode(blob: bytes) -> ChatResponse:
    d = orjson.loads(blob)
    logprobs = d["logprobs"]
    prompt = d["prompt_logprobs"]
    completion = Completion(
        texts=tuple(d["texts"]),
        prompt_tokens=d["prompt_tokens"],
        completion_tokens=d["completion_tokens"],
        model=d["model"],
        logprobs=None
        if logprobs is None
        else tuple(None if choice is None else tuple(_token(t) for t in choice) for choice in logprobs),
        prompt_logprobs=None if prompt is None else tuple(None if t is None else _token(t) for t in prompt),
    )
    return ChatResponse(completion, 0.0, 0.0, d["attempts"], d["retry_reason"])


class CachedBackend(ChatBackend):
    """``inner`` with its replies cached in ``store``: a hit is answered without a slot, a retry or a request.

    Everything but :meth:`complete` is ``inner``'s: streaming, preflight, the endpoint slots, the observers.

    Args:
        inner: The backend that sends what the cache cannot answer (it is closed with this one).
        store: The run's store, shared by every backend it opens; not closed here.
        settings: The backend section ``inner`` was built from (its identity is part of every key).
    """

    def __init__(self, inner: ChatBackend, store: ReplyCache, settings: BackendConfig) -> None:
        super().__init__(
            endpoint=inner.endpoints,
            max_concurrency=inner.max_concurrency,
            retry=inner.retry,
            limits=inner.limits,
            routing=inner.routing,
        )
        self.inner = inner
        self.name = inner.name
        self.observers = inner.observers
        self.store = store
        self._identity = endpoint_identity(settings)
        self._endpoint = f"{settings.name}:{settings.served_model}@{','.join(settings.base_urls)}"
        self._sampled: Counter[tuple[str | None, str]] = Counter()  # identical sampled requests asked, per lane

    def _key(self, request: ChatRequest) -> str:
        """The request's key; a sampled one's also names its lane and its rank among identical ones (module doc)."""
        key = request_key(request, self._identity)
        if deterministic(request):
            return key
        slot = (current_lane(), key)
        rank = self._sampled[slot]
        self._sampled[slot] += 1  # before any await: concurrent identical requests take ranks in the order asked
        return hashlib.sha256(orjson.dumps([key, slot[0], rank])).hexdigest()

    async def _complete(self, request: ChatRequest, endpoint: str) -> Completion:
        raise AssertionError("CachedBackend.complete delegates to its inner backend")  # pragma: no cover

    def _stream(self, request: ChatRequest, endpoint: str) -> AbstractAsyncContextManager[AsyncIterator[Any]]:
        raise AssertionError("CachedBackend.stream delegates to its inner backend")  # pragma: no cover

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamReply]:
        """``inner``'s stream, uncached (a stream may be cut before the reply ends)."""
        async with self.inner.stream(request) as reply:
            yield reply

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """The stored reply of ``request``, or ``inner``'s (stored when cacheable, successful and ``read-write``).

        Raises:
            Exception: Whatever ``inner.complete`` raises; nothing is stored then.
        """
        counts = self.store.counts
        if not cacheable(request, self.store.settings):
            counts.uncacheable += 1
            return await self._send(request)
        key = self._key(request)
        began = time.perf_counter()
        try:
            hit = await anyio.to_thread.run_sync(self.store.get, key)
        except (sqlite3.Error, ValueError, LookupError, TypeError) as exc:  # a bad cache costs requests, not the run
            log.warning("reply cache read failed; asking the endpoint", path=str(self.store.path), error=str(exc))
            hit = None
        if hit is not None:
            counts.hits += 1
            return ChatResponse(hit.completion, time.perf_counter() - began, 0.0, hit.attempts, hit.retry_reason)
        counts.misses += 1
        response = await self._send(request)
        if self.store.writes:
            try:
                stored = await anyio.to_thread.run_sync(self.store.put, key, self._endpoint, response)
                counts.stored += stored  # not `+= await`: that reads the count before the wait and loses updates
            except sqlite3.Error as exc:
                log.warning("reply cache write failed", path=str(self.store.path), error=str(exc))
        return response

    async def _send(self, request: ChatRequest) -> ChatResponse:
        try:
            response = await self.inner.complete(request)
        except Exception as exc:
            self.store.counts.sent += getattr(exc, "attempts", 1)
            raise
        self.store.counts.sent += response.attempts
        return response

    def should_retry(self, exc: BaseException) -> bool:
        """``inner``'s decision."""
        return self.inner.should_retry(exc)

    async def preflight(self) -> None:
        """``inner``'s preflight: a run answered wholly from the cache still needs its endpoint for the rest."""
        await self.inner.preflight()

    async def aclose(self) -> None:
        """Close ``inner`` (the store belongs to whoever opened it)."""
        await self.inner.aclose()
