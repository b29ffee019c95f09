"""One AMEX screen: clickable elements, boxes and points (all in screen pixels, ``touch_coord``'s frame).

:func:`render_elements` is the critic's state ``s_t`` (paper section 3.2); :func:`touched_box` finds the element
a point touches; agent points in another frame go through :func:`to_pixels` first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import orjson

from ceb.data.sources import Fail, kind
from ceb.errors import ConfigError

__all__ = [
    "DEFAULT_STATE_CHARS",
    "MIN_STATE_CHARS",
    "TAP",
    "COORDS",
    "Box",
    "Coords",
    "Element",
    "describe_action",
    "inside",
    "parse_box",
    "read_point",
    "render",
    "render_elements",
    "to_element",
    "to_pixels",
    "touched_box",
]

DEFAULT_STATE_CHARS = 2000
"""Default element-list budget in characters (the critic prompt's ``state_chars``)."""

Box = tuple[float, float, float, float]
"""``(x1, y1, x2, y2)`` in pixels, ``x1 <= x2``, ``y1 <= y2``."""

Coords = Literal["pixel", "unit", "permille"]
"""Frame of predicted points: pixels, fractions or thousandths of ``device_dim``."""
COORDS: tuple[Coords, ...] = get_args(Coords)

TAP = "TAP"
"""The action the paper scores."""

MIN_STATE_CHARS = 200
"""Smallest element-list budget, in characters."""

_LABEL_CHARS = 80
_MORE_RESERVE = 40
_SCALE: dict[str, float] = {"unit": 1.0, "permille": 1000.0}


@dataclass(frozen=True, slots=True)
class Element:
    """A clickable element: box (pixels), distinct ``xml_desc`` joined by ``" | "``, ``functionality`` (<= 80 chars)."""

    box: Box
    text: str
    functionality: str


def touched_box(point: tuple[float, float], boxes: Iterable[Box]) -> int | None:
    """Index of the smallest box (``(N, 4)``, pixels) holding ``point`` (edges in, first on a tie), or ``None``.

    Nested boxes are common (a row holds a button): the smallest is the element touched.
    """
    best: int | None = None
    best_area = math.inf
    for i, box in enumerate(boxes):
        if inside(point, box):
            area = (box[2] - box[0]) * (box[3] - box[1])
            if area < best_area:
                best, best_area = i, area
    return best


def render_elements(
    elements: Sequence[Mapping[str, Any]],
    device_dim: tuple[float, float] | None = None,
    max_chars: int = DEFAULT_STATE_CHARS,
) -> str:
    """The visible clickable element list of one screen, the state ``s_t`` (paper section 3.2).

    A header (``screen 1080x2400 px; clickable elements`` with ``device_dim``), then per element in file order
    ``[i] text="..." function="..." bbox=[x1,y1,x2,y2]`` (empty parts left out), while within ``max_chars``; a last
    line counts the elements left out.

    Raises:
        ConfigError: ``max_chars`` is below 200.
        ValueError: An element has no valid ``bbox``.
    """
    if max_chars < MIN_STATE_CHARS:
        raise ConfigError(f"state_chars must be at least {MIN_STATE_CHARS}, got {max_chars}")
    parsed: list[Element] = []
    for i, element in enumerate(elements):
        box = parse_box(element.get("bbox"))
        if box is None:
            raise ValueError(f"clickable element {i} has no valid bbox")
        parsed.append(to_element(element, box))
    return render(parsed, device_dim, max_chars)


def describe_action(
    action: str,
    touch: tuple[float, float] | None,
    lift: tuple[float, float] | None,
    type_text: str | None,
    screen: list[Element],
) -> tuple[str, str | None]:
    """``(action string, element)`` of an action in pixels; ``element`` is ``[i] text`` of the touched box."""
    element: str | None = None
    text = f"[{action}]"
    if action == "SWIPE" and touch is not None and lift is not None:
        return f"{text} {_show(touch)} -> {_show(lift)}", None
    if touch is not None and action in (TAP, "TYPE"):
        index = touched_box(touch, [e.box for e in screen])
        if index is not None:
            found = screen[index]
            element = f"[{index}] {found.text or found.functionality or '(no text)'}"
        if action == TAP:
            text += f" {_show(touch)}" + (f" on {element}" if element else "")
    if action == "TYPE":
        text += f" {orjson.dumps(type_text or '').decode()}"
    return text, element


def render(screen: list[Element], device_dim: tuple[float, float] | None, max_chars: int) -> str:
    """:func:`render_elements` of parsed elements (``max_chars`` unchecked)."""
    head = "clickable elements"
    if device_dim is not None:
        head = f"screen {_num(device_dim[0])}x{_num(device_dim[1])} px; clickable elements"
    lines = [head + (":" if screen else ": (none)")]
    size = len(lines[0])
    for i, element in enumerate(screen):
        parts = [f"[{i}]"]
        if element.text:
            parts.append(f"text={orjson.dumps(element.text).decode()}")
        if element.functionality:
            parts.append(f"function={orjson.dumps(element.functionality).decode()}")
        parts.append("bbox=[" + ",".join(_num(v) for v in element.box) + "]")
        line = " ".join(parts)
        left = len(screen) - i - 1
        budget = max_chars if left == 0 else max_chars - _MORE_RESERVE
        if size + 1 + len(line) > budget:
            lines.append(f"... {len(screen) - i} more elements not shown")
            break
        lines.append(line)
        size += 1 + len(line)
    return "\n".join(lines)


def inside(point: tuple[float, float], box: Box) -> bool:
    """Whether ``point`` lies in ``box``, edges included."""
    x, y = point
    return box[0] <= x <= box[2] and box[1] <= y <= box[3]


def read_point(value: Any, field: str, fail: Fail) -> tuple[float, float] | None:
    """A decoded ``[x, y]`` as a point (``None`` stays ``None``).

    Raises:
        DataError: From ``fail``, naming ``field``, when not 2 finite numbers.
    """
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(type(v) in (int, float) and math.isfinite(v) for v in value)
    ):
        raise fail(field, f"must be a list of 2 finite numbers [x, y], got {kind(value)}")
    return float(value[0]), float(value[1])


