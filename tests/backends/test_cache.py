"""The reply cache (:mod:`ceb.backends.cache`): what is cached, what a hit returns, several writers at once."""

import multiprocessing
import os
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import structlog

from ceb.backends._wire import read_completion
from ceb.backends.base import (
    ChatBackend,
    ChatRequest,
    Completion,
    RetryPolicy,
    TokenLogprob,
    TransientError,
    Transport,
)
from ceb.backends.cache import ReplyCache, request_key
from ceb.backends.openai import OpenAIBackend
from ceb.backends.scheduling import lane
from ceb.backends.scripted import ScriptedChat
from ceb.config import BackendConfig, CacheConfig
from ceb.errors import ConfigError
from ceb.stages.asking import ask as ask_until_readable
from tests.support.openai_server import Reply

pytestmark = pytest.mark.anyio

SETTINGS = BackendConfig(name="openai", base_url="http://127.0.0.1:1/v1", model="m")


def ask(text: str, **kw: object) -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": text},), **kw)  # type: ignore[arg-type]


def cached(inner: ChatBackend, cache: ReplyCache, settings: BackendConfig) -> ChatBackend:
    """A client over ``inner``'s transport with ``inner``'s policy, consulting ``cache`` first (as ``open_backend``)."""
    return ChatBackend(
        inner.transport,
        max_concurrency=inner.max_concurrency,
        retry=inner.retry,
        limits=inner.limits,
        routing=inner.routing,
        cache=cache.step(settings),
    )


def store(tmp_path: Path, mode: str = "read-write", **kw: object) -> ReplyCache:
    cache = ReplyCache.open(CacheConfig(mode=mode, path=tmp_path / "c.sqlite", **kw))  # type: ignore[arg-type]
    assert cache is not None
    return cache


async def test_a_deterministic_request_is_answered_from_the_cache_without_a_request(tmp_path):
    inner = ScriptedChat(lambda r: f"reply to {r.messages[0]['content']}")
    cache = store(tmp_path)
    chat = cached(inner, cache, SETTINGS)
    first = await chat.complete(ask("a"))
    again = await chat.complete(ask("a"))
    assert len(inner.requests) == 1
    assert again.completion == first.completion and again.attempts == first.attempts == 1
    assert again.queue_s == 0.0
    seeded = ask("b", temperature=0.7, seed=3)  # an explicit seed makes a sampled request repeatable
    await chat.complete(seeded)
    await chat.complete(seeded)
    assert len(inner.requests) == 2
    c = cache.counts
    assert (c.hits, c.misses, c.uncacheable, c.stored, c.sent) == (2, 2, 0, 2, 2)
    cache.close()


async def test_sampled_requests_are_cached_only_when_opted_in(tmp_path):
    inner = ScriptedChat(lambda r: "x")
    cache = store(tmp_path)
    chat = cached(inner, cache, SETTINGS)
    for _ in range(2):
        await chat.complete(ask("a", temperature=0.7))
    assert len(inner.requests) == 2 and cache.counts.uncacheable == 2 and len(cache) == 0
    cache.close()


async def test_identical_sampled_requests_replay_their_own_samples_in_order(tmp_path):
    # Opted in, the V votes of a trajectory (V identical sampled requests) are V entries: a second run gets the
    # first run's V different samples back one for one, not the first sample V times (that changed the majority
    # in a real run on SmolLM2, votes [1,1,1],[1,1,1],[0,1,1]... replayed as [1,0,1] five times).
    samples = iter(f"sample {i}" for i in range(100))
    inner = ScriptedChat(lambda r: next(samples))

    async def run(lanes: tuple[str, ...]) -> list[str]:
        cache = store(tmp_path, nondeterministic=True)
        chat = cached(inner, cache, SETTINGS)  # a new backend: a new process's run
        texts = []
        for key in lanes:
            with lane(key):
                for _ in range(3):
                    texts.append((await chat.complete(ask("vote", temperature=0.7))).completion.texts[0])
        cache.close()
        return texts

    first = await run(("stream|0|ceb|", "stream|0|ceb-random|"))
    assert first == [f"sample {i}" for i in range(6)] and len(inner.requests) == 6
    again = await run(("stream|0|ceb-random|", "stream|0|ceb|"))  # each lane gets its own samples back
    assert again == first[3:] + first[:3] and len(inner.requests) == 6
    assert (await chat_once(tmp_path, inner)) == "sample 6"  # a fourth identical vote was never asked: sent


