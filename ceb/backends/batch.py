"""OpenAI Batch files: a run's requests written as Batch input lines, and the output lines read back as replies.

The format is OpenAI's Batch API (JSONL for ``POST /v1/batches``), also read by Azure OpenAI's batch deployments and
``vllm run-batch``. An input line is ``{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body"}``, the
body as :func:`~ceb.backends._wire.chat_body` builds it online; an output line is ``{"id", "custom_id", "response":
{"status_code", "request_id", "body"}, "error"}``. OpenAI writes failures to a separate error file; vLLM writes them in
the output with no body and ``error`` a string or an error response; both are read. A 2xx reply's ``usage`` is checked,
since the rows' token counts come from it.

:class:`BatchTransport` sends nothing: a run over it looks each request up among the replies, and a request without one
is recorded for the next Batch file and fails its step. Export is a run with no replies; import is the same run with
them, so the rows are ordinary rows.

``custom_id`` is ``<tag>/<lane>/<trajectory>/<step>/<n>`` (tag: a digest of the export's settings and streams; lane:
:func:`~ceb.pipeline.shard.lane_id`; step 0-based; ``n``: the request's number in the step). A reply is matched by step
and body, so the order of a step's requests does not matter and two identical ones are one line.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ceb.backends._wire import error_message, parse_completion
from ceb.backends.openai import OpenAITransport
from ceb.backends.scheduling import current_lane, current_step
from ceb.backends.transport import ChatRequest, Completion, Transport
from ceb.config import BackendConfig
from ceb.errors import BackendError, DataError, Problem

__all__ = [
    "BATCH_URL",
    "MAX_USAGE_TOKENS",
    "BATCH_CONCURRENCY",
    "BatchTransport",
    "BatchReply",
    "BatchRequest",
    "body_key",
    "export_tag",
    "read_output",
    "read_requests",
    "request_line",
]

BATCH_URL = "/v1/chat/completions"
"""The one endpoint a ceb Batch file targets."""

MAX_USAGE_TOKENS = 10**8
"""Most tokens one ``usage`` count may hold, far past any context window (about 10M today): more is a damaged line."""

BATCH_CONCURRENCY = 1 << 16
"""Requests in flight over a Batch transport: no limit in effect (nothing is sent)."""

_USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")

_WIRE_URL = "http://localhost/v1"
"""A base URL for the payload builder; nothing is sent to it."""


def body_key(body: Mapping[str, Any]) -> bytes:
    """The canonical bytes (sorted keys) of a request body, by which a reply is matched."""
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def _step_id(custom_id: str) -> str:
    """``custom_id`` without its last ``/<n>``."""
    return custom_id.rsplit("/", 1)[0]


@dataclass(frozen=True, slots=True)
class BatchRequest:
    """One line of a Batch input file: ``custom_id`` (module docstring) and the chat-completions ``body``."""

    custom_id: str
    body: dict[str, Any]


def request_line(request: BatchRequest) -> bytes:
    """The JSONL line of ``request``, newline included."""
    line = {"custom_id": request.custom_id, "method": "POST", "url": BATCH_URL, "body": request.body}
    return orjson.dumps(line, option=orjson.OPT_NON_STR_KEYS) + b"\n"


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, decoded object)`` of each non-blank line; :class:`DataError` for a line that is not JSON."""
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield number, orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise DataError(Problem(str(path), number, "<line>", f"not JSON: {exc}")) from None


def _custom_id(where: tuple[str, int], line: Any) -> str:
    """The ``custom_id`` of a decoded line; :class:`DataError` unless it is an object with one."""
    if not isinstance(line, dict):
        raise DataError(Problem(*where, "<line>", "not a JSON object"))
    cid = line.get("custom_id")
    if not isinstance(cid, str) or not cid:
        raise DataError(Problem(*where, "custom_id", "missing or not a string"))
    return cid


def read_requests(path: Path) -> list[BatchRequest]:
    """The lines of a Batch input file ceb wrote.

    Raises:
        DataError: A malformed line, no ``custom_id`` or ``body``, a ``url`` other than :data:`BATCH_URL`, or a repeated
            ``custom_id`` (names file, line and field).
        OSError: The file cannot be read.
    """
    seen: set[str] = set()
    out: list[BatchRequest] = []
    for number, line in _lines(path):
        where = str(path), number
        cid, body = _custom_id(where, line), line.get("body")
        if not isinstance(body, dict):
            raise DataError(Problem(*where, "body", "missing or not an object"))
        if line.get("url") != BATCH_URL:
            raise DataError(Problem(*where, "url", f"{line.get('url')!r}; ceb writes {BATCH_URL} only"))
        if cid in seen:
            raise DataError(Problem(*where, "custom_id", f"{cid!r} is repeated"))
        seen.add(cid)
        out.append(BatchRequest(cid, body))
    return out


