"""A persistent reply cache: the first step of every backend's client, over one SQLite file.

:func:`~ceb.backends.base.open_backend` hands the client a :class:`CacheStep` unless ``cache.mode`` is ``off``, so every
transport is cached alike and none knows of it.

A key is the SHA-256 of the request (but ``stage``), the endpoint (backend, model name, base URLs, structured-output
mode) and the served model as the server reports it once per run (id, vLLM's ``root`` and version, a digest of local
weights): another model under the same name and URL never answers from the old one's replies, and while the server
cannot say which model it serves, requests bypass the cache.

Only deterministic requests are cached (temperature 0 or a seed), sampled ones too under ``cache.nondeterministic``:
their key adds the lane and the rank among identical requests of that lane, so a second run replays the ``V`` hindsight
votes one for one. Failed requests and streams are never cached; an unreadable reply is (the re-ask is its own key). A
hit returns the stored completion with its first attempts and retry reason, ``latency_s`` the look-up's and ``queue_s``
0.

``read`` opens an existing file read-only (``immutable`` on a read-only file system). The file is in WAL mode with a
busy timeout, so processes share it (the first reply stored under a key stays); look-ups and writes run in a worker
thread. A failed look-up or write costs requests, never the run: the first of each is logged, the rest counted.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import anyio
import orjson

from ceb.backends._wire import PromptLogprobs
from ceb.backends.scheduling import current_lane
from ceb.backends.transport import (
    ChatRequest,
    ChatResponse,
    Completion,
    ModelIdentity,
    TokenLogprob,
    TransientError,
)
from ceb.config import BackendConfig, CacheConfig
from ceb.errors import ConfigError
from ceb.logs import get_logger

__all__ = [
    "CACHE_FORMAT",
    "CacheCounts",
    "CacheStep",
    "ReplyCache",
    "cacheable",
    "deterministic",
    "endpoint_identity",
    "request_key",
]

log = get_logger(__name__)

CACHE_FORMAT = 1
"""Layout of a stored reply, part of every key: a new layout starts an empty cache."""

Send = Callable[[ChatRequest], Awaitable[ChatResponse]]
"""The client's steps after the cache: retries, slots and the transport."""

Identify = Callable[[], Awaitable[ModelIdentity | None]]
"""The transport's :meth:`~ceb.backends.transport.Transport.identify`."""

BUSY_TIMEOUT_MS = 30_000
"""Milliseconds a write waits for another process's write."""


@dataclass
class CacheCounts:
    """What one store did (``summary.json``'s ``cache``, printed by ``ceb score``).

    ``hits`` were answered from the cache; ``misses`` were cacheable, not found and sent; ``uncacheable`` were sent
    without a look-up (sampled, or the served model unknown); ``sent`` counts the requests sent through the cache's
    backends, retries included; ``failed_reads`` and ``failed_writes`` the look-ups and writes the store could not do.
    """

    mode: str
    path: str
    hits: int = 0
    misses: int = 0
    uncacheable: int = 0
    stored: int = 0
    sent: int = 0
    failed_reads: int = 0
    failed_writes: int = 0

    @classmethod
    def total(cls, counts: Iterable[CacheCounts]) -> CacheCounts | None:
        """The sum of ``counts`` (with the first one's ``mode`` and ``path``); ``None`` for none."""
        every = list(counts)
        if not every:
            return None
        out = cls(mode=every[0].mode, path=every[0].path)
        for f in fields(cls)[2:]:  # the counts, after mode and path
            setattr(out, f.name, sum(getattr(c, f.name) for c in every))
        return out


