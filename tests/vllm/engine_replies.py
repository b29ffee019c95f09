"""The in-process engine, started once, for tests/vllm/test_engine.py: run with ``.venv-vllm``'s Python.

``python -m tests.vllm.engine_replies CONFIG STREAM RUN_DIR`` (from the repository root) builds the stages of the
run configuration in ``CONFIG`` (backend ``vllm``, the tests' server flags as ``backend.engine``) as
``ceb score`` does, sends :data:`REQUESTS` to its engine and prints them as one JSON line ``REPLIES [...]``
(``dataclasses.asdict``), then scores the first trajectory of ``STREAM`` into ``RUN_DIR`` on the same
engine. One engine start serves both checks (it takes a minute or more on 2 CPU cores).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import anyio

from ceb.backends.base import ChatRequest, Completion

SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}},
    "required": ["score"],
    "additionalProperties": False,
}
_M = ({"role": "system", "content": "You judge shell commands."}, {"role": "user", "content": "ls -la /tmp"})
REQUESTS = (
    ChatRequest(messages=_M, max_tokens=12, json_schema=SCHEMA),
    ChatRequest(messages=_M, max_tokens=4, logprobs=True, top_logprobs=3, extra={"prompt_logprobs": 2}),
    ChatRequest(
        messages=(*_M, {"role": "assistant", "content": "Confidence:"}),
        max_tokens=3,
        extra={"continue_final_message": True, "add_generation_prompt": False, "prompt_logprobs": 1},
    ),
)
"""Greedy requests (so both sides must agree token for token): a schema, log-probs, a continued message."""


def as_json(completions: list[Completion]) -> str:
    """The completions as one JSON list (tuples become lists; ``prompt_logprobs``, read lazily, is read whole)."""
    whole = [
        c if c.prompt_logprobs is None else dataclasses.replace(c, prompt_logprobs=tuple(c.prompt_logprobs))
        for c in completions
    ]
    return json.dumps([dataclasses.asdict(c) for c in whole])


async def _main(config_path: str, stream: str, run_dir: str) -> None:
    from ceb.config import load_config
    from ceb.data import read_stream
    from ceb.pipeline import run_scoring
    from ceb.stages.assembly import build_stages

    config = load_config(config_path)
    stages = build_stages(config)
    assert stages.chat is not None
    async with stages:
        completions = [(await stages.chat.complete(r)).completion for r in REQUESTS]
        print("REPLIES " + as_json(completions), flush=True)
        await run_scoring({Path(stream).stem: read_stream([Path(stream)])}, config, run_dir, stages=stages)


if __name__ == "__main__":
    anyio.run(_main, *sys.argv[1:4])