@dataclass(frozen=True, slots=True)
class BatchReply:
    """The answer to one Batch request: a chat completion ``body`` (2xx), or the ``error`` message.

    ``status`` is ``response.status_code``, 0 for a line without a response.
    """

    custom_id: str
    status: int
    body: dict[str, Any] | None
    error: str | None


def read_output(path: Path, known: Mapping[str, BatchRequest]) -> dict[str, BatchReply]:
    """The replies of a Batch output (or error) file by ``custom_id``; ``known`` are the input files' requests.

    Raises:
        DataError: A malformed line, an id missing, unknown or repeated, a 2xx without a body, or a ``usage`` count that
            is not an integer in 0..:data:`MAX_USAGE_TOKENS` or exceeds ``n`` times the request's budget (names file,
            line and field).
        OSError: The file cannot be read.
    """
    out: dict[str, BatchReply] = {}
    for number, line in _lines(path):
        where = str(path), number
        cid = _custom_id(where, line)
        if cid not in known:
            raise DataError(Problem(*where, "custom_id", f"{cid!r} is in no request file of this batch"))
        if cid in out:
            raise DataError(Problem(*where, "custom_id", f"{cid!r} is answered twice"))
        response, error = line.get("response"), line.get("error")
        if response is not None and not isinstance(response, dict):
            raise DataError(Problem(*where, "response", "not an object"))
        status = response.get("status_code", 0) if response else 0
        if not isinstance(status, int):
            raise DataError(Problem(*where, "response.status_code", "not an integer"))
        body = response.get("body") if response else None
        if 200 <= status < 300 and error is None:
            if not isinstance(body, dict):
                raise DataError(Problem(*where, "response.body", "a 2xx response without a body object"))
            _check_usage(where, body.get("usage"), known[cid].body)
            out[cid] = BatchReply(cid, status, body, None)
            continue
        out[cid] = BatchReply(cid, status, None, _error_text(error, body))
    return out


def _check_usage(where: tuple[str, int], usage: Any, request: Mapping[str, Any]) -> None:
    """Refuse a reply's ``usage`` no server writes (``None`` is let through)."""
    if usage is None:
        return
    if not isinstance(usage, dict):
        raise DataError(Problem(*where, "response.body.usage", "not an object"))
    for key in _USAGE_COUNTS:
        value, field = usage.get(key), f"response.body.usage.{key}"
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise DataError(Problem(*where, field, f"{value!r} is not a whole number of tokens"))
        if not 0 <= value <= MAX_USAGE_TOKENS:
            raise DataError(Problem(*where, field, f"{value:,} tokens: not in 0..{MAX_USAGE_TOKENS:,}"))
    limit = "max_completion_tokens" if "max_completion_tokens" in request else "max_tokens"
    budget, n, completion = request.get(limit), request.get("n", 1), usage.get("completion_tokens")
    if isinstance(budget, int) and isinstance(n, int) and isinstance(completion, int) and completion > budget * n:
        raise DataError(
            Problem(
                *where,
                "response.body.usage.completion_tokens",
                f"{completion:,} tokens: more than the n x {limit} = {n} x {budget} the request allows",
            )
        )


def _error_text(error: Any, body: Any) -> str:
    """The message of a failed line: OpenAI's ``error``, vLLM's error response, or the body's own error."""
    for doc in (error, body):
        inner = doc.get("error", doc) if isinstance(doc, dict) else doc
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str) and inner:
            return inner
    return error_message(orjson.dumps(error if error is not None else body or {}))


@dataclass(slots=True)
class _Step:
    """The requests one step asked, numbered in the order asked."""

    asked: dict[bytes, int] = field(default_factory=dict)


