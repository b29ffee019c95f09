"""Sharding a run: ``--shard i/N`` runs the lanes whose stable hash falls to shard ``i`` of ``N``.

A lane is assigned by BLAKE2b of its lane id (:func:`lane_id`, the string its requests carry as their session
and that picks their home replica, :mod:`ceb.backends.scheduling`), never Python's salted ``hash``: every process,
on every machine, puts a lane in the same shard, so a shard is reproducible and its resume finds its own lanes.
Lanes are independent (a lane's bank is its own), so the union of the shards' rows is what one unsharded run
writes; ``ceb merge`` joins the parts (:mod:`ceb.pipeline.merge`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ceb.errors import ConfigError
from ceb.pipeline.rundir import LaneKey

__all__ = ["MAX_SHARDS", "Shard", "lane_id", "shard_of"]

MAX_SHARDS = 1_000_000
"""The largest shard count N (recorded in ``config.json`` as a 64-bit JSON integer)."""

# ASCII digits only: ``\d`` would take a full-width or Arabic-Indic digit, which no scheduler writes.
_SPEC = re.compile(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", re.ASCII)


def lane_id(key: LaneKey) -> str:
    """A lane's id as its requests carry it: ``stream|order|method|critic``."""
    stream, order, method, critic = key
    return f"{stream}|{order}|{method}|{critic}"


def shard_of(key: LaneKey, count: int) -> int:
    """The shard (``0 <= i < count``) lane ``key`` belongs to: BLAKE2b of :func:`lane_id` modulo ``count``."""
    digest = hashlib.blake2b(lane_id(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard ``index`` (``0 <= index < count``) of ``count``: the lanes :func:`shard_of` puts there."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ConfigError(f"shard {self.index}/{self.count}: needs 0 <= i < N (e.g. 0/3, 1/3, 2/3)")
        if self.count > MAX_SHARDS:
            raise ConfigError(f"shard {self.index}/{self.count}: N is at most {MAX_SHARDS:,}")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @classmethod
    def parse(cls, text: str) -> Shard:
        """A shard from ``"i/N"`` (``$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT``, say).

        Raises:
            ConfigError: Not two whole numbers ``i/N`` (ASCII digits) with ``0 <= i < N <=`` :data:`MAX_SHARDS`.
        """
        m = _SPEC.fullmatch(text)
        if m is None:
            raise ConfigError(f"shard {text!r}: give i/N, two whole numbers with 0 <= i < N (e.g. 0/3)")
        return cls(int(m.group(1)), int(m.group(2)))

    @classmethod
    def from_record(cls, doc: Mapping[str, Any] | None) -> Shard | None:
        """The shard recorded in ``config.json`` (``{"index": i, "count": N}``), ``None`` for an unsharded run.

        Raises:
            ConfigError: The record is not a valid shard.
        """
        if doc is None:
            return None
        try:
            return cls(int(doc["index"]), int(doc["count"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"recorded shard {doc!r} is not {{index, count}}") from exc

    def to_record(self) -> dict[str, int]:
        """The form :meth:`from_record` reads."""
        return {"index": self.index, "count": self.count}

    def keeps(self, key: LaneKey) -> bool:
        """Whether lane ``key`` is this shard's."""
        return shard_of(key, self.count) == self.index
