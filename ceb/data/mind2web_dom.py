"""A window of a Mind2Web page around one element (the critic's state, paper section 3.2), and the element itself.

Pages (``cleaned_html``) tag every element with ``backend_node_id``, the name candidates and predictions use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

from ceb.errors import ConfigError

__all__ = [
    "DEFAULT_DOM_CHARS",
    "ELEMENT_TEXT_CHARS",
    "MIN_DOM_CHARS",
    "Located",
    "dom_snippet",
    "element_ids",
    "locate",
]

DEFAULT_DOM_CHARS = 2000
"""Default HTML budget of a state, in characters (the critic prompt's ``state_chars``)."""

MIN_DOM_CHARS = 100
"""Smallest HTML budget, in characters."""

ELEMENT_TEXT_CHARS = 80
"""Characters of an element's text read and shown."""

_VOID_TAGS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
)


def dom_snippet(html: str, backend_node_id: str | None, max_chars: int = DEFAULT_DOM_CHARS) -> str:
    """At most ``max_chars`` of ``html`` centred on the element's start tag (paper section 3.2, ``s'``).

    Cut at tag boundaries, ``"... "`` / ``" ..."`` marking cut ends within the budget; an over-long start tag is
    cut; no element gives the page's head; a page that fits is returned whole.

    Raises:
        ConfigError: ``max_chars`` is below 100.
    """
    if max_chars < MIN_DOM_CHARS:
        raise ConfigError(f"dom_chars must be at least {MIN_DOM_CHARS}, got {max_chars}")
    if len(html) <= max_chars:
        return html
    budget = max_chars - len("... ") - len(" ...")
    located = locate(html, backend_node_id)
    if located is None:
        end = budget
        cut = html.rfind(">", 0, end)
        if cut > 0:
            end = cut + 1
        return html[:end] + " ..."
    start, tag_end = located.start, located.start + located.start_tag_len
    if tag_end - start >= budget:
        a, b = start, start + budget
    else:
        a = max(0, min(start - (budget - (tag_end - start)) // 2, len(html) - budget))
        b = a + budget
        if a > 0:
            # html[start] is "<", so a tag boundary exists between a and start.
            a = html.find("<", a, start + 1)
        if b < len(html):
            b = html.rfind(">", tag_end - 1, b) + 1
    return ("... " if a > 0 else "") + html[a:b] + (" ..." if b < len(html) else "")


@dataclass(frozen=True, slots=True)
class Located:
    """One element found in a page.

    Attributes:
        start: Character offset of its start tag's ``<``.
        start_tag_len: Its start tag's length in characters.
        attrs: In page order, a missing value as ``""``.
        text: Its text's head, white space collapsed, about :data:`ELEMENT_TEXT_CHARS` long.
    """

    start: int
    start_tag_len: int
    tag: str
    attrs: tuple[tuple[str, str], ...]
    text: str


class _Done(Exception):
    """Stops the element reader."""


class _ElementReader(HTMLParser):
    """Reads the first element of its input: tag, attributes, start-tag length, text head."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tag: str | None = None
        self.attrs: tuple[tuple[str, str], ...] = ()
        self.start_tag_len = 0
        self.depth = 0
        self.words: list[str] = []
        self.chars = 0

    def _open(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tag = tag
        self.attrs = tuple((k, v or "") for k, v in attrs)
        self.start_tag_len = len(self.get_starttag_text() or "")
        self.depth = 1

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.tag is None:
            self._open(tag, attrs)
            if tag in _VOID_TAGS:
                raise _Done
        elif tag not in _VOID_TAGS:
            self.depth += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.tag is None:
            self._open(tag, attrs)
            raise _Done

    def handle_endtag(self, tag: str) -> None:
        if self.tag is None or tag in _VOID_TAGS:
            return
        self.depth -= 1
        if self.depth <= 0:
            raise _Done

    def handle_data(self, data: str) -> None:
        if self.tag is None:
            return
        for word in data.split():
            self.words.append(word)
            self.chars += len(word) + 1
        if self.chars > ELEMENT_TEXT_CHARS:
            raise _Done


_NODE_ID = re.compile(r"""(?<![\w-])backend_node_id\s*=\s*(["']?)([^"'\s/>]+)\1""")


def element_ids(html: str) -> list[str]:
    """Every ``backend_node_id`` in ``html`` (page or snippet), once each, in order."""
    return list(dict.fromkeys(m.group(2) for m in _NODE_ID.finditer(html)))


def locate(html: str, node: str | None) -> Located | None:
    """The first element whose ``backend_node_id`` is ``node``; else ``None``."""
    if node is None:
        return None
    match = re.search(r"""backend_node_id\s*=\s*(["']?)""" + re.escape(node) + r"""\1(?=[\s/>])""", html)
    if match is None:
        return None
    start = html.rfind("<", 0, match.start())
    if start < 0:
        return None
    reader = _ElementReader()
    try:
        reader.feed(html[start:])
        reader.close()
    except _Done:
        pass
    if reader.tag is None:
        return None
    return Located(start, reader.start_tag_len, reader.tag, reader.attrs, " ".join(reader.words))
