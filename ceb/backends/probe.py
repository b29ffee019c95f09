"""What an endpoint supports, found by asking: one tiny request per feature, one attempt each, no retries.

:func:`probe_endpoint` checks in order: ``GET /models`` (reachable, model listed), a chat request, the output budget
(``token_budget``), JSON-schema structured output and whether its ``minimum`` / ``maximum`` and length ``pattern`` held,
``n``, ``logprobs`` / ``top_logprobs``, vLLM's ``prompt_logprobs`` and ``continue_final_message`` (judged by the
prompt's token count, which a server ignoring the field does not shorten), ``priority``, and the prefix-cache counters
of ``/metrics``. What the HTTP transport adapts on the way is named in each check's detail and
:attr:`EndpointReport.adaptations`. Check names are the capabilities of :data:`ceb.stages.methods.CAPABILITIES`.

:func:`probe` opens any registered backend as a run does (``ceb doctor``); :func:`probe_engine` checks an in-process
vLLM engine, starting it first and reading its prefix-cache setting from its configuration.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import orjson

from ceb.backends.base import ChatBackend, open_backend
from ceb.backends.openai import OpenAITransport, model_ids
from ceb.backends.server_metrics import parse_metrics
from ceb.backends.transport import ChatRequest, Completion, ModelIdentity, TransientError
from ceb.backends.vllm_engine import VLLMEngineTransport
from ceb.config import BackendConfig
from ceb.errors import BackendError, CEBError, ConfigError

__all__ = ["Check", "EndpointReport", "probe", "probe_endpoint", "probe_engine"]

Outcome = Literal["ok", "missing", "failed"]

_PROBE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        # A length bound as ceb's own schemas write it (ceb.stages.asking.bounded_text): a `pattern`, which
        # OpenAI's strict mode keeps, where `maxLength` would be dropped in json_schema mode and not tested.
        "reason": {"type": "string", "pattern": "^[^\\n]{0,12}$"},
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}
_USER = ({"role": "user", "content": "Reply with one short word."},)
_HELLO = ChatRequest(messages=_USER, max_tokens=4)


@dataclass(frozen=True, slots=True)
class Check:
    """One probed feature: ``ok``, ``missing`` (refused or ignored) or ``failed`` (no answer), and what was seen."""

    name: str
    outcome: Outcome
    detail: str
    seconds: float = 0.0


@dataclass
class EndpointReport:
    """All checks of one endpoint (``base_url``, the ``model`` asked for), in the order run."""

    base_url: str
    model: str
    checks: list[Check] = field(default_factory=list)
    adaptations: dict[str, str] = field(default_factory=dict)
    """What ceb sends differently here (:attr:`~ceb.backends.base.Transport.adaptations`)."""
    served: ModelIdentity | None = None
    """What the server reports of its model (:meth:`ChatBackend.identify`)."""

    @property
    def lacking(self) -> list[str]:
        """Checks answered but not supported (``missing``)."""
        return [c.name for c in self.checks if c.outcome == "missing"]

    @property
    def capabilities(self) -> set[str]:
        """Checks that passed."""
        return {c.name for c in self.checks if c.outcome == "ok"}

    @property
    def usable(self) -> bool:
        """The endpoint answers chat requests for the model."""
        return "chat" in self.capabilities

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values."""
        return {
            "base_url": self.base_url,
            "model": self.model,
            "usable": self.usable,
            "lacking": self.lacking,
            "adaptations": dict(self.adaptations),
            "served": None if self.served is None else self.served.to_dict(),
            "checks": [
                {"name": c.name, "outcome": c.outcome, "detail": c.detail, "seconds": round(c.seconds, 3)}
                for c in self.checks
            ],
        }


async def probe(settings: BackendConfig) -> EndpointReport:
    """Probe the backend ``settings.name``, opened as a run opens it but with one attempt and no ``priority`` field.

    Returns:
        The report; checks after a failed chat request are ``failed``.

    Raises:
        ConfigError: Unknown backend, one without a model (``offline``), or a setting it needs is missing or refused.
    """
    probing = settings.model_copy(
        update={"server_priority": "off", "max_attempts": 1, "backoff_s": 0.0, "max_backoff_s": 0.0}
    )
    backend = open_backend(probing)
    if backend is None:
        raise ConfigError(f"backend {settings.name!r} has no language model to probe")
    return await _probe(backend, settings.served_model)


async def probe_endpoint(settings: BackendConfig) -> EndpointReport:
    """:func:`probe` the first endpoint of ``settings`` as backend ``openai``."""
    return await probe(settings.model_copy(update={"name": "openai"}))


async def _feature_checks(backend: ChatBackend, chat: Check) -> list[Check]:
    """The feature checks, ``failed`` unless ``chat`` passed; a detail names what the transport adapted."""
    if chat.outcome != "ok":
        return [Check(name, "failed", "skipped: no chat reply") for name, _ in _feature_requests()]
    checks = []
    for name, run in _feature_requests():
        before = set(backend.adaptations)
        check = await _timed(name, partial(run, backend))
        learnt = [note for key, note in backend.adaptations.items() if key not in before]
        if learnt:
            check = Check(check.name, check.outcome, f"{check.detail}; {'; '.join(learnt)}", check.seconds)
        checks.append(check)
    return checks


