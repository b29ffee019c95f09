"""Reusable benchmark code: the measurements live here, the thin scripts that run them in ``benchmarks/``."""

from ceb.bench.machine import machine_info

__all__ = ["machine_info"]