class BatchTransport(Transport):
    """A transport that answers from Batch replies and records every request it has none for.

    ``settings`` shapes the bodies as online (``model``, ``structured_output``, ``token_limit_field``; never
    ``priority``: no queue, and OpenAI refuses it). ``tag`` begins every ``custom_id``; ``requests`` and ``replies`` are
    the earlier Batch files of this export and their replies by id; ``waiting`` are ids whose file's output is not
    imported yet (asked, they wait and are not :attr:`unanswered`).

    Attributes:
        pending: Requests with no earlier line, in the order asked: the next Batch file.
        unanswered: Requests of an earlier file without a reply in its imported output.
        replied_models: The model names the replies carry (e.g. OpenAI's dated snapshot).

    Raises:
        ConfigError: No ``backend.model``.
    """

    name = "batch"

    def __init__(
        self,
        settings: BackendConfig,
        tag: str,
        requests: list[BatchRequest] | None = None,
        replies: Mapping[str, BatchReply] | None = None,
        waiting: Collection[str] = (),
    ) -> None:
        wire = settings.model_copy(update={"name": "openai", "base_url": _WIRE_URL, "server_priority": "off"})
        self.wire = OpenAITransport(wire)
        super().__init__("batch")
        self.tag = tag
        self.model = self.wire.model
        self._known: dict[tuple[str, bytes], str] = {}
        self._earlier: dict[str, int] = {}
        for r in requests or ():
            step = _step_id(r.custom_id)
            self._known.setdefault((step, body_key(r.body)), r.custom_id)
            self._earlier[step] = self._earlier.get(step, 0) + 1
        self._replies = dict(replies or {})
        self._waiting = frozenset(waiting)
        self._steps: dict[str, _Step] = {}
        self.pending: list[BatchRequest] = []
        self.unanswered: list[str] = []
        self.replied_models: set[str] = set()

    def step_id(self) -> str:
        """``<tag>/<lane>/<trajectory>/<step>`` of the request made now; :class:`BackendError` outside a lane's step."""
        lane, where = current_lane(), current_step()
        if lane is None or where is None:
            raise BackendError("a Batch request must come from a lane's step", backend=self.label)
        trajectory, t = where
        return f"{self.tag}/{lane}/{trajectory}/{t}"

    async def send(self, request: ChatRequest, endpoint: str) -> Completion:
        """The reply to ``request`` from the Batch output, or record it for the next Batch file.

        Raises:
            BackendError: No reply yet (recorded in :attr:`pending`, or its output not imported), none in the imported
                output, or the Batch answered with an error or did not run it.
        """
        body = self.wire.payload(request)
        key = body_key(body)
        step = self.step_id()
        cid = self._known.get((step, key))
        if cid is None:
            asked = self._steps.setdefault(step, _Step()).asked
            if key not in asked:  # numbered after the step's requests in earlier files, so ids stay unique
                asked[key] = len(asked) + self._earlier.get(step, 0)
                cid = f"{step}/{asked[key]}"
                self.pending.append(BatchRequest(cid, body))
            raise BackendError("no reply yet: the request is in the next Batch file", backend=self.label)
        reply = self._replies.get(cid)
        if reply is None and cid in self._waiting:
            raise BackendError("no reply yet: the output of its Batch file is not imported yet", backend=self.label)
        if reply is None:
            self.unanswered.append(cid)
            raise BackendError(f"no reply in the Batch output for {cid}", backend=self.label)
        if reply.body is None:  # status 0: a line without a response (OpenAI's expired or cancelled requests)
            why = f"{reply.status} from the Batch" if reply.status else "not run by the Batch"
            raise BackendError(f"{why}: {reply.error}", backend=self.label)
        try:
            completion = parse_completion(
                reply.body, default_model=self.model, asked_prompt_logprobs=request.extra.get("prompt_logprobs")
            )
        except (TypeError, ValueError, KeyError) as exc:
            raise BackendError(f"the Batch reply to {cid} is not a chat completion: {exc}") from exc
        self.replied_models.add(completion.model)
        return completion

    def describe(self) -> dict[str, Any]:
        """The base record with the requested and replied models and the wire form."""
        return super().describe() | {
            "endpoint": [],
            "model": self.model,
            "replied_models": sorted(self.replied_models),
            "structured_output": self.wire.structured_output,
            "token_limit_field": self.wire.token_limit_field,
        }


def export_tag(parts: Mapping[str, Any]) -> str:
    """``ceb-`` and 8 hex digits of BLAKE2b over ``parts`` (the export's settings and stream digests)."""
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"))  # json: settings may hold ints past 64 bits
    return "ceb-" + hashlib.blake2b(canonical.encode(), digest_size=4).hexdigest()
