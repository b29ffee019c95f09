r"""The simulator's toy tokenizer and flat chat rendering: one definition for ``usage``, log-probs and ``/tokenize``.

Not a real tokenizer. A token is a run of non-space characters with the white space before it (``\s*\S+``), plus one for
trailing white space: ``"ls -la  /tmp\n"`` is ``["ls", " -la", "  /tmp", "\n"]``, and the tokens join back to the text.
Counting needs no regex. The critic prompt comes to about 6 characters per toy token against about 4 for BPE: divide a
real server's prefill tokens/s by about 1.5 for ``prefill_tok_s``.

A chat renders each message as ``"<|role|>\n" + content + "\n"`` (the header and the closing newline one token each, the
content tokenized alone), then ``"<|assistant|>\n"`` with ``add_generation_prompt``; ``continue_final_message`` drops
the last closing newline. Only text parts of list content count. Role headers of ``system``, ``user``, ``assistant``,
``tool`` and ``developer`` have ids 1 to 5; other tokens a BLAKE2b hash in ``[1000, 2**31)``.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "ROLE_IDS",
    "chat_tokens",
    "count_chat_tokens",
    "count_tokens",
    "header",
    "message_text",
    "render_chat",
    "token_id",
    "tokenize",
]

_TOKEN = re.compile(r"\s*\S+|\s+")

ROLE_IDS: dict[str, int] = {"system": 1, "user": 2, "assistant": 3, "tool": 4, "developer": 5}

_FIRST_HASHED_ID = 1000
_ID_SPAN = 2**31 - _FIRST_HASHED_ID


def tokenize(text: str) -> list[str]:
    """Split ``text`` into toy tokens, shape ``(count_tokens(text),)``; they join back to ``text``."""
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    """``len(tokenize(text))`` without the regex."""
    if not text:
        return 0
    return len(text.split()) + (1 if text[-1].isspace() else 0)


def header(role: str) -> str:
    """The header token of a ``role`` message: ``<|role|>`` and a newline."""
    return f"<|{role}|>\n"


@functools.lru_cache(maxsize=65536)
def token_id(token: str) -> int:
    """The id of ``token``: fixed for known role headers, else a stable 31-bit hash."""
    if token.startswith("<|") and token.endswith("|>\n"):
        special = ROLE_IDS.get(token[2:-3])
        if special is not None:
            return special
    digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
    return _FIRST_HASHED_ID + int.from_bytes(digest, "little") % _ID_SPAN


def message_text(content: Any) -> str:
    """The text of a message's ``content``: a string, the text parts of a list, or ``""``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def _segments(
    messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool, continue_final_message: bool
) -> Iterable[tuple[str, bool]]:
    """``(text, is_single_token)`` pieces of the rendered chat."""
    last = len(messages) - 1
    for i, m in enumerate(messages):
        yield header(str(m.get("role", ""))), True
        yield message_text(m.get("content")), False
        if not (continue_final_message and i == last):
            yield "\n", True
    if add_generation_prompt and not continue_final_message:
        yield header("assistant"), True


def render_chat(
    messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True, continue_final_message: bool = False
) -> str:
    """The flat prompt text of a chat (module docstring)."""
    return "".join(text for text, _ in _segments(messages, add_generation_prompt, continue_final_message))


def chat_tokens(
    messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True, continue_final_message: bool = False
) -> list[str]:
    """The toy tokens of :func:`render_chat`'s text."""
    out: list[str] = []
    for text, single in _segments(messages, add_generation_prompt, continue_final_message):
        if single:
            out.append(text)
        else:
            out.extend(_TOKEN.findall(text))
    return out


def count_chat_tokens(
    messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True, continue_final_message: bool = False
) -> int:
    """``len(chat_tokens(...))`` without the regex: ``usage.prompt_tokens``."""
    n = 0
    for text, single in _segments(messages, add_generation_prompt, continue_final_message):
        n += 1 if single else count_tokens(text)
    return n
