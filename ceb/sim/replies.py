"""What the simulator answers: seeded, deterministic stand-ins for a model's replies. Not a model.

A reply depends on the simulator's seed, the request's ``temperature``, ``seed`` and choice index, and its messages up
to the first user message (:func:`prompt_digest`), plus the final one under ``continue_final_message``: a re-ask with a
correction appended, or a retry after a fault, gets the same answer. At temperature 0 all ``n`` choices are equal.

:func:`classify` dispatches on the structured-output schema, else on the prompt text: ``critic`` (schema
``critic_score`` or a ``score`` property, or the critic's ``{"score"`` format) replies a score ``~ Beta(4, 2.5)``,
``Beta(1.5, 4)`` under the repetition note; ``labels`` (a ``labels`` property, or the ``{"labels"`` format) replies the
schema's ``minItems`` labels (else the step count the prompt states, else 1), each 1 with :data:`LABEL_POSITIVE_RATE`;
``cot`` (:data:`COT_MARKER`) two filler sentences and ``Confidence: <n>``; ``stated`` (continuing a message ending
:data:`STATED_MARKER`) ``" <n>"``; ``text`` ``True``/``False`` for a question naming both (:data:`TRUE_RATE`), else a
filler sentence. Log-probabilities are synthetic too, shaped as OpenAI's and vLLM's.
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from ceb.sim.tokenizer import message_text, token_id, tokenize

__all__ = [
    "COT_MARKER",
    "LABEL_POSITIVE_RATE",
    "REPETITION_MARKER",
    "STATED_MARKER",
    "TRUE_RATE",
    "Replier",
    "ReplyKind",
    "ReplyPlan",
    "choice_rng",
    "classify",
    "completion_logprobs",
    "confidence_number",
    "cot_reply",
    "critic_reply",
    "default_replier",
    "format_critic",
    "format_labels",
    "labels_reply",
    "prompt_digest",
    "prompt_logprobs",
    "request_schema",
    "text_reply",
]

Replier = Callable[[dict[str, Any], int, random.Random], str]
"""``(request body, choice index, seeded rng) -> reply text``; drawing only from the rng keeps it deterministic."""

ReplyKind = Literal["critic", "labels", "cot", "stated", "text"]

REPETITION_MARKER = "repeats one of the last few"
"""Words of the critic prompt's repetition note (``rho_t = 1``, ``critic_user.j2``)."""

COT_MARKER = "Confidence: <0-100>"
"""The CoT baseline's instruction for its final line (``cot_user.j2``)."""

STATED_MARKER = "(0-100):"
"""End of the verbalized baseline's cue (``verbalized_cue.j2``)."""

LABEL_POSITIVE_RATE = 0.6
"""Probability that a simulated hindsight label is 1."""

TRUE_RATE = 0.6
"""Probability that a simulated True/False answer is ``True``."""

_CRITIC_BETA = (4.0, 2.5)
_REPEATED_BETA = (1.5, 4.0)

_REASONS = (
    "The action follows from the current state.",
    "The action looks plausible but its effect is uncertain.",
    "Similar actions made progress in earlier steps.",
    "The action addresses the task directly.",
    "The state suggests a different action is needed.",
)
_REPEATED_REASON = "The action repeats a recent one without new information."

_FILLER = (
    "the",
    "agent",
    "step",
    "state",
    "looks",
    "consistent",
    "with",
    "task",
    "progress",
    "simulated",
    "output",
    "result",
    "next",
    "check",
    "likely",
)

_ALTERNATIVES = (
    " the",
    ",",
    ".",
    " a",
    " and",
    " of",
    " to",
    " is",
    "\n",
    " in",
    " it",
    " that",
    " for",
    " on",
    " with",
    " as",
    " not",
    " be",
    " at",
    " or",
    " this",
    " was",
    " an",
    " by",
)
_ANSWER_PAIRS = {"true": "false", "false": "true", "yes": "no", "no": "yes"}
_STRIP = ".,!?;:\"'"


@dataclass(frozen=True, slots=True)
class ReplyPlan:
    """What a request asks for: ``kind``, ``n_labels`` for ``labels``, ``repeated`` for a flagged critic prompt."""

    kind: ReplyKind
    n_labels: int | None = None
    repeated: bool = False


