"""Reading where a router sent each lane from the replicas' request logs (what tests/vllm/test_router.py relies on)."""

from __future__ import annotations

from pathlib import Path

from ceb.backends.openai import request_id
from ceb.backends.scheduling import lane_tag
from tests.support.vllm_router import replica_lanes

_PARAMS = ": params: SamplingParams(n=1, temperature=0.0), prompt_token_ids: None, lora_request: None."


def _received(rid: str) -> str:
    """vLLM 0.32's ``--enable-log-requests`` line for a chat request with ``X-Request-Id: rid``."""
    return f"(APIServer pid=1) INFO 11-27 16:37:46 [request_logger.py:65] Received request chatcmpl-{rid}{_PARAMS}\n"


def test_each_lanes_requests_are_counted_per_replica_and_lines_before_the_offset_are_not(tmp_path: Path) -> None:
    one, two = "bash-1|0|static|", "bash-2|0|static|"
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    earlier = _received(request_id("critic", two))
    a.write_text(
        earlier
        + _received(request_id("critic", one))
        + f"(APIServer pid=1) INFO [async_llm.py:578] Added request chatcmpl-{request_id('critic', one)}-b6a2.\n"
        + _received(request_id("critic", one))
        + _received(request_id("preflight"))  # no lane: not counted
    )
    b.write_text(_received(request_id("hindsight", two)) + _received(request_id("critic", one)))

    lanes = replica_lanes({"a": a, "b": b}, since={"a": len(earlier.encode())})

    assert lanes == {lane_tag(one): {"a": 2, "b": 1}, lane_tag(two): {"b": 1}}
    assert replica_lanes({"a": a})[lane_tag(two)] == {"a": 1}