async def probe_engine(backend: ChatBackend) -> EndpointReport:
    """Probe an in-process vLLM engine: start it, then the chat and feature checks; it is stopped before returning.

    Returns:
        The report (``base_url``: ``vllm-engine:<model>``); checks after a failed start or chat are ``failed``.

    Raises:
        TypeError: ``backend`` is not over a :class:`~ceb.backends.vllm_engine.VLLMEngineTransport`.
    """
    engine = backend.transport
    if not isinstance(engine, VLLMEngineTransport):
        raise TypeError(f"{backend.label} is not an in-process vLLM engine")
    return await _probe(backend, engine.settings.served_model)


async def _probe(backend: ChatBackend, model: str) -> EndpointReport:
    """The checks that fit ``backend``'s transport, in order; it is closed before this returns."""
    transport = backend.transport
    http = transport if isinstance(transport, OpenAITransport) else None
    engine = transport if isinstance(transport, VLLMEngineTransport) else None
    report = EndpointReport(
        base_url=backend.endpoints[0] if http else backend.endpoint, model=http.model if http else model
    )
    try:
        chat = Check("chat", "failed", "skipped: the engine did not start")
        if http is not None:
            report.checks.append(await _timed("models", lambda: _models(http, http.model)))
            with contextlib.suppress(TransientError):  # no answer: the models check already says so
                report.served = await backend.identify()
        if engine is not None:
            report.checks.append(await _timed("start", lambda: _start(engine)))
        if engine is None or report.checks[-1].outcome == "ok":
            chat = await _timed("chat", partial(_chat, backend, _HELLO, _any_text))
        report.checks += [chat, *await _feature_checks(backend, chat)]
        if chat.outcome == "ok" and http is not None:
            report.checks.append(await _timed("prefix_cache", lambda: _prefix_cache(http)))
        elif chat.outcome == "ok" and engine is not None:
            on = bool(engine.engine.vllm_config.cache_config.enable_prefix_caching)
            detail = f"prefix caching {'on' if on else 'off'} in the engine"
            report.checks.append(Check("prefix_cache", "ok" if on else "missing", detail))
    finally:
        report.adaptations = dict(backend.adaptations)
        await backend.aclose()
    return report


async def _start(backend: VLLMEngineTransport) -> tuple[Outcome, str]:
    try:
        await backend.start()
    except CEBError as exc:
        return "failed", str(exc)[:300]
    return "ok", f"engine started in {backend.start_s or 0.0:.1f} s"


_Judge = Callable[[Completion], tuple[bool, str]]
_Run = Callable[[ChatBackend], Awaitable[tuple[Outcome, str]]]


def _feature_requests() -> list[tuple[str, _Run]]:
    def ask(request: ChatRequest, judge: _Judge) -> _Run:
        return lambda backend: _chat(backend, request, judge)

    return [
        ("token_budget", _budget),
        (
            "structured_output",
            ask(ChatRequest(messages=_USER, max_tokens=48, json_schema=_PROBE_SCHEMA), _schema_followed),
        ),
        ("schema_bounds", ask(ChatRequest(messages=_USER, max_tokens=48, json_schema=_PROBE_SCHEMA), _schema_held)),
        ("n", ask(ChatRequest(messages=_USER, max_tokens=2, n=2, temperature=1.0), _two_choices)),
        ("logprobs", ask(ChatRequest(messages=_USER, max_tokens=2, logprobs=True, top_logprobs=20), _has_logprobs)),
        (
            "prompt_logprobs",
            ask(ChatRequest(messages=_USER, max_tokens=1, extra={"prompt_logprobs": 1}), _has_prompt_lps),
        ),
        ("continue_final_message", _continues),
        ("priority", ask(ChatRequest(messages=_USER, max_tokens=1, extra={"priority": 1}), _priority_accepted)),
    ]


async def _budget(backend: ChatBackend) -> tuple[Outcome, str]:
    """A one-token budget holds (the HTTP transport switches to ``max_tokens`` when needed)."""
    request = ChatRequest(messages=_USER, max_tokens=1)
    reply = (await backend.complete(request)).completion
    http = backend.transport
    if isinstance(http, OpenAITransport) and http.note_budget(request, reply):
        reply = (await backend.complete(request)).completion
    used = reply.completion_tokens
    field = backend.transport.token_limit_field if isinstance(backend.transport, OpenAITransport) else "max_tokens"
    if used is None:
        return "ok", "the server counts no completion tokens: the budget is not checked"
    if used > 1:
        return "missing", f"{used} tokens for a budget of 1 ({field}): replies are not bounded"
    return "ok", f"a budget of 1 token held ({field})"