async def chat_once(tmp_path: Path, inner: ChatBackend) -> str:
    cache = store(tmp_path, nondeterministic=True)
    chat = cached(inner, cache, SETTINGS)
    with lane("stream|0|ceb|"):
        for _ in range(3):
            await chat.complete(ask("vote", temperature=0.7))
        text = (await chat.complete(ask("vote", temperature=0.7))).completion.texts[0]
    cache.close()
    return text


async def test_read_mode_uses_entries_and_writes_none(tmp_path):
    inner = ScriptedChat(lambda r: "x")
    writer = store(tmp_path)
    await cached(inner, writer, SETTINGS).complete(ask("a"))
    writer.close()
    reader = store(tmp_path, mode="read")
    chat = cached(inner, reader, SETTINGS)
    await chat.complete(ask("a"))
    await chat.complete(ask("b"))
    await chat.complete(ask("b"))
    assert [r.messages[0]["content"] for r in inner.requests] == ["a", "b", "b"]
    assert len(reader) == 1 and reader.counts.hits == 1 and reader.counts.stored == 0
    reader.close()


async def test_a_failed_request_is_never_cached(tmp_path):
    calls = []

    def flaky(r: ChatRequest) -> str:
        calls.append(r)
        if len(calls) <= 2:
            raise TransientError("503 busy")
        return "ok"

    inner = ScriptedChat(flaky, retry=RetryPolicy(max_attempts=2, backoff_s=0, max_backoff_s=0))
    cache = store(tmp_path)
    chat = cached(inner, cache, SETTINGS)
    with pytest.raises(TransientError):
        await chat.complete(ask("a"))
    assert len(cache) == 0 and cache.counts.sent == 2
    assert (await chat.complete(ask("a"))).completion.texts == ("ok",)
    assert (await chat.complete(ask("a"))).completion.texts == ("ok",)
    assert len(calls) == 3 and len(cache) == 1
    cache.close()


async def test_the_key_is_the_whole_request_and_the_endpoints_model_and_url(tmp_path):
    request = ask("a")
    other_model = SETTINGS.model_copy(update={"model": "m2"})
    other_url = SETTINGS.model_copy(update={"base_url": "http://127.0.0.1:2/v1"})
    keys = {
        request_key(request, identity)
        for identity in (
            {"model": "m", "base_url": ["u"]},
            {"model": "m2", "base_url": ["u"]},
            {"model": "m", "base_url": ["v"]},
        )
    }
    assert len(keys) == 3
    assert request_key(ask("a", stage="critic"), {}) == request_key(ask("a", stage="hindsight"), {})  # not sent
    assert request_key(ask("a", max_tokens=5), {}) != request_key(ask("a", max_tokens=6), {})
    assert request_key(ask("a", extra={"echo": True}), {}) != request_key(ask("a"), {})
    inner = ScriptedChat(lambda r: "x")
    cache = store(tmp_path)
    for settings in (SETTINGS, other_model, other_url, SETTINGS):
        await cached(inner, cache, settings).complete(request)
    assert len(inner.requests) == 3
    cache.close()


class FixedTransport(Transport):
    """Answers every request with ``reply()``, counting the calls."""

    def __init__(self, reply: Callable[[], Completion]) -> None:
        super().__init__("fixed://")
        self.reply, self.calls = reply, 0

    async def send(self, request: ChatRequest, endpoint: str) -> Completion:
        self.calls += 1
        return self.reply()


def both_kinds_of_logprobs() -> Completion:
    """Log-probs of both kinds, to check that a stored reply comes back equal."""
    token = TokenLogprob("0", -0.1053605156578263, (("0", -0.1053605156578263), ("1", -2.3)), None)
    return Completion(
        texts=("0", "1"),
        prompt_tokens=7,
        completion_tokens=2,
        model="m",
        logprobs=((token,), None),
        prompt_logprobs=(None, TokenLogprob("hi", -1.5, (("hi", -1.5),), 1)),
    )


def undecoded_positions() -> Completion:
    """A reply as the HTTP transport reads it: vLLM's prompt_logprobs positions undecoded until read."""
    body = (
        b'{"choices": [{"index": 0, "message": {"content": "x"}}], "prompt_token_ids": [1, 7],'
        b' "prompt_logprobs": [null, {"9": {"logprob": -0.1, "rank": 1, "decoded_token": "cd"},'
        b' "7": {"logprob": -3.0, "rank": 4, "decoded_token": "ls"}}]}'
    )
    return read_completion(body, default_model="m", asked_prompt_logprobs=1)


