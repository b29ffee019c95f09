"""A SIMULATED OpenAI-compatible server modelling a vLLM server under load, for benchmarks and tests. Not a model.

Replies are seeded stand-ins with the right shapes (:mod:`~ceb.sim.replies`), requests queue as in vLLM's scheduler
(:mod:`~ceb.sim.server`), faults come on a reproducible schedule (:mod:`~ceb.sim.faults`), and a toy tokenizer counts
tokens (:mod:`~ceb.sim.tokenizer`). Never a default for scoring. ``async with serve_sim(SimConfig(max_num_seqs=8)) as
server:`` serves at ``server.base_url``.
"""

from typing import TYPE_CHECKING

from ceb.registry import lazy_exports

if TYPE_CHECKING:
    from ceb.sim.faults import FAULT_KINDS, Fault, FaultKind, FaultSchedule
    from ceb.sim.replies import Replier, ReplyKind, ReplyPlan, classify, default_replier
    from ceb.sim.server import SIMULATOR_HEADER, SimServer, SimStats, run_sim_server, serve_sim
    from ceb.sim.settings import SIMULATOR_ID, SimConfig
    from ceb.sim.tokenizer import chat_tokens, count_tokens, render_chat, tokenize

__all__ = [
    "FAULT_KINDS",
    "SIMULATOR_HEADER",
    "SIMULATOR_ID",
    "Fault",
    "FaultKind",
    "FaultSchedule",
    "Replier",
    "ReplyKind",
    "ReplyPlan",
    "SimConfig",
    "SimServer",
    "SimStats",
    "chat_tokens",
    "classify",
    "count_tokens",
    "default_replier",
    "render_chat",
    "run_sim_server",
    "serve_sim",
    "tokenize",
]

# Loaded on first use (PEP 562): `ceb sim-server --help` reads SimConfig without paying for aiohttp.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(("FAULT_KINDS", "Fault", "FaultKind", "FaultSchedule"), "ceb.sim.faults"),
        **dict.fromkeys(("Replier", "ReplyKind", "ReplyPlan", "classify", "default_replier"), "ceb.sim.replies"),
        **dict.fromkeys(("SIMULATOR_HEADER", "SimServer", "SimStats", "run_sim_server", "serve_sim"), "ceb.sim.server"),
        **dict.fromkeys(("SIMULATOR_ID", "SimConfig"), "ceb.sim.settings"),
        **dict.fromkeys(("chat_tokens", "count_tokens", "render_chat", "tokenize"), "ceb.sim.tokenizer"),
    },
    __all__,
)
