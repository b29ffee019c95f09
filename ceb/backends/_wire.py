"""OpenAI's chat-completions wire format as pure functions: bodies, replies, stream events, errors, ``Retry-After``.

Shapes follow OpenAI's reference for ``POST /v1/chat/completions`` and vLLM's extensions (top-level ``prompt_logprobs``
and ``prompt_token_ids``; an error body with a top-level ``message``, as older vLLM sent).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, overload

import msgspec
import orjson

from ceb.backends.transport import ChatRequest, Completion, StreamChunk, TokenLogprob, TransientError

__all__ = [
    "OPENAI_STRICT_UNSUPPORTED",
    "PromptLogprobs",
    "StructuredOutput",
    "chat_body",
    "error_message",
    "openai_strict_schema",
    "parse_completion",
    "parse_stream_event",
    "read_completion",
    "retry_after",
]

_MAX_ERROR_CHARS = 500  # any API error fits; a proxy's whole page does not


StructuredOutput = Literal["json_schema", "vllm", "json_object", "json_object_schema", "none"]
"""How a reply's JSON shape is enforced.

``json_schema``: OpenAI's ``response_format`` with ``strict: true`` (vLLM takes it too), the schema cut to what strict
mode accepts (:func:`openai_strict_schema`); ``vllm``: vLLM's top-level ``structured_outputs={"json": schema}``, the
whole schema; ``json_object``: JSON mode without a schema, for object replies only; ``json_object_schema``: llama.cpp's
``{"type": "json_object", "schema": ...}`` (its grammar enforces items, ``enum``, ``pattern`` and string lengths, not
number ranges), which the HTTP transport switches to where ``json_schema`` is refused; ``none``: prompt instructions
only."""

OPENAI_STRICT_UNSUPPORTED = frozenset({"minLength", "maxLength"})
"""Keywords OpenAI's strict structured outputs refuse: its "Supported schemas" have no string length bounds."""


def openai_strict_schema(schema: Any) -> Any:
    """A copy of ``schema`` without :data:`OPENAI_STRICT_UNSUPPORTED` at any depth (property names are kept).

    vLLM enforces those bounds (``structured_output = "vllm"`` sends them); under ``json_schema`` they are left to the
    prompt and the budget.
    """
    if isinstance(schema, Mapping):
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key in OPENAI_STRICT_UNSUPPORTED:
                continue
            if key in ("properties", "$defs", "definitions") and isinstance(value, Mapping):
                out[key] = {name: openai_strict_schema(sub) for name, sub in value.items()}
            else:
                out[key] = openai_strict_schema(value)
        return out
    if isinstance(schema, list | tuple):
        return [openai_strict_schema(item) for item in schema]
    return schema


