"""What a benchmark ran on: recorded next to every result so that figures can be compared and reproduced."""

from __future__ import annotations

import os
import platform
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["machine_info"]

_PACKAGES = ("numpy", "scipy", "scikit-learn")


def _cpu_model() -> str:
    """The CPU model name from ``/proc/cpuinfo`` (Linux), else whatever :mod:`platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(packages: tuple[str, ...] = _PACKAGES) -> dict[str, Any]:
    """The machine, interpreter, ``packages``' versions and command line of this process, JSON-ready.

    Keys: ``platform``, ``cpu_model``, ``cpu_count`` (logical CPUs), ``cpus_usable`` (this process's affinity),
    ``python``, ``packages``, ``command`` (``sys.argv``) and ``timestamp`` (UTC, ISO 8601).
    """
    versions: dict[str, str] = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "python": sys.version.split()[0],
        "packages": versions,
        "command": [sys.executable, *sys.argv],
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
    }
