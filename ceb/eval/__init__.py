"""Evaluation of step confidences against held-out labels: ECE, Brier and AUROC (paper section 4.1)."""

from ceb.eval.metrics import (
    MetricSummary,
    ReliabilityBins,
    Strategy,
    auroc,
    brier,
    ece,
    reliability_bins,
    summarize,
)
from ceb.eval.runs import BASE_RATE, POOLED, POOLING, run_metrics, write_metrics

__all__ = [
    "BASE_RATE",
    "POOLED",
    "POOLING",
    "MetricSummary",
    "ReliabilityBins",
    "Strategy",
    "auroc",
    "brier",
    "ece",
    "reliability_bins",
    "run_metrics",
    "summarize",
    "write_metrics",
]
