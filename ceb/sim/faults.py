"""The simulator's fault schedule: which arriving request fails, and how.

Request ``k`` (the arrival number since start or reset) gets two numbers in [0, 1) from ``BLAKE2b(seed, k)``: ``u``
picks the fault, its rates laid end to end in the order of :data:`FAULT_KINDS` (none past their sum), and ``v`` the
variant. So at most one fault hits a request, the schedule depends on the seed alone, and since replies depend only on
the request (:mod:`ceb.sim.replies`) a successful retry gets the answer the failed attempt would have had.

Variants (``v`` < 1/2, else): ``stall`` answers after the stall, else closes the connection; ``wrong_label_count`` gives
one label too many, else one too few (too many for zero steps); ``bad_score`` (thirds of ``v``) a score in [1.001, 2],
in [-1, -0.001], or a bare ``NaN``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal, get_args

from ceb.sim.settings import FAULT_RATE_FIELDS, SimConfig

__all__ = ["FAULT_KINDS", "Fault", "FaultKind", "FaultSchedule", "bad_score_text", "cut_in_half", "wrong_count"]

FaultKind = Literal[
    "http_429", "http_500", "stall", "malformed_body", "malformed_content", "wrong_label_count", "bad_score"
]
"""What an injected fault does; the keys of ``SimStats.faults``."""

FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
"""Every fault kind, in the order of :data:`~ceb.sim.settings.FAULT_RATE_FIELDS`."""

_TWO_64 = float(2**64)


@dataclass(frozen=True, slots=True)
class Fault:
    """The fault drawn for one request: its ``kind``, and ``variant`` in [0, 1) choosing among its variants."""

    kind: FaultKind
    variant: float


class FaultSchedule:
    """Draws the fault, if any, of the request with a given arrival number, from ``config``'s seed and rates."""

    def __init__(self, config: SimConfig) -> None:
        self._seed = str(config.seed).encode()
        rates = config.fault_rates()
        bounds: list[tuple[float, FaultKind]] = []
        top = 0.0
        for name, kind in zip(FAULT_RATE_FIELDS, FAULT_KINDS, strict=True):
            if rates[name] > 0:
                top += rates[name]
                bounds.append((top, kind))
        self._bounds = tuple(bounds)

    @property
    def active(self) -> bool:
        """Whether any fault rate is above zero."""
        return bool(self._bounds)

    def draw(self, arrival: int) -> Fault | None:
        """The fault of the ``arrival``-th request (0-based), or ``None``."""
        if not self._bounds:
            return None
        digest = hashlib.blake2b(b"fault|" + self._seed + b"|" + str(arrival).encode(), digest_size=16).digest()
        u = int.from_bytes(digest[:8], "little") / _TWO_64
        for top, kind in self._bounds:
            if u < top:
                return Fault(kind, int.from_bytes(digest[8:], "little") / _TWO_64)
        return None


def cut_in_half(data: str) -> str:
    """The first half of ``data``: a JSON text cut so it cannot parse."""
    return data[: len(data) // 2]


def wrong_count(n_labels: int, variant: float) -> int:
    """``n_labels`` one off: one more when ``variant < 0.5`` or ``n_labels == 0``, else one fewer."""
    return n_labels + 1 if variant < 0.5 or n_labels == 0 else n_labels - 1


def bad_score_text(variant: float) -> str:
    """The JSON text of a critic score outside [0, 1] derived from ``variant``: above 1, below 0, or a bare ``NaN``."""
    third = variant * 3.0
    if third < 1.0:
        return repr(round(1.001 + 0.999 * third, 3))  # [1.001, 2]
    if third < 2.0:
        return repr(round(-0.001 - 0.999 * (third - 1.0), 3))  # [-1, -0.001]
    return "NaN"
