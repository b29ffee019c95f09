"""``ceb doctor``'s probe against the real vLLM server: what it reports is what vLLM really does."""

from __future__ import annotations

import pytest

from ceb.backends.probe import probe_endpoint
from ceb.config import BackendConfig
from ceb.stages.methods import all_methods
from tests.support.vllm_server import VLLMServer

pytestmark = [pytest.mark.vllm, pytest.mark.anyio, pytest.mark.timeout(900)]


async def test_doctor_on_the_real_server_finds_every_feature_the_methods_need(vllm_server: VLLMServer) -> None:
    settings = BackendConfig(
        base_url=vllm_server.base_url, model=vllm_server.model, structured_output="vllm", timeout_s=300
    )
    report = await probe_endpoint(settings)
    for check in report.checks:
        print(f"{check.name:24} {check.outcome:8} {check.seconds:6.2f}s  {check.detail}")
    outcome = {c.name: c.outcome for c in report.checks}
    # Random weights: the schema, its bounds, n, log-probs and the vLLM extensions hold because vLLM enforces
    # or implements them, not because the model behaves.
    for name in ("models", "chat", "structured_output", "schema_bounds", "n", "logprobs", "prompt_logprobs"):
        assert outcome[name] == "ok", (name, report.checks)
    assert outcome["continue_final_message"] == "ok"
    assert outcome["prefix_cache"] == "ok"  # started with --enable-prefix-caching; /metrics has the counters
    # The block size comes from vllm:cache_config_info; the CPU build's default is 128 tokens.
    assert "blocks of 128 tokens" in next(c.detail for c in report.checks if c.name == "prefix_cache")
    verdicts = {m.name: m.verdict(report.capabilities) for m in all_methods()}
    assert all(runs for runs, _ in verdicts.values()), verdicts