class ReplyCache:
    """The on-disk store, the only code that knows its layout: one connection behind a lock, used from threads.

    Raises:
        ConfigError: The file cannot be opened or created, or (``read``) is missing or not a reply cache.
    """

    def __init__(self, settings: CacheConfig) -> None:
        self.settings = settings
        self.path = settings.path
        self.counts = CacheCounts(mode=settings.mode, path=str(settings.path))
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._db = self._open_writable() if self.writes else self._open_read_only()

    def _open_writable(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
            db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")  # WAL: a crash loses no committed entry
            with db:
                db.execute(
                    "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, endpoint TEXT NOT NULL, "
                    "reply BLOB NOT NULL, stored_at REAL NOT NULL)"
                )
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open the reply cache {self.path}: {exc}") from exc
        return db

    def _open_read_only(self) -> sqlite3.Connection:
        """The file opened ``mode=ro``, else ``immutable`` (WAL on a read-only file system)."""
        if not self.path.is_file():
            raise ConfigError(
                f'cache.mode = "read": there is no reply cache at {self.path}; check cache.path '
                '("read-write" creates one)'
            )
        uri = self.path.resolve().as_uri() + "?mode=ro"
        db: sqlite3.Connection | None = None
        for form in (uri, uri + "&immutable=1"):
            try:
                db = sqlite3.connect(form, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
                db.execute("SELECT 1 FROM replies LIMIT 1").fetchall()
                return db
            except sqlite3.DatabaseError as exc:
                if db is not None:
                    db.close()
                if "no such table" in str(exc) or not isinstance(exc, sqlite3.OperationalError):
                    raise ConfigError(f"{self.path} is not a ceb reply cache ({exc})") from exc
                failure = exc
        raise ConfigError(f"cannot open the reply cache {self.path} to read: {failure}") from failure

    def warn_once(self, what: str, exc: BaseException) -> None:
        """Log the first failure of a kind (``read``, ``write``); the rest are only counted."""
        if what not in self._warned:
            self._warned.add(what)
            log.warning(
                f"reply cache {what} failed; later failures are counted, not logged",
                path=str(self.path),
                error=str(exc),
            )

    @classmethod
    def open(cls, settings: CacheConfig) -> ReplyCache | None:
        """The store of ``settings``, or ``None`` when ``mode`` is ``off``."""
        return None if settings.mode == "off" else cls(settings)

    @property
    def writes(self) -> bool:
        """New replies are stored (``read-write``)."""
        return self.settings.mode == "read-write"

    def get(self, key: str) -> ChatResponse | None:
        """The reply under ``key`` (zero timings), or ``None``. Blocking."""
        with self._lock:
            row = self._db.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        return None if row is None else _decode(row[0])

    def put(self, key: str, endpoint: str, response: ChatResponse) -> bool:
        """Store ``response`` under ``key`` unless taken; whether it was stored. Blocking."""
        blob = _encode(response)
        with self._lock:
            with self._db:
                cur = self._db.execute(
                    "INSERT OR IGNORE INTO replies (key, endpoint, reply, stored_at) VALUES (?, ?, ?, ?)",
                    (key, endpoint, blob, time.time()),
                )
            return cur.rowcount == 1  # read under the lock: another thread's statement would reset it

    def step(self, settings: BackendConfig) -> CacheStep:
        """This store as the backend opened from ``settings`` consults it."""
        return CacheStep(self, settings)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0])

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._db.close()


def deterministic(request: ChatRequest) -> bool:
    """Whether ``request``'s reply is determined by it: temperature 0, or a seed."""
    return request.temperature == 0 or request.seed is not None


def cacheable(request: ChatRequest, settings: CacheConfig) -> bool:
    """Whether ``request``'s reply may be cached: deterministic, or ``settings.nondeterministic``."""
    return deterministic(request) or settings.nondeterministic


def endpoint_identity(settings: BackendConfig, served: ModelIdentity | None = None) -> dict[str, Any]:
    """The key part naming an endpoint: backend, model name, base URLs, structured output and ``served``."""
    return {
        "backend": settings.name,
        "model": settings.served_model,
        "base_url": list(settings.base_urls),
        "structured_output": settings.structured_output,
        "served": None
        if served is None
        else {
            "id": served.model,
            "root": served.root,
            "server_version": served.server_version,
            "weights_digest": served.weights_digest,
        },
    }


def request_key(request: ChatRequest, endpoint: Mapping[str, Any]) -> str:
    """SHA-256 hex of ``request`` (but ``stage``) and ``endpoint`` as sorted-key JSON."""
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
            "prompt_logprobs": c.prompt_logprobs.to_json()
            if isinstance(c.prompt_logprobs, PromptLogprobs)
            else _tokens(c.prompt_logprobs),
            "attempts": response.attempts,
            "retry_reason": response.retry_reason,
        }
    )


