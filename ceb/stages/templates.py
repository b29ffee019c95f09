"""Prompt templates: Jinja2 files per domain family, replaceable by the user.

Layout: ``prompts/<family>/{critic_system,critic_user,hindsight_system,hindsight_user}.j2``. The families
``shell``, ``sql``, ``web`` and ``mobile`` extend ``prompts/base``; a domain without a family of its own uses
``generic``. A user directory given as ``prompt_dir`` is searched first, so a file there with the same
relative path replaces ours (``my_prompts/shell/critic_user.j2``) and a new folder adds a family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jinja2

from ceb.errors import ConfigError

__all__ = ["PROMPT_KINDS", "PromptLimits", "PromptSet", "clip"]

PROMPT_KINDS = ("critic_system", "critic_user", "hindsight_system", "hindsight_user")
_PACKAGE_DIR = Path(__file__).with_name("prompts")


@dataclass(frozen=True, slots=True)
class PromptLimits:
    """Character budgets for untrusted text in prompts (keep the head and the tail, mark the cut).

    Attributes:
        state_chars: The current state ``s_t`` in the critic prompt.
        action_chars: Any action or reasoning string.
        history_observation_chars: Each earlier step's observation in the critic's history block.
        bank_state_chars: A bank record's state summary ``s'`` (also the state part of retrieval keys).
        bank_observation_chars: A bank record's observation summary ``o~'``.
        hindsight_observation_chars: Each step's observation in the hindsight prompt.
    """

    state_chars: int = 2000
    action_chars: int = 600
    history_observation_chars: int = 600
    bank_state_chars: int = 400
    bank_observation_chars: int = 300
    hindsight_observation_chars: int = 600


def clip(text: str | None, max_chars: int) -> str:
    """Shorten ``text`` to about ``max_chars`` characters, keeping its head and tail around a cut marker.

    Terminal output and SQL results carry meaning at both ends (the command's first lines, the error or
    prompt at the end), so neither end is dropped. ``None`` becomes ``""``.
    """
    if not text:
        return ""
    if len(text) <= max_chars:
        return text
    # No word characters in the marker: clipped text is also used in TF-IDF retrieval keys, and the marker
    # must not add tokens that every clipped state would share.
    marker = " [...] "
    head = max_chars * 2 // 3
    tail = max_chars - head
    return text[:head] + marker + (text[-tail:] if tail else "")


class PromptSet:
    """Loads and renders the critic and hindsight templates.

    Args:
        prompt_dir: A user directory searched before the packaged templates, or ``None``.
        limits: Character budgets applied by the ``clip`` filter.

    Raises:
        ConfigError: ``prompt_dir`` does not exist.
    """

    def __init__(self, prompt_dir: str | Path | None = None, limits: PromptLimits | None = None) -> None:
        self.limits = limits or PromptLimits()
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
        )
        self._env.filters["clip"] = clip

    def family(self, domain: str) -> str:
        """The template family used for ``domain``: its own folder when one exists, else ``generic``."""
        if any((d / domain / "critic_system.j2").is_file() for d in self._dirs):
            return domain
        return "generic"

    def render(self, domain: str, kind: str, context: Mapping[str, Any]) -> str:
        """Render template ``kind`` (one of :data:`PROMPT_KINDS`) of ``domain``'s family.

        Raises:
            ConfigError: The template is missing, malformed, or uses a variable the stage does not give.
        """
        name = f"{self.family(domain)}/{kind}.j2"
        try:
            tpl = self._env.get_template(name)
            return tpl.render(limits=asdict(self.limits), **context).strip() + "\n"
        except jinja2.TemplateError as exc:
            raise ConfigError(f"prompt template {name}: {exc}") from exc

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
