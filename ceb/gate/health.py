"""Whether a live gate's critic answers: :class:`CriticHealth`, read by ``ceb serve``'s ``GET /health``.

Degraded after ``gate.degraded_after`` consecutive failed steps, or when
:meth:`Gate.check_critic <ceb.gate.Gate.check_critic>` could not reach the endpoint; while degraded each score is
``gate.on_failure`` at once and the endpoint is probed every ``gate.probe_every_s``. A passing check or a scored
step restores it; ``not_available`` steps count neither way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

__all__ = ["CriticHealth"]

CriticStatus = Literal["ok", "degraded"]


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(slots=True)
class CriticHealth:
    """Consecutive critic failures of one gate, and whether they make it degraded (event loop only, no lock).

    Attributes:
        endpoint: The critic's endpoint, ``None`` on a backend without a model.
        since: Unix seconds of the first failure in the current run of failures.
        probe_error: Why the last endpoint check failed, until one passes or a step is scored.
    """

    endpoint: str | None
    degraded_after: int
    consecutive_failures: int = 0
    last_error: str | None = None
    since: float | None = None
    probe_error: str | None = None

    @property
    def degraded(self) -> bool:
        """A check of the endpoint failed, or ``degraded_after`` steps in a row did, with nothing passing since."""
        return self.probe_error is not None or self.consecutive_failures >= self.degraded_after

    @property
    def status(self) -> CriticStatus:
        """``degraded`` or ``ok``."""
        return "degraded" if self.degraded else "ok"

    def failed(self, error: str | None) -> None:
        """A step the critic was asked for came back without a score (endpoint down, unreadable reply)."""
        if self.since is None:
            self.since = time.time()
        self.consecutive_failures += 1
        self.last_error = error or "no score"

    def probe_failed(self, error: str) -> None:
        """A check of the endpoint could not reach the critic: degraded at once, before any step fails."""
        if self.since is None:
            self.since = time.time()
        self.probe_error = self.last_error = error

    def scored(self) -> None:
        """A step was scored, or a background check passed: the critic answers, whatever failed before."""
        self.consecutive_failures = 0
        self.last_error = self.since = self.probe_error = None

    def reason(self) -> str | None:
        """Why the gate is degraded, in one line; ``None`` when it is not."""
        if not self.degraded:
            return None
        where = f"critic endpoint {self.endpoint}" if self.endpoint else "the critic"
        if self.consecutive_failures >= self.degraded_after:
            return f"{where}: the last {self.consecutive_failures} scores failed (last_error says why)"
        return f"{where}: failed its last check, and no step scored since (last_error says why)"

    def to_json(self) -> dict[str, Any]:
        """The ``critic`` object of ``GET /health`` (fields documented in ``docs/gate.md``)."""
        return {
            "status": self.status,
            "reason": self.reason(),
            "endpoint": self.endpoint,
            "consecutive_failures": self.consecutive_failures,
            "degraded_after": self.degraded_after,
            "last_error": self.last_error,
            "since": _iso(self.since) if self.since is not None else None,
        }
