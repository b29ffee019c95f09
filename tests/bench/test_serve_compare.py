"""The head-to-head with ``vllm bench serve``: the dumped dataset and vLLM's metric formulas."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from ceb.bench.serve_compare import RequestOutcome, dump_critic_prompts, joined_prompt, metrics
from ceb.data.trajectory import Step, Trajectory

pytestmark = pytest.mark.anyio


def test_metrics_follow_vllms_definitions() -> None:
    a = RequestOutcome(True, ttft=0.1, itl=(0.02, 0.03), latency=0.15, prompt_len=10, output_tokens=3)
    b = RequestOutcome(True, ttft=0.3, itl=(0.05,), latency=0.35, prompt_len=20, output_tokens=2)
    failed = RequestOutcome(False, 0.0, (), 0.0, 0, 0, "boom")
    m = metrics([a, b, failed], duration_s=2.0)
    assert (m.completed, m.failed) == (2, 1)
    assert m.request_throughput == pytest.approx(1.0)
    assert m.output_throughput == pytest.approx(2.5)
    assert m.total_token_throughput == pytest.approx(17.5)
    assert m.mean_ttft_ms == pytest.approx(200) and m.median_e2el_ms == pytest.approx(250)
    # TPOT = (e2el - ttft) / (output_tokens - 1): 25 ms and 50 ms
    assert m.mean_tpot_ms == pytest.approx(37.5)
    assert m.mean_itl_ms == pytest.approx(100 / 3)


async def test_the_dataset_holds_each_critic_prompt_as_one_string(tmp_path: Path) -> None:
    trajectories = [
        Trajectory(
            id=f"t{i}",
            task="count the files",
            domain="shell",
            steps=(
                Step(state="", action="ls", observation="a b"),
                Step(state="a b", action="ls | wc -l", observation="2"),
            ),
        )
        for i in range(2)
    ]
    path = tmp_path / "d.jsonl"
    prompts = await dump_critic_prompts({"s": trajectories}, path, 16, tmp_path)
    lines = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    assert len(prompts) == len(lines) == 4  # one critic call per step
    assert [x["prompt"] for x in lines] == prompts and {x["output_tokens"] for x in lines} == {16}
    # the step pool asks both trajectories at once: which prompt comes second depends on timing
    assert sum("ls | wc -l" in p for p in prompts) == 2 and all("count the files" in p for p in prompts)
    assert joined_prompt([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]) == "S\n\nU"
