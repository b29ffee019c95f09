"""The prefix-cache figures of a vLLM server's ``GET /metrics`` (Prometheus text), read with ``prometheus_client``.

Names as vLLM's V1 engine exports them (``vllm/v1/metrics/loggers.py``): the token counters
``vllm:prefix_cache_queries`` and ``vllm:prefix_cache_hits`` (``_total``, one series per engine) and
``vllm:cache_config_info``, whose labels carry ``block_size``.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["ServerMetrics", "parse_metrics"]

_QUERIES = "vllm:prefix_cache_queries"
_HITS = "vllm:prefix_cache_hits"
_CACHE_CONFIG = "vllm:cache_config_info"


@dataclass(frozen=True, slots=True)
class ServerMetrics:
    """Tokens looked up in and found in the prefix cache since start (over engines), and tokens per KV block.

    ``None`` where the page has no such figure (prefix caching off, or not vLLM).
    """

    prefix_cache_queries: float | None
    prefix_cache_hits: float | None
    block_size: int | None

    @property
    def hit_rate(self) -> float | None:
        """``hits / queries`` since the server started; ``None`` without queries."""
        if not self.prefix_cache_queries or self.prefix_cache_hits is None:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries


def parse_metrics(text: str) -> ServerMetrics:
    """Read the prefix-cache counters and block size of a ``/metrics`` page; :class:`ValueError` if not Prometheus."""
    totals: dict[str, float] = {}
    block_size: int | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (f"{_QUERIES}_total", f"{_HITS}_total"):
                name = sample.name.removesuffix("_total")
                totals[name] = totals.get(name, 0.0) + sample.value
            elif sample.name == _CACHE_CONFIG and "block_size" in sample.labels:
                raw = sample.labels["block_size"]
                block_size = int(raw) if raw.isdigit() else block_size
    return ServerMetrics(totals.get(_QUERIES), totals.get(_HITS), block_size)
