"""The live gate over HTTP (``ceb serve``): scores before actions, finished trajectories after them.

:mod:`ceb.serve.app` (the aiohttp application), :mod:`ceb.serve.payloads` (request bodies),
:mod:`ceb.serve.openapi`; the gate itself is :mod:`ceb.gate`. The names below load on first use (PEP 562).
"""

from typing import TYPE_CHECKING

from ceb.registry import lazy_exports

if TYPE_CHECKING:
    from ceb.serve.app import check_bind, make_app, run_server

__all__ = ["check_bind", "make_app", "run_server"]


__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "ceb.serve.app"), __all__)
