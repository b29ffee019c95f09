"""Reading the OpenAI chat-completions wire format: replies, error bodies and ``Retry-After``.

Pure functions over decoded JSON (``orjson.loads`` output) and header strings, kept apart from the transport
in :mod:`ceb.backends.openai` so they can be tested without a server. The shapes follow OpenAI's API reference
for ``POST /v1/chat/completions`` (``choices[i].message.content``, ``choices[i].logprobs.content``, ``usage``,
``{"error": {"message": ...}}``) and vLLM's extensions to it (top-level ``prompt_logprobs`` and
``prompt_token_ids``; error bodies that put ``message`` at the top level, as vLLM did before it adopted
OpenAI's nested shape).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import orjson

from ceb.backends.transport import ChatRequest, Completion, StreamChunk, TokenLogprob

__all__ = [
    "OPENAI_STRICT_UNSUPPORTED",
    "StructuredOutput",
    "chat_body",
    "error_message",
    "openai_strict_schema",
    "parse_completion",
    "parse_stream_event",
    "retry_after",
]

_MAX_ERROR_CHARS = 500
"""Longest server error text carried into an exception: enough for any API error, not a proxy's whole page."""


StructuredOutput = Literal["json_schema", "vllm", "json_object", "json_object_schema", "none"]
"""How a reply's JSON shape is enforced.

``json_schema``: OpenAI's ``response_format={"type": "json_schema", ...}`` with ``strict: true`` (also accepted
by vLLM), the schema cut to what OpenAI's strict mode accepts (no string length bounds; see
:func:`~ceb.backends._wire.openai_strict_schema`);
``vllm``: vLLM's top-level ``structured_outputs={"json": schema}`` body field, the whole schema (number ranges and
string lengths enforced);
``json_object``: JSON mode without a schema, for object-shaped replies only;
``json_object_schema``: llama.cpp's form, ``response_format={"type": "json_object", "schema": schema}``, the whole
schema (llama.cpp turns it into a grammar: ``minItems`` / ``maxItems``, ``enum``, ``pattern`` and string lengths
are enforced, number ranges are not); llama-cpp-python's server refuses ``json_schema`` (500) and
:class:`~ceb.backends.openai.OpenAIBackend` switches to this mode by itself when it does;
``none``: prompt instructions only.
"""

OPENAI_STRICT_UNSUPPORTED = frozenset({"minLength", "maxLength"})
"""Schema keywords OpenAI's strict structured outputs refuse (its "Supported schemas" list has ``pattern`` and
``format`` for strings, and ``minimum``/``maximum``, ``minItems``/``maxItems`` and ``enum``, but no string length
bounds); :func:`openai_strict_schema` drops them."""