async def _continues(backend: ChatBackend) -> tuple[Outcome, str]:
    """Check vLLM's ``continue_final_message``: the continued prompt counts fewer tokens than the closed one."""
    forced = (*_USER, {"role": "assistant", "content": "The answer is"})
    flags = {"continue_final_message": True, "add_generation_prompt": False}
    continued = (await backend.complete(ChatRequest(messages=forced, max_tokens=2, extra=flags))).completion
    plain = (await backend.complete(ChatRequest(messages=forced, max_tokens=1))).completion
    mine, closed = continued.prompt_tokens, plain.prompt_tokens
    if mine is None or closed is None:
        return "ok", f"accepted (answered {continued.texts[0][:24]!r}); no prompt token counts to check it by"
    if mine >= closed:
        return "missing", (
            f"ignored: the prompt counts {mine} tokens with it and {closed} without, so the last message is closed "
            "and answered afresh, not continued"
        )
    return "ok", f"continued: {mine} prompt tokens, {closed} with the message closed"


async def _timed(name: str, run: Callable[[], Awaitable[tuple[Outcome, str]]]) -> Check:
    """``run`` as a timed check; a request without an answer ``failed``, one refused ``missing``."""
    started = time.perf_counter()
    try:
        outcome, detail = await run()
    except TransientError as exc:  # no answer: refused connection, timeout, 5xx
        outcome, detail = "failed", str(exc)[:200]
    except BackendError as exc:  # the server answered and refused the request (400, 404...)
        outcome, detail = "missing", str(exc)[:200]
    return Check(name, outcome, detail, time.perf_counter() - started)


async def _models(backend: OpenAITransport, model: str) -> tuple[Outcome, str]:
    try:
        status, body = await backend.get("models")
    except TransientError as exc:
        return "failed", str(exc)
    if status != 200:
        return "failed", f"GET /models answered {status}"
    names = model_ids(body)
    if names is None:
        return "missing", "GET /models is not an OpenAI model list"
    if model not in names:
        return "missing", f"model {model!r} is not listed; the server has: {', '.join(names[:8]) or 'none'}"
    return "ok", f"{len(names)} model(s), {model!r} among them"


async def _chat(backend: ChatBackend, request: ChatRequest, judge: _Judge) -> tuple[Outcome, str]:
    ok, detail = judge((await backend.complete(request)).completion)
    return ("ok" if ok else "missing"), detail


def _any_text(c: Completion) -> tuple[bool, str]:
    return True, f"answered {c.texts[0][:24]!r}"


def _priority_accepted(c: Completion) -> tuple[bool, str]:
    return True, "accepted; vLLM orders its queue by it only when started with --scheduling-policy priority"


def _schema_followed(c: Completion) -> tuple[bool, str]:
    try:
        reply = orjson.loads(c.texts[0])
        ok = isinstance(reply, dict) and set(reply) == {"score", "reason"}
    except orjson.JSONDecodeError:
        ok = False
    return ok, "reply follows the JSON schema" if ok else f"reply does not follow the schema: {c.texts[0][:40]!r}"


def _schema_held(c: Completion) -> tuple[bool, str]:
    try:
        reply = orjson.loads(c.texts[0])
        score, reason = reply["score"], reply["reason"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return False, f"reply does not follow the schema: {c.texts[0][:40]!r}"
    held = [
        name
        for name, ok in (("minimum/maximum", 0 <= float(score) <= 1), ("length pattern", len(str(reason)) <= 12))
        if ok
    ]
    broken = {"minimum/maximum", "length pattern"} - set(held)
    if broken:
        return False, f"schema followed, but {', '.join(sorted(broken))} did not hold"
    return True, "schema followed; minimum/maximum and the string length pattern held"


def _two_choices(c: Completion) -> tuple[bool, str]:
    return len(c.texts) == 2, f"{len(c.texts)} choice(s) for n=2"


def _has_logprobs(c: Completion) -> tuple[bool, str]:
    tokens = (c.logprobs or (None,))[0]
    if not tokens:
        return False, "no logprobs in the reply"
    return True, f"{len(tokens[0].top)} top_logprobs per token"


def _has_prompt_lps(c: Completion) -> tuple[bool, str]:
    if not c.prompt_logprobs:
        return False, "no prompt_logprobs in the reply"
    return True, f"{len(c.prompt_logprobs)} prompt positions"


async def _prefix_cache(backend: OpenAITransport) -> tuple[Outcome, str]:
    try:
        status, body = await backend.get("metrics", root=True)
    except TransientError as exc:
        return "missing", f"no /metrics ({exc})"
    if status != 200:
        return "missing", f"GET /metrics answered {status}: no prefix-cache hit rates to report (scoring is unaffected)"
    try:
        found = parse_metrics(body.decode(errors="replace"))
    except ValueError as exc:
        return "missing", f"/metrics is not Prometheus text ({exc})"
    if found.prefix_cache_queries is None:
        return "missing", "/metrics has no vllm:prefix_cache_queries counter (prefix caching off, or not vLLM)"
    blocks = f", blocks of {found.block_size} tokens" if found.block_size else ""
    return "ok", (
        f"prefix cache counters present; hit rate so far {found.hit_rate or 0.0:.1%} of "
        f"{found.prefix_cache_queries:.0f} tokens{blocks}"
    )
