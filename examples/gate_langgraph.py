r"""ceb as an interrupt predicate in LangGraph: a tool call that ceb does not ``allow`` waits for a person.

Run ``python examples/gate_langgraph.py`` (needs ``pip install -e '.[adapters]'``; no key, no network: ceb's
offline backend, and a scripted plan in place of the LLM node). The graph::

    START -> propose -> gate --allow--> tool -> propose ... -> END
                             \-review/block-> review --approved--> tool
                                                     \-rejected--> propose

``gate`` scores the proposed call; the conditional edge after it is the predicate. ``review`` calls
``langgraph.types.interrupt`` with the confidence: the run stops (``__interrupt__`` in the result) until the
caller resumes it with ``Command(resume=True)`` (run the call) or ``Command(resume=False)`` (skip it). Interrupts
need a checkpointer; the run's thread id is its trajectory id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

import anyio
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

from ceb import Gate, Step, StepContext, Trajectory
from ceb.data.chat import tool_action

FILES = {"ls": "a.txt b.txt", "cat a.txt": "hello"}


class State(TypedDict, total=False):
    """The graph's state: the task, the calls still planned, the one proposed, its confidence, the steps run."""

    task: str
    plan: list[dict[str, Any]]
    proposed: dict[str, Any] | None
    confidence: dict[str, Any]
    history: list[dict[str, str]]


def build_graph(gate: Gate, stream: str) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The agent loop with ceb between the proposal and the tool."""

    def propose(state: State) -> State:  # an LLM node in a real agent
        plan = state["plan"]
        return {"proposed": plan[0] if plan else None, "plan": plan[1:]}

    async def score(state: State, config: RunnableConfig) -> State:
        steps = tuple(Step("", h["action"], h["observation"]) for h in state.get("history", []))
        proposal = Step("", tool_action(state["proposed"], "action"), "")
        context = StepContext(config["configurable"]["thread_id"], state["task"], "shell", proposal, steps)
        c = await gate.score(stream, context)
        return {"confidence": {"action": proposal.action, "score": c.score, "decision": c.decision}}

    def review(state: State) -> Command[str]:
        approved = interrupt(state["confidence"])  # re-runs on resume; scoring stays in `gate`, run once
        return Command(goto="tool" if approved else "propose")

    def tool(state: State) -> State:
        call, action = state["proposed"] or {}, state["confidence"]["action"]
        observation = FILES.get(call["arguments"]["command"], "bash: command not found")
        return {"history": [*state.get("history", []), {"action": action, "observation": observation}]}

    g = StateGraph(State)
    g.add_node("propose", propose)
    g.add_node("gate", score)
    g.add_node("review", review, destinations=("tool", "propose"))
    g.add_node("tool", tool)
    g.add_edge(START, "propose")
    g.add_conditional_edges("propose", lambda s: "gate" if s["proposed"] else END, ["gate", END])
    g.add_conditional_edges("gate", lambda s: "tool" if s["confidence"]["decision"] == "allow" else "review")
    g.add_edge("tool", "propose")
    return g.compile(checkpointer=InMemorySaver())


PLAN: list[dict[str, Any]] = [{"name": "bash", "arguments": {"command": c}} for c in ("ls", "cat a.txt", "cat a.txt")]


def _ask_terminal(confidence: dict[str, Any]) -> bool:
    """Ask a person at the terminal; no answer (no terminal, end of input) is a no: the call does not run."""
    try:
        return input(f"ceb: {confidence}; run it? [y/N] ").strip().lower() == "y"
    except EOFError:
        print("\nno answer on standard input: not run")
        return False


async def main(approve: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """Run the plan, asking ``approve`` (default: the terminal) at each interrupt; bank the run; the final state."""
    ask = approve or _ask_terminal
    async with Gate() as gate:
        graph, config = build_graph(gate, "langgraph"), RunnableConfig(configurable={"thread_id": "run-1"})
        state: dict[str, Any] = await graph.ainvoke({"task": "print a.txt", "plan": PLAN, "history": []}, config)
        while "__interrupt__" in state:
            state = await graph.ainvoke(Command(resume=ask(state["__interrupt__"][0].value)), config)
        steps = tuple(Step("", h["action"], h["observation"]) for h in state["history"])
        banked = await gate.finish("langgraph", Trajectory("run-1", state["task"], "shell", steps))
        print("steps run:", len(steps), "| pseudo-labels:", banked.pseudo_labels)
        return state


if __name__ == "__main__":
    anyio.run(main)