def openai_strict_schema(schema: Any) -> Any:
    """A copy of ``schema`` without the keywords in :data:`OPENAI_STRICT_UNSUPPORTED`, at every depth.

    vLLM enforces them (xgrammar), and ``structured_output = "vllm"`` sends them; OpenAI's strict mode would
    refuse the whole request, so ``json_schema`` mode sends the schema without them and leaves those bounds to
    the prompt and the output budget.

    Args:
        schema: A JSON Schema as JSON values (mappings are copied into dicts).

    Returns:
        The schema without those keywords; property names are kept even when they equal a keyword.
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
    """The JSON body of ``POST /chat/completions`` for ``request``, exactly as sent.

    One function for both ways to reach vLLM: the HTTP backend sends this body, and the in-process engine
    backend validates the same body into vLLM's own ``ChatCompletionRequest``, so both ask the same thing.
    Server-specific fields (vLLM's ``structured_outputs``, ``request.extra``) sit at the top level of the body,
    where vLLM reads them; the SDK's ``extra_body`` ends up the same way.

    Args:
        request: The request to encode.
        model: Model name as the server knows it.
        structured_output: How a ``json_schema`` is enforced (:data:`StructuredOutput`).
        token_limit_field: Wire name of the output budget.

    Returns:
        The body as a dict of JSON values (the mappings of ``request`` copied into dicts).

    Raises:
        ValueError: ``request.extra`` repeats a field the request already sets.
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


def parse_completion(body: Any, *, default_model: str, asked_prompt_logprobs: Any = None) -> Completion:
    """Turn a decoded ``chat.completion`` object into a :class:`~ceb.backends.transport.Completion`.

    Args:
        body: The decoded JSON body of an HTTP 200 reply.
        default_model: Model name to report when the body names none.
        asked_prompt_logprobs: The ``prompt_logprobs`` value the request sent (vLLM's ``K``), which decides
            which alternatives count as the top ``K`` (see :func:`_prompt_logprobs`); ``None`` when not asked.

    Returns:
        One text per choice in ``index`` order (``n`` of them; a ``null`` content reads as ``""``), the token
        counts of ``usage`` when present, and the log-probabilities when the server sent any.

    Raises:
        TypeError, ValueError, KeyError: ``body`` is not a chat completion (no ``choices`` list, a choice
            without a ``message`` object, a non-string content, malformed log-probabilities).
    """
    if not isinstance(body, dict):
        raise TypeError(f"the body is a {type(body).__name__}, not an object")
    raw_choices = body["choices"]
    if not isinstance(raw_choices, list):
        raise TypeError("choices is not a list")
    choices = sorted(raw_choices, key=_choice_index)
    texts = tuple(_content(c) for c in choices)
    usage = body.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise TypeError("usage is not an object")
    model = body.get("model")
    return Completion(
        texts=texts,
        prompt_tokens=_count(usage, "prompt_tokens"),
        completion_tokens=_count(usage, "completion_tokens"),
        model=model if isinstance(model, str) and model else default_model,
        logprobs=_choice_logprobs(choices),
        prompt_logprobs=_prompt_logprobs(
            body.get("prompt_logprobs"), body.get("prompt_token_ids"), asked_prompt_logprobs
        ),
    )


def parse_stream_event(line: bytes) -> StreamChunk | None:
    """Read one line of a streamed chat completion (server-sent events, ``stream: true``).

    The stream is ``data: <chat.completion.chunk JSON>`` lines separated by blank lines and ended by
    ``data: [DONE]``; each chunk carries ``choices[0].delta.content`` (the role-only first chunk has none), and
    with ``stream_options: {"include_usage": true}`` a last chunk with empty ``choices`` carries ``usage``
    (OpenAI's API reference; vLLM's ``chat_completion_stream_generator`` sends the same).

    Args:
        line: One line as received, line break included or not.

    Returns:
        The event, or ``None`` for a line that carries none (blank, an SSE comment, another field, ``[DONE]``).

    Raises:
        TypeError, ValueError, KeyError: A ``data:`` line that is not a chat-completion chunk.
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
    """Each choice's generated tokens with their log-probabilities (``choices[i].logprobs.content``)."""
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


def _prompt_logprobs(positions: Any, token_ids: Any, asked: Any) -> tuple[TokenLogprob | None, ...] | None:
    """Read vLLM's top-level ``prompt_logprobs``: per prompt token ``None`` or ``{"<id>": entry, ...}``.

    Each entry is ``{"logprob": float, "rank": int, "decoded_token": str}``. vLLM lists the prompt's own token
    first, then the ``K`` most likely tokens (the own token once, when it is among them), so the own token is
    the one named by ``prompt_token_ids`` when the server sent those, else the first entry. ``top`` keeps the
    entries ranked within the ``K`` that was asked for (``asked``; all entries when it is not a non-negative
    integer), so a prompt token ranked below ``K`` is not counted among the top ``K``.

    Raises:
        TypeError, ValueError, KeyError: The field does not have that shape.
    """
    if positions is None:
        return None
    if not isinstance(positions, list):
        raise TypeError(f"prompt_logprobs is a {type(positions).__name__}, not a list")
    ids = token_ids if isinstance(token_ids, list) and len(token_ids) == len(positions) else None
    k = asked if isinstance(asked, int) and not isinstance(asked, bool) and asked >= 0 else None
    out: list[TokenLogprob | None] = []
    for i, pos in enumerate(positions):
        if pos is None:
            out.append(None)
            continue
        if not isinstance(pos, dict) or not pos:
            raise TypeError(f"prompt_logprobs[{i}] is not a non-empty object")
        own_key = str(ids[i]) if ids is not None and str(ids[i]) in pos else next(iter(pos))
        entries = {key: _entry(value) for key, value in pos.items()}
        ranked = sorted(entries.values(), key=lambda e: (e[2] is None, e[2] or 0))
        top = tuple((tok, lp) for tok, lp, rank in ranked if k is None or rank is None or rank <= k)
        token, logprob, rank = entries[own_key]
        out.append(TokenLogprob(token=token, logprob=logprob, top=top, rank=rank))
    return tuple(out)


def _entry(value: Any) -> tuple[str, float, int | None]:
    if not isinstance(value, dict):
        raise TypeError("a prompt_logprobs entry is not an object")
    rank = value.get("rank")
    return (
        str(value.get("decoded_token") or ""),
        float(value["logprob"]),
        int(rank) if isinstance(rank, int) and not isinstance(rank, bool) else None,
    )


def error_message(raw: bytes) -> str:
    """The human-readable message of an error reply's body, at most 500 characters.

    Reads OpenAI's ``{"error": {"message": ...}}``, a bare ``{"error": "..."}``, and vLLM's older top-level
    ``{"message": ...}``; any other body (a proxy's HTML page, plain text, other JSON) is given as its text,
    whitespace-collapsed.

    Args:
        raw: The body as received.

    Returns:
        The message; ``"(empty body)"`` when there was nothing to read.
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
    """Seconds to wait from a ``Retry-After`` header value (RFC 9110, section 10.2.3).

    Args:
        value: The header's value, or ``None`` when it was not sent.

    Returns:
        The delay in seconds (negative values read as 0), or ``None`` when the header is absent, an HTTP
        date (the jittered backoff applies instead), or not a finite number.
    """
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None
