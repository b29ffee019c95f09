"""ceb as a tool-input guardrail of the OpenAI Agents SDK: every tool call is scored before it runs.

Run ``python examples/gate_openai_agents.py`` (``pip install -e '.[adapters]'``): no key, no network, as the SDK's
``ScriptedModel`` stands in for the LLM; it calls ``bash`` three times, the third a repeat, which ceb rejects.
For a real model call ``main("gpt-5-mini")`` with ``OPENAI_API_KEY`` set. ``allow`` runs the tool; ``review``
rejects the call with a message the model reads (it can replan); ``block`` raises
``ToolInputGuardrailTripwireTriggered``, halting the run. The output guardrail records each call that ran, so
the finished run is a trajectory for :meth:`ceb.Gate.finish`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
from agents import (
    Agent,
    Model,
    RunConfig,
    Runner,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    ToolOutputGuardrailData,
    function_tool,
    tool_input_guardrail,
    tool_output_guardrail,
)
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext

from ceb import Gate, Step, StepContext, Trajectory
from ceb.data.chat import tool_action


@dataclass
class GatedRun:
    """The run context the guardrails read (``Runner.run(..., context=run)``): the gate and the steps so far."""

    gate: Gate
    stream: str
    trajectory_id: str
    task: str
    domain: str = "shell"
    history: list[Step] = field(default_factory=list)

    def trajectory(self) -> Trajectory:
        """The steps that ran, for :meth:`ceb.Gate.finish`."""
        return Trajectory(self.trajectory_id, self.task, self.domain, tuple(self.history))


def _action(ctx: ToolContext[Any]) -> str:
    # What `ceb serve` makes of a tool call, so a repeat is one however the model spelled the JSON.
    return tool_action({"name": ctx.tool_name, "arguments": ctx.tool_arguments}, "tool_call")


@tool_input_guardrail
async def ceb_gate(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
    """Score the proposed call: allow it, reject it (``review``: the model replans) or halt the run (``block``)."""
    run: GatedRun = data.context.context
    step = StepContext(run.trajectory_id, run.task, run.domain, Step("", _action(data.context), ""), tuple(run.history))
    c = await run.gate.score(run.stream, step)
    info = {"score": c.score, "decision": c.decision, "repetition_flag": c.repetition_flag}
    if c.decision == "allow":
        return ToolGuardrailFunctionOutput.allow(info)
    if c.decision == "review":
        shown = "none" if c.score is None else f"{c.score:.2f}"
        return ToolGuardrailFunctionOutput.reject_content(f"ceb: looks unproductive ({shown}); try another way", info)
    return ToolGuardrailFunctionOutput.raise_exception(info)


@tool_output_guardrail
def ceb_record(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
    """Record the call that ran, with its output as the observation."""
    data.context.context.history.append(Step("", _action(data.context), str(data.output)))
    return ToolGuardrailFunctionOutput.allow()


@function_tool(tool_input_guardrails=[ceb_gate], tool_output_guardrails=[ceb_record])
def bash(command: str) -> str:
    """Run a shell command (a stand-in with two files)."""
    return {"ls": "a.txt b.txt", "cat a.txt": "hello"}.get(command, f"bash: {command}: command not found")


SCRIPT = [  # the model's turns: ls, cat a.txt, cat a.txt again, the answer
    [function_call("bash", {"command": "ls"}, call_id="c1")],
    [function_call("bash", {"command": "cat a.txt"}, call_id="c2")],
    [function_call("bash", {"command": "cat a.txt"}, call_id="c3")],
    [assistant_message("a.txt says hello")],
]


async def main(model: str | Model | None = None) -> None:
    """Run one task through an agent whose tool is gated (offline ceb backend), then bank the run."""
    async with Gate() as gate:
        run = GatedRun(gate, stream="agents-sdk", trajectory_id="run-1", task="print a.txt")
        agent = Agent(name="shell", instructions="Use bash.", tools=[bash], model=model or ScriptedModel(SCRIPT))
        result = await Runner.run(agent, run.task, context=run, run_config=RunConfig(tracing_disabled=True))
        for r in result.tool_input_guardrail_results:
            print(r.output.behavior["type"], r.output.output_info)
        banked = await gate.finish(run.stream, run.trajectory())
        print("answer:", result.final_output, "| pseudo-labels:", banked.pseudo_labels)


if __name__ == "__main__":
    anyio.run(main)