async def test_log_probabilities_come_back_from_the_cache_exactly(tmp_path):
    lp = FixedTransport(both_kinds_of_logprobs)
    inner = ChatBackend(lp, retry=RetryPolicy(backoff_s=0, max_backoff_s=0))
    cache = store(tmp_path)
    first = await cached(inner, cache, SETTINGS).complete(ask("a", n=2, logprobs=True))
    cache.close()
    reopened = store(tmp_path)
    again = await cached(inner, reopened, SETTINGS).complete(ask("a", n=2, logprobs=True))
    assert lp.calls == 1 and again.completion == first.completion
    reopened.close()


async def test_undecoded_prompt_logprobs_are_stored_as_sent_and_read_back_equal(tmp_path):
    raw = FixedTransport(undecoded_positions)
    inner = ChatBackend(raw, retry=RetryPolicy(backoff_s=0, max_backoff_s=0))
    cache = store(tmp_path)
    first = await cached(inner, cache, SETTINGS).complete(ask("a"))
    cache.close()
    reopened = store(tmp_path)
    again = await cached(inner, reopened, SETTINGS).complete(ask("a"))
    reopened.close()

    assert raw.calls == 1 and again.completion == first.completion
    assert again.completion.prompt_logprobs == (None, TokenLogprob("ls", -3.0, top=(("cd", -0.1),), rank=4))
    blob = sqlite3.connect(tmp_path / "c.sqlite").execute("SELECT reply FROM replies").fetchone()[0]
    assert b'"decoded_token": "ls"' in blob and b'"ids":[1,7],"k":1' in blob  # the positions as the server sent them


def _writer(path: str, worker: int, n: int) -> None:
    """One process storing ``n`` entries, half of them under keys every worker writes too."""
    import anyio

    async def main() -> None:
        cache = ReplyCache.open(CacheConfig(mode="read-write", path=Path(path)))
        assert cache is not None
        chat = cached(ScriptedChat(lambda r: r.messages[0]["content"]), cache, SETTINGS)
        for i in range(n):
            shared = i % 2 == 0
            await chat.complete(ask(f"shared {i}" if shared else f"worker {worker} item {i}"))
        cache.close()

    anyio.run(main)


@pytest.mark.slow  # four spawned processes, each importing ceb
def test_several_processes_write_one_cache_at_once_and_every_entry_reads_back(tmp_path):
    path = tmp_path / "shared.sqlite"
    workers, n = 4, 40
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), w, n)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * workers  # no process failed (a locked database would raise)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    keys = [k for (k,) in db.execute("SELECT key FROM replies")]
    db.close()
    assert len(keys) == n // 2 + workers * n // 2  # each shared key once, each private one once
    reader = ReplyCache.open(CacheConfig(mode="read", path=path))
    assert reader is not None
    for key in keys:
        hit = reader.get(key)
        assert hit is not None and len(hit.completion.texts) == 1
    reader.close()


async def test_an_unreadable_reply_is_cached_and_its_re_ask_is_its_own_entry(tmp_path):
    def reply(r: ChatRequest) -> str:
        return "0.7" if len(r.messages) > 1 else "no number here"  # the re-ask carries the bad reply and a fix

    def parse(raw: str) -> float:
        return float(raw)

    inner = ScriptedChat(reply)
    cache = store(tmp_path)
    chat = cached(inner, cache, SETTINGS)
    first = await ask_until_readable(chat, ask("score it"), parse, format_retries=2)
    again = await ask_until_readable(chat, ask("score it"), parse, format_retries=2)
    assert first.value == again.value == 0.7 and first.stats.requests == again.stats.requests == 2
    assert len(inner.requests) == 2 and len(cache) == 2 and cache.counts.hits == 2
    cache.close()


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """``folder`` read-only for the block: a read-only bind mount as root (whom modes do not stop), else its mode."""
    if os.geteuid() != 0:
        mode = folder.stat().st_mode
        os.chmod(folder, 0o555)
        try:
            yield
        finally:
            os.chmod(folder, mode)
        return
    mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("a read-only file system needs mount (root without CAP_SYS_ADMIN here)")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder), str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


