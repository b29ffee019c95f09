r"""Prompt templates: Jinja2 files per domain family, replaceable by the user.

Layout: ``prompts/<family>/{critic_system,critic_user,hindsight_system,hindsight_user}.j2``; ``shell``, ``sql``,
``web`` and ``mobile`` extend ``prompts/base``, other domains use ``generic``. A ``prompt_dir`` is searched first:
a file there with the same relative path replaces ours, and a new folder adds a family.

Untrusted text and its fence
----------------------------
Everything from the environment or the agent (task, states, actions, reasoning, ``op`` / ``element`` /
``value``, observations, and bank records built from them) is untrusted and may imitate our prompt (a fake
``Reply:`` line, a JSON score, a chat role header). One rule, applied by the :func:`fence` filter, keeps it in place:

- The prompt's own structure (headings, labels, notes, the reply format) only ever starts a line at column 0
  or 2, and system prompts hold no untrusted text at all (they depend on the domain family only).
- An untrusted value is rendered through ``fence`` only, after its label or indented four spaces under its
  heading; inside it every line break (CR, CRLF, VT, FF, NEL, U+2028, U+2029... all made ``\n`` first) is
  followed by :data:`DATA_INDENT`, so its closing delimiter, a line back at column 0 or 2, cannot occur in it.
- Chat-template control tokens that a server's tokenizer would turn into real role boundaries
  (``<|im_start|>``, ``<|eot_id|>``, DeepSeek's ``<｜User｜>``, Gemma's ``<start_of_turn>``) get a space after
  their ``<`` and stay plain text. Model-specific markers that are also ordinary text (``<s>`` in HTML,
  ``[INST]``) are left alone.
- Values are inserted as data and never parsed as Jinja (``{{ 7*7 }}`` in a state is shown as is).
- Each value is cut to its budget in :class:`~ceb.config.PromptConfig` (:func:`fence`), so a prompt is at most
  its template text plus, per value shown, its budget plus ``len(CLIP_MARKER)``, however large the input.

The reply is parsed by :mod:`ceb.stages.parsing`, whose rule (the first JSON object with the wanted key,
fenced code first) is what decides when a model echoes injected text.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2

from ceb.config import PromptConfig
from ceb.data.mind2web import NO_ELEMENT
from ceb.errors import ConfigError

__all__ = ["BASE_FAMILY", "CLIP_MARKER", "DATA_INDENT", "PROMPT_KINDS", "PromptSet", "clip", "fence", "target"]

PROMPT_KINDS = ("critic_system", "critic_user", "hindsight_system", "hindsight_user")
BASE_FAMILY = "base"
"""The folder a family falls back to for a prompt it does not define itself (:meth:`PromptSet.render_or_base`)."""
_PACKAGE_DIR = Path(__file__).with_name("prompts")

CLIP_MARKER = " [...] "
"""Put where :func:`clip` cut text out. No word characters: clipped text also feeds TF-IDF retrieval keys, and
the marker must not add a token that every clipped state would share."""

DATA_INDENT = "    "
"""Indentation after every line break inside untrusted text (prompt structure uses columns 0 and 2 only)."""

# Every line break str.splitlines() knows, besides "\n" itself.
_OTHER_LINE_BREAK = re.compile(r"[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
# `<|...|>` (ChatML, Llama 3, Phi, Qwen), its fullwidth-bar form (DeepSeek) and Gemma's turn markers.
_CONTROL_TOKEN = re.compile(r"<(?=[|\uff5c]|(?:start|end)_of_turn>)")


def clip(text: str | None, max_chars: int) -> str:
    """``text`` (``None``: ``""``) cut to its first 2/3 and last 1/3 of ``max_chars`` around :data:`CLIP_MARKER`.

    Terminal output and SQL results carry meaning at both ends, so neither is dropped; a cut text has
    ``max_chars + 7`` characters.
    """
    if not text:
        return ""
    if len(text) <= max_chars:
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    return text[:head] + CLIP_MARKER + (text[-tail:] if tail else "")


_FENCE_CACHED_CHARS = 8192
"""Texts up to this long are fenced once (a step's prompt fences each earlier step of its trajectory again): the
cache of 4,096 holds at most about 32 MB of inputs."""


def fence(text: str | None, max_chars: int) -> str:
    r"""Make untrusted ``text`` safe to place in a prompt after a label (the rule in the module docstring).

    Neutralises chat control tokens, indents every line break by :data:`DATA_INDENT`, drops trailing ones, and
    clips to at most ``max_chars + len(CLIP_MARKER)`` characters, indentation included; text already that short
    is kept whole, so a bank record clipped earlier is not cut twice.
    """
    if not text:
        return ""
    if len(text) <= _FENCE_CACHED_CHARS:
        return _fenced(text, max_chars)
    return _fence(text, max_chars)


def _fence(text: str, max_chars: int) -> str:
    """:func:`fence` of a non-empty text."""
    text = _CONTROL_TOKEN.sub("< ", text)
    text = text.replace("\r\n", "\n")
    if _OTHER_LINE_BREAK.search(text):  # rare; a search that finds nothing is much faster than a sub
        text = _OTHER_LINE_BREAK.sub("\n", text)
    text = text.rstrip("\n").replace("\n", "\n" + DATA_INDENT)
    if len(text) <= max_chars + len(CLIP_MARKER):
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    start = text[:head]
    # A cut inside the indentation after a line break would leave a line at column 0 to 3: end the head at
    # that line break instead, so the marker joins the line before it.
    newline = start.rfind("\n")
    if newline != -1 and newline >= head - len(DATA_INDENT):
        start = start[:newline]
    return start + CLIP_MARKER + (text[-tail:] if tail else "")


_fenced = functools.lru_cache(maxsize=4096, typed=True)(_fence)  # fence of texts up to _FENCE_CACHED_CHARS


def target(action: str, op: str | None, element: str | None, value: str | None) -> str:
    """The appendix's ``{element}`` of a web or mobile step: what its operation acts on, without the operation.

    The action text without its ``[op]`` prefix and the value the prompt shows on its own (`` -> bread``,
    ``"bread"``), which keeps what the element alone would lose (an AMEX tap's point); else ``element``, else
    :data:`NO_ELEMENT`. An action not written as ``[op] ...`` gives ``element``, else the whole action.
    """
    head = f"[{op}]" if op else ""
    if not head or action[: len(head)].upper() != head.upper():
        return element or action
    rest = action[len(head) :].strip()
    if value:
        for shown in (f"-> {value}", json.dumps(value, ensure_ascii=False)):
            if rest.endswith(shown):
                rest = rest[: -len(shown)].rstrip()
                break
    return rest or element or NO_ELEMENT


class PromptSet:
    """Loads and renders the critic and hindsight templates.

    ``prompt_dir`` is searched before the packaged templates; ``limits`` reach the templates as ``limits``.

    Raises:
        ConfigError: ``prompt_dir`` does not exist.
    """

    def __init__(self, prompt_dir: str | Path | None = None, limits: PromptConfig | None = None) -> None:
        self.limits = limits or PromptConfig()
        self._budgets = self.limits.model_dump(exclude={"prompt_dir"})  # rendered into every prompt
        self._dirs: list[Path] = []
        if prompt_dir is not None:
            p = Path(prompt_dir)
            if not p.is_dir():
                raise ConfigError(f"prompt directory {p} does not exist")
            self._dirs.append(p)
        self._dirs.append(_PACKAGE_DIR)
        loaders = [jinja2.FileSystemLoader(str(d)) for d in self._dirs]
        self._env = jinja2.Environment(
            loader=jinja2.ChoiceLoader(loaders),
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            keep_trailing_newline=False,
            auto_reload=False,  # a run renders one prompt set: no file is looked at again once loaded
        )
        self._families: dict[str, str] = {}
        self._missing: set[str] = set()  # family templates looked for and not found, asked of base at once
        self._env.filters["clip"] = clip
        self._env.filters["fence"] = fence
        self._env.filters["target"] = target

    def family(self, domain: str) -> str:
        """The template family used for ``domain``: its own folder when one exists, else ``generic``."""
        if domain not in self._families:
            found = any((d / domain / "critic_system.j2").is_file() for d in self._dirs)
            self._families[domain] = domain if found else "generic"
        return self._families[domain]

    def render(self, domain: str, kind: str, context: Mapping[str, Any]) -> str:
        """Render template ``kind`` (one of :data:`PROMPT_KINDS`) of ``domain``'s family.

        Raises:
            ConfigError: The template is missing, malformed, or uses a variable the stage does not give.
        """
        name = f"{self.family(domain)}/{kind}.j2"
        try:
            tpl = self._env.get_template(name)
            return tpl.render(limits=self._budgets, **context).strip() + "\n"
        except jinja2.TemplateError as exc:
            raise ConfigError(f"prompt template {name}: {exc}") from exc

    def render_or_base(self, domain: str, kind: str, context: Mapping[str, Any]) -> str:
        """Render template ``kind`` of ``domain``'s family, or of ``base`` when the family has no such file.

        The baselines', judge's and actor's prompts live in ``prompts/base``.

        Raises:
            ConfigError: The template is malformed or uses a variable the caller does not give.
        """
        name = f"{self.family(domain)}/{kind}.j2"
        if name not in self._missing:
            try:
                return self.render(domain, kind, context)
            except ConfigError as exc:
                cause = exc.__cause__
                if not (isinstance(cause, jinja2.TemplateNotFound) and cause.name == name):
                    raise
                self._missing.add(name)
        # `base` holds critic_system.j2, so it counts as a family of its own and is looked up in base/ (a user
        # directory's base/ first).
        return self.render(BASE_FAMILY, kind, context)

    def messages(self, domain: str, stage: str, context: Mapping[str, Any]) -> tuple[dict[str, str], ...]:
        """``(system, user)`` chat messages of ``stage`` (``critic`` or ``hindsight``) for ``domain``."""
        return (
            {"role": "system", "content": self.render(domain, f"{stage}_system", context)},
            {"role": "user", "content": self.render(domain, f"{stage}_user", context)},
        )

    def families(self) -> Sequence[str]:
        """Every family with a complete set of templates, in the user directory or ours."""
        found = set()
        for d in self._dirs:
            for sub in d.iterdir():
                if sub.is_dir() and all((sub / f"{k}.j2").is_file() for k in PROMPT_KINDS):
                    found.add(sub.name)
        return sorted(found)
