"""The live gate over HTTP (``ceb serve``): scores before actions, finished trajectories after them.

:mod:`ceb.serve.app` is the aiohttp application, :mod:`ceb.serve.payloads` checks request bodies by the
reader's hostile-input rules, :mod:`ceb.serve.openapi` is the OpenAPI document; the command line is
:mod:`ceb.cli.serve`. The gate itself (order, durability) is :mod:`ceb.gate`.

The names below load on first use (PEP 562): importing a submodule must not pay for aiohttp and the
bank.
"""

from typing import TYPE_CHECKING

from ceb.registry import lazy_exports

if TYPE_CHECKING:
    from ceb.serve.app import check_bind, make_app, run_server

__all__ = ["check_bind", "make_app", "run_server"]


__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "ceb.serve.app"), __all__)