def chat_body(
    request: ChatRequest,
    *,
    model: str,
    structured_output: StructuredOutput,
    token_limit_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",
) -> dict[str, Any]:
    """The JSON body of ``POST /chat/completions`` for ``request``, shared by the HTTP, engine and Batch transports.

    Server-specific fields (vLLM's ``structured_outputs``, ``request.extra``) sit at the top level, where vLLM reads
    them (as the SDK's ``extra_body`` does); the mappings of ``request`` are copied into dicts.

    Raises:
        ValueError: ``request.extra`` repeats a field the request sets.
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": [dict(m) for m in request.messages],
        "temperature": request.temperature,
        token_limit_field: request.max_tokens,
    }
    if request.n != 1:
        body["n"] = request.n
    if request.seed is not None:
        body["seed"] = request.seed
    if request.logprobs:
        body["logprobs"] = True
    if request.top_logprobs is not None:
        body["top_logprobs"] = request.top_logprobs
    if request.json_schema is not None and structured_output != "none":
        schema = dict(request.json_schema)
        if structured_output == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.schema_name,
                    "schema": openai_strict_schema(schema),
                    "strict": True,
                },
            }
        elif structured_output == "vllm":
            body["structured_outputs"] = {"json": schema}
        elif structured_output == "json_object_schema":
            body["response_format"] = {"type": "json_object", "schema": schema}
        elif schema.get("type") == "object":
            # JSON mode can only ask for an object; a reply of another shape (a bare number) goes unguarded.
            body["response_format"] = {"type": "json_object"}
    if request.extra:
        clash = sorted(k for k in request.extra if k in body)
        if clash:
            raise ValueError(f"ChatRequest.extra repeats fields the request already sets: {', '.join(clash)}")
        body.update(request.extra)
    return body


def read_completion(raw: bytes, *, default_model: str, asked_prompt_logprobs: Any = None) -> Completion:
    """Read an HTTP 200's ``chat.completion`` body as a :class:`~ceb.backends.transport.Completion`.

    As :func:`parse_completion`, decoded with ``msgspec``, the ``prompt_logprobs`` positions left undecoded until read
    (:class:`PromptLogprobs`: most of a teacher-forcing reply's bytes, most never read).

    Raises:
        TypeError, ValueError, KeyError: ``raw`` is not a chat completion (``msgspec.DecodeError`` is a ``ValueError``).
    """
    reply = _decode_reply(raw)
    return _completion(
        reply.choices,
        reply.usage,
        reply.model,
        PromptLogprobs.of(reply.prompt_logprobs, reply.prompt_token_ids, asked_prompt_logprobs),
        default_model,
    )


def parse_completion(body: Any, *, default_model: str, asked_prompt_logprobs: Any = None) -> Completion:
    """Read a decoded ``chat.completion`` body (an HTTP 200's) as a :class:`~ceb.backends.transport.Completion`.

    Texts are in choice ``index`` order, ``null`` content as ``""``. ``default_model`` is used where the body names
    none; ``asked_prompt_logprobs`` is the ``K`` of vLLM's ``prompt_logprobs=K`` the request sent.

    Raises:
        TypeError, ValueError, KeyError: ``body`` is not a chat completion.
    """
    if not isinstance(body, dict):
        raise TypeError(f"the body is a {type(body).__name__}, not an object")
    positions = body.get("prompt_logprobs")
    if positions is not None and not isinstance(positions, list):
        raise TypeError(f"prompt_logprobs is a {type(positions).__name__}, not a list")
    return _completion(
        body["choices"],
        body.get("usage"),
        body.get("model"),
        PromptLogprobs.of(positions, body.get("prompt_token_ids"), asked_prompt_logprobs),
        default_model,
    )


def _completion(
    raw_choices: Any, usage: Any, model: Any, prompt_logprobs: PromptLogprobs | None, default_model: str
) -> Completion:
    """The completion of a body's fields (checked here)."""
    if not isinstance(raw_choices, list):
        raise TypeError("choices is not a list")
    choices = sorted(raw_choices, key=_choice_index)
    texts = tuple(_content(c) for c in choices)
    if usage is not None and not isinstance(usage, dict):
        raise TypeError("usage is not an object")
    return Completion(
        texts=texts,
        prompt_tokens=_count(usage, "prompt_tokens"),
        completion_tokens=_count(usage, "completion_tokens"),
        model=model if isinstance(model, str) and model else default_model,
        logprobs=_choice_logprobs(choices),
        prompt_logprobs=prompt_logprobs,
    )


def parse_stream_event(line: bytes) -> StreamChunk | None:
    """Read one server-sent-events line of a streamed chat completion; ``None`` for a line without an event.

    Lines are ``data: <chat.completion.chunk>`` up to ``data: [DONE]``; with ``stream_options.include_usage`` the last
    chunk has empty ``choices`` and the ``usage`` (OpenAI's reference; vLLM sends the same).

    Raises:
        TypeError, ValueError, KeyError: A ``data:`` line that is not a chunk, or an error event.
    """
    line = line.strip()
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if data == b"[DONE]":
        return None
    body = orjson.loads(data)
    if not isinstance(body, dict):
        raise TypeError(f"a stream chunk is a {type(body).__name__}, not an object")
    if "error" in body and "choices" not in body:
        raise ValueError(f"the server reported an error mid-stream: {error_message(data)}")
    choices = body.get("choices") or []
    usage = body.get("usage")
    usage = usage if isinstance(usage, dict) else None
    if not isinstance(choices, list):
        raise TypeError("choices is not a list")
    first = next((c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0), None)
    text = ""
    finish = None
    if first is not None:
        delta = first.get("delta") or {}
        if not isinstance(delta, dict):
            raise TypeError("a choice's delta is not an object")
        content = delta.get("content")
        if content is not None and not isinstance(content, str):
            raise TypeError(f"a delta's content is a {type(content).__name__}, not a string")
        text = content or ""
        reason = first.get("finish_reason")
        finish = reason if isinstance(reason, str) else None
    return StreamChunk(
        text=text,
        has_choice=first is not None,
        prompt_tokens=_count(usage, "prompt_tokens"),
        completion_tokens=_count(usage, "completion_tokens"),
        finish_reason=finish,
    )


def _choice_index(choice: Any) -> int:
    if not isinstance(choice, dict):
        raise TypeError("a choice is not an object")
    index = choice["index"]
    if not isinstance(index, int) or isinstance(index, bool):
        raise TypeError("a choice's index is not an integer")
    return index


def _content(choice: dict[str, Any]) -> str:
    message = choice["message"]
    if not isinstance(message, dict):
        raise TypeError("a choice's message is not an object")
    content = message.get("content")
    if content is None:  # e.g. a refusal, or a reply cut to zero tokens
        return ""
    if not isinstance(content, str):
        raise TypeError(f"a message's content is a {type(content).__name__}, not a string")
    return content


def _count(usage: dict[str, Any] | None, key: str) -> int | None:
    value = None if usage is None else usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _choice_logprobs(choices: list[dict[str, Any]]) -> tuple[tuple[TokenLogprob, ...] | None, ...] | None:
    """Each choice's ``logprobs.content``; ``None`` when no choice has any."""
    out: list[tuple[TokenLogprob, ...] | None] = []
    for c in choices:
        lp = c.get("logprobs")
        content = lp.get("content") if isinstance(lp, dict) else None
        if content is None:
            out.append(None)
            continue
        if not isinstance(content, list):
            raise TypeError("logprobs.content is not a list")
        out.append(
            tuple(
                TokenLogprob(
                    token=str(t["token"]),
                    logprob=float(t["logprob"]),
                    top=tuple((str(a["token"]), float(a["logprob"])) for a in t.get("top_logprobs") or ()),
                )
                for t in content
            )
        )
    return tuple(out) if any(x is not None for x in out) else None


class _Entry(msgspec.Struct):
    """One entry of a ``prompt_logprobs`` position: vLLM's ``Logprob``."""

    logprob: float
    rank: Any = None
    decoded_token: Any = None


_Position = dict[str, _Entry] | None
_decode_position = msgspec.json.Decoder(_Position).decode


class _Reply(msgspec.Struct):
    """The top level of a ``chat.completion`` body, vLLM's ``prompt_logprobs`` positions left undecoded."""

    choices: Any
    usage: Any = None
    model: Any = None
    prompt_logprobs: list[msgspec.Raw] | None = None
    prompt_token_ids: Any = None


_decode_reply = msgspec.json.Decoder(_Reply).decode


class PromptLogprobs(Sequence["TokenLogprob | None"]):
    """vLLM's ``prompt_logprobs`` of one reply as a sequence of shape ``(P,)``, a position decoded when first read.

    Each position of vLLM's list is ``null`` (the first) or ``{"<id>": {logprob, rank, decoded_token}}``: the
    prompt's own token (the one ``prompt_token_ids`` names, else the first entry), then the top ``K``. A reply
    carries ``K + 1`` entries for each of hundreds of positions and a statistic reads the few of its span, so a
    position stays undecoded JSON (``msgspec.Raw``; or decoded values, from a Batch file or the cache) until it is
    read. Reads give :class:`~ceb.backends.transport.TokenLogprob` with ``top`` ranked, kept within the ``K`` asked
    for; the sequence equals a tuple of the same values.

    Raises (on a read):
        TransientError: The position is not ``null`` nor a non-empty object of entries each with a numeric
            ``logprob``: the server's reply was malformed.
    """

    __slots__ = ("_ids", "_k", "_positions", "_read")

    def __init__(self, positions: Sequence[Any], ids: Sequence[Any] | None = None, k: int | None = None) -> None:
        self._positions, self._ids, self._k = positions, ids, k
        self._read: dict[int, TokenLogprob | None] = {}

    @classmethod
    def of(cls, positions: Sequence[Any] | None, token_ids: Any, asked: Any) -> PromptLogprobs | None:
        """A reply's positions (``None`` when it has none), its ``prompt_token_ids`` and the ``K`` its request sent.

        The token ids name each position's own token when their count matches.
        """
        if positions is None:
            return None
        ids = token_ids if isinstance(token_ids, list) and len(token_ids) == len(positions) else None
        k = asked if isinstance(asked, int) and not isinstance(asked, bool) and asked >= 0 else None
        return cls(positions, ids, k)

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, index: int) -> TokenLogprob | None: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[TokenLogprob | None, ...]: ...

    def __getitem__(self, index: int | slice) -> TokenLogprob | None | tuple[TokenLogprob | None, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        i = index + len(self) if index < 0 else index
        if not 0 <= i < len(self):
            raise IndexError("prompt_logprobs index out of range")
        if i not in self._read:
            self._read[i] = self._position(i)
        return self._read[i]

    def _position(self, i: int) -> TokenLogprob | None:
        """Position ``i`` decoded and built."""
        pos = self._positions[i]
        try:
            entries = _decode_position(pos) if isinstance(pos, msgspec.Raw) else msgspec.convert(pos, _Position)
        except msgspec.MsgspecError as exc:
            raise TransientError(f"prompt_logprobs[{i}] is unreadable: {exc}") from exc
        if entries is None:
            return None
        if not entries:
            raise TransientError(f"prompt_logprobs[{i}] is an empty object")
        k = self._k
        ranked = sorted(((_rank(e), e) for e in entries.values()), key=lambda re: (re[0] is None, re[0] or 0))
        top = tuple((_text(e), e.logprob) for r, e in ranked if k is None or r is None or r <= k)
        own = str(self._ids[i]) if self._ids is not None else None
        e = entries[own] if own is not None and own in entries else next(iter(entries.values()))
        return TokenLogprob(token=_text(e), logprob=e.logprob, top=top, rank=_rank(e))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (PromptLogprobs, tuple, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"PromptLogprobs({len(self)} positions, k={self._k})"

    def to_json(self) -> dict[str, Any]:
        """The positions as the server sent them, with the token ids and ``K``, for ``orjson`` (the reply cache)."""
        positions = [orjson.Fragment(bytes(p)) if isinstance(p, msgspec.Raw) else p for p in self._positions]
        return {"positions": positions, "ids": self._ids, "k": self._k}


def _rank(entry: _Entry) -> int | None:
    rank = entry.rank
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def _text(entry: _Entry) -> str:
    return str(entry.decoded_token or "")


def error_message(raw: bytes) -> str:
    """The message of an error body, whitespace-collapsed, at most 500 characters; ``"(empty body)"`` for none.

    Reads OpenAI's ``{"error": {"message"}}``, ``{"error": "..."}`` and older vLLM's ``{"message"}``; any other body as
    text.
    """
    text = ""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        found = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
        if found is None:
            found = body.get("message")
        if isinstance(found, str):
            text = found
    if not text:
        text = raw.decode("utf-8", errors="replace")
    text = " ".join(text.split())
    if len(text) > _MAX_ERROR_CHARS:
        text = text[: _MAX_ERROR_CHARS - 3] + "..."
    return text or "(empty body)"


def retry_after(value: str | None) -> float | None:
    """Seconds of a ``Retry-After`` value (RFC 9110 §10.2.3), negatives as 0.

    ``None`` when absent, an HTTP date (the backoff applies) or not finite.
    """
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None