def _tokens(tokens: Sequence[TokenLogprob | None] | None) -> list[Any] | None:
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
        prompt_logprobs=_prompt(prompt),
    )
    return ChatResponse(completion, 0.0, 0.0, d["attempts"], d["retry_reason"])


def _prompt(stored: Any) -> Sequence[TokenLogprob | None] | None:
    """Stored prompt log-probs: the positions as the server sent them (checked when read), or built tokens."""
    if isinstance(stored, dict):
        return PromptLogprobs(stored["positions"], stored["ids"], stored["k"])
    return None if stored is None else tuple(None if t is None else _token(t) for t in stored)


class CacheStep:
    """The reply cache as one backend consults it: a hit takes no slot, retry or request; a miss is sent and stored.

    Holds the endpoint's identity (asked of the transport once) and the ranks of identical sampled requests. ``store``
    is shared and not closed here.
    """

    def __init__(self, store: ReplyCache, settings: BackendConfig) -> None:
        self.store = store
        self._settings = settings
        self._identity: dict[str, Any] | None = None
        self._endpoint = f"{settings.name}:{settings.served_model}@{','.join(settings.base_urls)}"
        self._sampled: Counter[tuple[str | None, str]] = Counter()  # identical sampled requests asked, per lane

    async def _endpoint_identity(self, identify: Identify) -> dict[str, Any] | None:
        """:func:`endpoint_identity` with the served model, asked once; ``None`` while unknown."""
        if self._identity is None:
            try:
                served = await identify()
            except TransientError as exc:
                self.store.warn_once("look-up of the served model", exc)
                return None
            self._identity = endpoint_identity(self._settings, served)
        return self._identity

    def _key(self, request: ChatRequest, endpoint: Mapping[str, Any]) -> str:
        """The key; a sampled request's adds its lane and rank among identical ones."""
        key = request_key(request, endpoint)
        if deterministic(request):
            return key
        slot = (current_lane(), key)
        rank = self._sampled[slot]
        self._sampled[slot] += 1  # before any await: concurrent identical requests take ranks in the order asked
        return hashlib.sha256(orjson.dumps([key, slot[0], rank])).hexdigest()

    async def complete(self, request: ChatRequest, send: Send, identify: Identify) -> ChatResponse:
        """The stored reply of ``request``, or ``send``'s, stored when cacheable and under ``read-write``.

        Raises:
            Exception: Whatever ``send`` raises; nothing is stored then.
        """
        counts = self.store.counts
        if not cacheable(request, self.store.settings):
            counts.uncacheable += 1
            return await self._send(request, send)
        endpoint = await self._endpoint_identity(identify)
        if endpoint is None:  # the model behind the endpoint is unknown: neither answered nor stored
            counts.uncacheable += 1
            return await self._send(request, send)
        key = self._key(request, endpoint)
        began = time.perf_counter()
        try:
            hit = await anyio.to_thread.run_sync(self.store.get, key)
        except (sqlite3.Error, ValueError, LookupError, TypeError) as exc:  # a bad cache costs requests, not the run
            counts.failed_reads += 1
            self.store.warn_once("read", exc)
            hit = None
        if hit is not None:
            counts.hits += 1
            return ChatResponse(hit.completion, time.perf_counter() - began, 0.0, hit.attempts, hit.retry_reason)
        counts.misses += 1
        response = await self._send(request, send)
        if self.store.writes:
            try:
                stored = await anyio.to_thread.run_sync(self.store.put, key, self._endpoint, response)
                counts.stored += stored  # not `+= await`: that reads the count before the wait and loses updates
            except sqlite3.Error as exc:  # a full disk, say: one warning, then a count (summary.json, the last lines)
                counts.failed_writes += 1
                self.store.warn_once("write", exc)
        return response

    async def _send(self, request: ChatRequest, send: Send) -> ChatResponse:
        try:
            response = await send(request)
        except Exception as exc:
            self.store.counts.sent += getattr(exc, "attempts", 1)
            raise
        self.store.counts.sent += response.attempts
        return response