async def test_read_mode_opens_a_cache_on_a_read_only_file_system(tmp_path):
    # Issue 33 item 5: "read" set up WAL mode and created the table, so it could not open a read-only cache at all.
    folder = tmp_path / "shared"
    inner = ScriptedChat(lambda r: "x")
    writer = ReplyCache.open(CacheConfig(mode="read-write", path=folder / "c.sqlite"))
    assert writer is not None
    await cached(inner, writer, SETTINGS).complete(ask("a"))
    writer.close()
    assert sorted(p.name for p in folder.iterdir()) == ["c.sqlite"]  # closed cleanly: no -wal, no -shm
    with read_only(folder):
        with pytest.raises(OSError):
            (folder / "probe").write_bytes(b"")  # the folder really is read-only
        reader = ReplyCache.open(CacheConfig(mode="read", path=folder / "c.sqlite"))
        assert reader is not None
        chat = cached(inner, reader, SETTINGS)
        await chat.complete(ask("a"))
        reader.close()
    assert len(inner.requests) == 1 and reader.counts.hits == 1


def test_read_mode_refuses_a_path_with_no_cache(tmp_path):
    # Issue 33 item 5: a mistyped path was created empty, and every request was asked again with no word said.
    missing = tmp_path / "typo" / "c.sqlite"
    with pytest.raises(ConfigError, match=r'cache.mode = "read": there is no reply cache at .*typo/c.sqlite'):
        ReplyCache.open(CacheConfig(mode="read", path=missing))
    assert not missing.parent.exists()
    other = tmp_path / "notes.sqlite"
    sqlite3.connect(other).close()  # an empty SQLite file, not a cache
    with pytest.raises(ConfigError, match="is not a ceb reply cache"):
        ReplyCache.open(CacheConfig(mode="read", path=other))


async def test_a_full_disk_warns_once_and_counts_the_replies_not_stored(tmp_path):
    # Issue 33 item 5: a disk filling mid-run printed one warning per reply (1,277 of 1,280 output lines).
    inner = ScriptedChat(lambda r: "reply " * 2000)
    cache = store(tmp_path)
    chat = cached(inner, cache, SETTINGS)
    await chat.complete(ask("first"))
    pages = cache._db.execute("PRAGMA page_count").fetchone()[0]
    cache._db.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow: SQLite's "disk is full"
    with structlog.testing.capture_logs() as logs:
        for i in range(5):
            assert (await chat.complete(ask(f"q{i}"))).completion.texts == ("reply " * 2000,)
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1 and "full" in warnings[0]["error"], warnings
    assert cache.counts.failed_writes == 5 and cache.counts.stored == 1 and len(inner.requests) == 6
    cache.close()


async def test_another_model_under_the_same_name_and_url_is_not_answered_from_the_cache(openai_server, tmp_path):
    # Issue 33 item 5: a model served anew under the same name and URL got the old model's replies (0 of 54 rows
    # matched an uncached run). The key holds what the server reports of its model: root (weights) and version.
    openai_server.responder = lambda body, i: Reply(f"{openai_server.root} says {body['messages'][-1]['content']}")
    settings = BackendConfig(name="openai", base_url=openai_server.base_url, model=openai_server.model)
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"v1")

    async def run(root: str, version: str | None) -> str:
        openai_server.root, openai_server.version = root, version
        cache = store(tmp_path)
        async with cached(OpenAIBackend(settings), cache, settings) as chat:
            texts = [(await chat.complete(ask("a"))).completion.texts[0] for _ in range(3)]
        cache.close()
        assert len(set(texts)) == 1
        return texts[0]

    asked = openai_server.identity_requests
    assert await run("/models/a", "0.11.0") == "/models/a says a"
    assert openai_server.identity_requests == asked + 2  # GET /v1/models and /version once, not per request
    assert len(openai_server.requests) == 1
    assert await run("/models/a", "0.11.0") == "/models/a says a" and len(openai_server.requests) == 1
    assert await run("/models/b", "0.11.0") == "/models/b says a"  # other weights under the same name
    assert await run("/models/a", "0.12.0") == "/models/a says a" and len(openai_server.requests) == 3  # new vLLM
    assert await run(str(weights), None) == f"{weights} says a" and len(openai_server.requests) == 4
    (weights / "model.safetensors").write_bytes(b"v2, saved over the old weights")
    await run(str(weights), None)
    assert len(openai_server.requests) == 5  # the same path, other weights: their digest differs
