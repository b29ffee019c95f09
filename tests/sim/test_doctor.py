"""``ceb doctor``'s probe against the simulator: it speaks vLLM's extensions but is no model and has no /metrics."""

from __future__ import annotations

import pytest

from ceb.backends.probe import probe_endpoint
from ceb.config import BackendConfig
from ceb.sim import SimServer
from ceb.stages.methods import all_methods

pytestmark = pytest.mark.anyio


async def test_the_simulator_supports_every_feature_a_method_needs(sim_server: SimServer) -> None:
    report = await probe_endpoint(BackendConfig(base_url=sim_server.base_url, model=sim_server.config.model))
    outcome = {c.name: c.outcome for c in report.checks}
    for name in ("models", "chat", "structured_output", "n", "logprobs", "prompt_logprobs", "continue_final_message"):
        assert outcome[name] == "ok", name
    assert outcome["prefix_cache"] == "missing"  # no /metrics: it simulates timing, not a KV cache
    assert all(m.verdict(report.capabilities)[0] for m in all_methods())
    # What the simulator reports of its model, as vLLM does (/v1/models root, /version): ceb doctor shows it.
    assert report.served is not None
    assert (report.served.root, report.served.server_version) == (sim_server.config.model, "ceb-simulator")
