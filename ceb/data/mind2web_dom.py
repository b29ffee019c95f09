"""A window of a Mind2Web page around one element, and the element's tag, attributes and text.

Mind2Web pages (``cleaned_html``) tag every element with a ``backend_node_id`` attribute, which is how the
dataset's candidates and an agent's prediction name an element. :func:`dom_snippet` cuts the state ``s'`` the
critic sees (paper section 3.2) out of a page; :func:`locate` finds one element in it.
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
"""Default HTML budget of a step's state, in characters: the critic prompt's default ``state_chars``."""

MIN_DOM_CHARS = 100
"""Smallest HTML budget accepted, in characters."""

ELEMENT_TEXT_CHARS = 80
"""How much of an element's text is read and shown, in characters."""

_VOID_TAGS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
)


def dom_snippet(html: str, backend_node_id: str | None, max_chars: int = DEFAULT_DOM_CHARS) -> str:
    """A window of ``html`` of at most ``max_chars`` characters around one element (paper section 3.2, ``s'``).

    The window is centred on the start tag of the element whose ``backend_node_id`` attribute equals
    ``backend_node_id``, then shrunk so that it starts at a ``<`` and ends after a ``>`` (no half tags), and
    ``"... "`` / ``" ..."`` mark each end that was cut (the budget holds the markers too). A start tag longer
    than the budget is itself cut. When the element is ``None`` or not on the page, the window is the head of
    the page. A page that fits is returned whole.

    Args:
        html: The page (Mind2Web ``cleaned_html``).
        backend_node_id: The element to centre on.
        max_chars: Budget in characters, cut markers included.

    Returns:
        The snippet, at most ``max_chars`` characters long.

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


# --- locating an element in the page ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Located:
    """One element found in a page.

    Attributes:
        start: Offset of its start tag's ``<`` in the page, in characters.
        start_tag_len: Length of its start tag, in characters.
        tag: Its tag name, lower case.
        attrs: Its attributes in page order, a missing value read as ``""``.
        text: The head of its text, white space collapsed, about :data:`ELEMENT_TEXT_CHARS` long.
    """

    start: int
    start_tag_len: int
    tag: str
    attrs: tuple[tuple[str, str], ...]
    text: str


class _Done(Exception):
    """Stops the element reader once it has what it needs."""


class _ElementReader(HTMLParser):
    """Reads the first element of its input: tag, attributes, start-tag length and the head of its text."""

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
    """The ``backend_node_id`` of every element in ``html`` (a page or a :func:`dom_snippet`), once each, in order."""
    return list(dict.fromkeys(m.group(2) for m in _NODE_ID.finditer(html)))


def locate(html: str, node: str | None) -> Located | None:
    """The element of ``html`` whose ``backend_node_id`` attribute is ``node``.

    Args:
        html: The page.
        node: The ``backend_node_id`` looked for; ``None`` finds nothing.

    Returns:
        The first such element, or ``None`` when there is none or its start tag cannot be read.
    """
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