def _prefix(messages: Sequence[Any]) -> Sequence[Any]:
    """Messages up to and including the first user message (all when there is none)."""
    for i, m in enumerate(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            return messages[: i + 1]
    return messages


def _prefix_texts(body: Mapping[str, Any]) -> list[str]:
    return [message_text(m.get("content")) for m in _prefix(body.get("messages") or ()) if isinstance(m, dict)]


def _first_user_text(body: Mapping[str, Any]) -> str:
    prefix = _prefix(body.get("messages") or ())
    last = prefix[-1] if prefix else None
    return message_text(last.get("content")) if isinstance(last, dict) and last.get("role") == "user" else ""


def request_schema(body: Mapping[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """The ``(name, JSON schema)`` a request asks for, each ``None`` when absent.

    Reads OpenAI's ``response_format`` (``json_schema``), vLLM's ``structured_outputs.json`` and older ``guided_json``;
    a schema sent as a JSON string is decoded.
    """
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema")
        if isinstance(spec, dict):
            name = spec.get("name")
            return (name if isinstance(name, str) else None), _as_schema(spec.get("schema"))
    structured = body.get("structured_outputs")
    if isinstance(structured, dict) and "json" in structured:
        return None, _as_schema(structured["json"])
    if "guided_json" in body:
        return None, _as_schema(body["guided_json"])
    return None, None


def _as_schema(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str | bytes):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


def _schema_count(spec: Any) -> int | None:
    if isinstance(spec, dict):
        for key in ("minItems", "maxItems"):
            value = spec.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
    return None


_STEP_COUNTS = (re.compile(r"each of the (\d+)"), re.compile(r"(\d+) steps\)"))
"""How a hindsight prompt states its step count: "... each of the N steps" or "(N steps)"."""


def _prompt_step_count(texts: Sequence[str]) -> int | None:
    """The step count the last text stating one states (its last statement, "each of the N" first)."""
    for text in reversed(texts):
        for pattern in _STEP_COUNTS:
            if found := pattern.findall(text):
                return int(found[-1])
    return None


def classify(body: Mapping[str, Any]) -> ReplyPlan:
    """What kind of reply ``body`` asks for (module docstring)."""
    name, schema = request_schema(body)
    props = schema.get("properties") if schema is not None else None
    texts = _prefix_texts(body)
    if name == "critic_score" or (isinstance(props, dict) and "score" in props):
        return ReplyPlan("critic", repeated=any(REPETITION_MARKER in t for t in texts))
    if isinstance(props, dict) and "labels" in props:
        count = _schema_count(props["labels"])
        if count is None:
            count = _prompt_step_count(texts)
        return ReplyPlan("labels", n_labels=1 if count is None else count)
    if schema is None:
        if any('{"score"' in t for t in texts):
            return ReplyPlan("critic", repeated=any(REPETITION_MARKER in t for t in texts))
        if any('{"labels"' in t for t in texts):
            count = _prompt_step_count(texts)
            return ReplyPlan("labels", n_labels=1 if count is None else count)
    if _continued_text(body).rstrip().endswith(STATED_MARKER):
        return ReplyPlan("stated")
    if any(COT_MARKER in t for t in texts):
        return ReplyPlan("cot")
    return ReplyPlan("text")


def _continued_text(body: Mapping[str, Any]) -> str:
    """The final message's text under ``continue_final_message``, else ``""``."""
    messages = body.get("messages") or ()
    if body.get("continue_final_message") and messages and isinstance(messages[-1], dict):
        return message_text(messages[-1].get("content"))
    return ""


def prompt_digest(sim_seed: int, body: Mapping[str, Any]) -> bytes:
    """A 16-byte BLAKE2b of everything a reply depends on but sampling (module docstring)."""
    h = hashlib.blake2b(str(sim_seed).encode(), digest_size=16)
    messages = body.get("messages") or ()
    for m in _prefix(messages):
        if isinstance(m, dict):
            h.update(b"\x00" + str(m.get("role", "")).encode() + b"\x01" + message_text(m.get("content")).encode())
    if body.get("continue_final_message") and messages and isinstance(messages[-1], dict):
        h.update(b"\x02" + message_text(messages[-1].get("content")).encode())
    return h.digest()


def choice_rng(digest: bytes, body: Mapping[str, Any], choice_index: int) -> random.Random:
    """The random stream of choice ``choice_index``, from :func:`prompt_digest` and the body's sampling fields."""
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and temperature <= 0:
        return random.Random(int.from_bytes(digest, "little"))
    material = digest + f"|{body.get('seed')}|{choice_index}".encode()
    return random.Random(int.from_bytes(hashlib.blake2b(material, digest_size=16).digest(), "little"))


def format_critic(score: str, reason: str) -> str:
    """``{"score": <score>, "reason": "<reason>"}``, ``score`` already JSON text."""
    return f'{{"score": {score}, "reason": {orjson.dumps(reason).decode()}}}'


def format_labels(labels: Sequence[int]) -> str:
    """``{"labels": [1, 0, ...]}``."""
    return '{"labels": [' + ", ".join(str(x) for x in labels) + "]}"


def critic_reply(rng: random.Random, repeated: bool) -> str:
    """A critic reply: score from Beta(4, 2.5), or Beta(1.5, 4) for a flagged repeat, 3 decimals."""
    a, b = _REPEATED_BETA if repeated else _CRITIC_BETA
    score = round(rng.betavariate(a, b), 3)
    reason = _REPEATED_REASON if repeated else rng.choice(_REASONS)
    return format_critic(repr(score), reason)


def confidence_number(rng: random.Random) -> int:
    """A stated confidence in 0..100: 100 times a draw of Beta(4, 2.5), rounded."""
    return round(100 * rng.betavariate(*_CRITIC_BETA))


def cot_reply(rng: random.Random) -> str:
    """Two filler sentences, then ``Confidence: <n>``."""
    sentences = [" ".join(rng.choice(_FILLER) for _ in range(rng.randint(5, 9))).capitalize() + "." for _ in "ab"]
    return f"{' '.join(sentences)}\nConfidence: {confidence_number(rng)}"


def labels_reply(rng: random.Random, n_labels: int) -> str:
    """A hindsight reply of ``n_labels`` labels, each 1 with probability :data:`LABEL_POSITIVE_RATE`."""
    return format_labels([1 if rng.random() < LABEL_POSITIVE_RATE else 0 for _ in range(n_labels)])


def text_reply(rng: random.Random, body: Mapping[str, Any]) -> str:
    """``True``/``False`` for a question naming both, else a filler sentence."""
    question = _first_user_text(body)
    if "True" in question and "False" in question:
        text = "True" if rng.random() < TRUE_RATE else "False"
    else:
        words = [rng.choice(_FILLER) for _ in range(rng.randint(5, 12))]
        text = "Simulated reply: " + " ".join(words) + "."
    final = _continued_text(body)
    if final and not final[-1].isspace():
        text = " " + text
    return text


def default_replier(body: dict[str, Any], choice_index: int, rng: random.Random) -> str:
    """The simulator's :data:`Replier`: dispatch on :func:`classify`."""
    plan = classify(body)
    if plan.kind == "critic":
        return critic_reply(rng, plan.repeated)
    if plan.kind == "labels":
        return labels_reply(rng, plan.n_labels or 0)
    if plan.kind == "cot":
        return cot_reply(rng)
    if plan.kind == "stated":
        return f" {confidence_number(rng)}"
    return text_reply(rng, body)


def _opposite(token: str) -> str | None:
    """The other answer of a True/False or Yes/No token, same case and spacing."""
    core = token.lstrip()
    lead = token[: len(token) - len(core)]
    word = core.rstrip(_STRIP)
    other = _ANSWER_PAIRS.get(word.lower())
    if other is None:
        return None
    if word.isupper():
        other = other.upper()
    elif word[:1].isupper():
        other = other.capitalize()
    return lead + other + core[len(word) :]


def _logprob_entry(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def completion_logprobs(text: str, top_k: int, rng: random.Random) -> dict[str, Any]:
    """OpenAI's ``choices[i].logprobs`` for ``text`` with synthetic values, one entry per toy token.

    A token's log-probability is ``-Exp(mean 0.3)`` nats, its ``top_logprobs`` it first, then ``top_k - 1`` (0 to 20)
    lower alternatives. A True/False or Yes/No token gets ``p ~ U(0.5, 0.99)`` and the other answer second with ``1 -
    p``, so P(True) can be read off.

    Returns:
        ``{"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}``.
    """
    content = []
    n_alt = len(_ALTERNATIVES)
    for token in tokenize(text):
        other = _opposite(token)
        if other is not None:
            p = 0.5 + 0.49 * rng.random()
            logprob = math.log(p)
            floor = math.log1p(-p)
            top = [_logprob_entry(token, logprob)]
            if top_k >= 2:
                top.append(_logprob_entry(other, floor))
        else:
            logprob = -rng.expovariate(1.0 / 0.3)
            floor = logprob
            top = [_logprob_entry(token, logprob)]
        at = rng.randrange(n_alt)
        while len(top) < top_k:
            candidate = _ALTERNATIVES[at % n_alt]
            at += 1
            if candidate in (token, other):
                continue
            floor -= 0.01 + rng.expovariate(1.0)
            top.append(_logprob_entry(candidate, floor))
        entry = _logprob_entry(token, logprob)
        entry["top_logprobs"] = top[:top_k]
        content.append(entry)
    return {"content": content}


def prompt_logprobs(tokens: Sequence[str], top_k: int, rng: random.Random) -> orjson.Fragment:
    """The ``prompt_logprobs`` (vLLM's) of a prompt of ``tokens``, synthetic, as JSON text of shape ``(len(tokens),)``.

    Entry 0 is ``null``. Entry ``i`` maps token ids (strings) to ``{"logprob", "rank", "decoded_token"}``: the prompt's
    own token first, as vLLM lists it, at rank 1 with probability 0.6, else ``2 + floor(Exp(mean 2))`` (at most 64);
    then alternatives for the other ranks up to ``top_k`` (0 to 20). Log-probabilities fall with rank. Each position
    takes one of :data:`_POSITION_SHAPES` seeded shapes (the alternatives and every rank's log-probability) and puts
    its own token at its rank: a reply has hundreds of positions of ``top_k + 1`` entries, and text built once costs
    the server a join, not an object per entry.
    """
    out = ["null"] if tokens else []
    shapes = _shapes(top_k)
    for token in tokens[1:]:
        rank = 1 if rng.random() < 0.6 else min(2 + int(rng.expovariate(0.5)), _MAX_RANK)
        shape = shapes[rng.randrange(_POSITION_SHAPES)]
        own = _entry_json(token, shape.values[rank], rank)
        if token in shape.at:  # the own token is one of the shape's alternatives: another takes its place
            entries = list(shape.entries)
            r = shape.at[token]
            entries[r - 1] = _entry_json(shape.spare, shape.values[r], r)
            if rank <= len(entries):
                del entries[rank - 1]
            rest = ",".join(entries)
        else:
            rest = shape.rest[min(rank, len(shape.rest)) - 1]
        out.append("{" + own + ("," + rest if rest else "") + "}")
    return orjson.Fragment("[" + ",".join(out) + "]")


@functools.lru_cache(maxsize=1 << 16)
def _token_json(token: str) -> tuple[str, str]:
    """``token``'s id as a JSON key, and its text as a JSON string."""
    return str(token_id(token)), orjson.dumps(token).decode()


_MAX_RANK = 64
_POSITION_SHAPES = 512


@dataclass(frozen=True, slots=True)
class _Shape:
    """One position's alternatives, its own token not yet placed.

    ``entries[r - 1]``: the JSON entry at rank ``r``; ``rest[r - 1]``: the entries but rank ``r``'s, joined (the last:
    all of them, for an own token ranked below them); ``values[r]``: rank ``r``'s log-probability; ``at``: each
    alternative's rank; ``spare``: an alternative not among them.
    """

    entries: tuple[str, ...]
    rest: tuple[str, ...]
    values: tuple[float, ...]
    at: Mapping[str, int]
    spare: str


@functools.cache
def _shapes(top_k: int) -> tuple[_Shape, ...]:
    """:data:`_POSITION_SHAPES` seeded shapes for ``top_k`` (0 to 20 of the 24 alternatives)."""
    rng = random.Random(top_k)
    out = []
    for _ in range(_POSITION_SHAPES):
        values = [0.0, -rng.expovariate(1.0 / 0.5)]
        for _ in range(_MAX_RANK - 1):
            values.append(values[-1] - 0.01 - rng.expovariate(1.0))
        start = rng.randrange(len(_ALTERNATIVES))
        picked = [_ALTERNATIVES[(start + i) % len(_ALTERNATIVES)] for i in range(top_k + 1)]
        chosen, spare = picked[:top_k], picked[top_k]
        entries = tuple(_entry_json(tok, values[r], r) for r, tok in enumerate(chosen, start=1))
        rest = tuple(",".join(entries[: r - 1] + entries[r:]) for r in range(1, top_k + 2))
        out.append(_Shape(entries, rest, tuple(values), {tok: r for r, tok in enumerate(chosen, start=1)}, spare))
    return tuple(out)


def _entry_json(token: str, logprob: float, rank: int) -> str:
    """One ``"<id>": {logprob, rank, decoded_token}`` entry as JSON text."""
    key, name = _token_json(token)
    return f'"{key}":{{"logprob":{logprob!r},"rank":{rank},"decoded_token":{name}}}'