def parse_box(value: Any) -> Box | None:
    """A decoded ``[x1, y1, x2, y2]`` as a :data:`Box`, corners ordered; ``None`` if it is not one."""
    if not isinstance(value, list) or len(value) != 4:
        return None
    if not all(type(v) in (int, float) and math.isfinite(v) for v in value):
        return None
    x1, y1, x2, y2 = (float(v) for v in value)
    return min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)


def to_element(element: Mapping[str, Any], box: Box) -> Element:
    """The :class:`Element` of a ``clickable_elements`` object (white space collapsed, cut to 80 characters)."""
    descs = element.get("xml_desc")
    texts: list[str] = []
    for desc in descs if isinstance(descs, list) else []:
        text = " ".join(desc.split()) if isinstance(desc, str) else ""
        if text and text not in texts:
            texts.append(text)
    functionality = element.get("functionality")
    function = " ".join(functionality.split()) if isinstance(functionality, str) else ""
    return Element(box, _cut(" | ".join(texts)), _cut(function))


def to_pixels(
    point: tuple[float, float] | None, coords: Coords, device_dim: tuple[float, float] | None
) -> tuple[float, float] | None:
    """``point`` from frame ``coords`` into pixels; ``device_dim`` may be ``None`` only for ``"pixel"``."""
    if point is None or coords == "pixel":
        return point
    assert device_dim is not None  # checked by the caller
    scale = _SCALE[coords]
    return point[0] * device_dim[0] / scale, point[1] * device_dim[1] / scale


def _cut(text: str) -> str:
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 3].rstrip() + "..."


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def _show(point: tuple[float, float]) -> str:
    return f"({_num(point[0])}, {_num(point[1])})"
