"""The LangGraph interrupt predicate: an allowed call runs, a doubtful one waits for a person and resumes."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph", reason="LangGraph is in the `adapters` extra")

from langgraph.types import Command

from ceb import Gate
from tests.examples import load_example

ex = load_example("gate_langgraph")
pytestmark = pytest.mark.anyio


def _start(plan: list[dict[str, Any]]) -> dict[str, Any]:
    return {"task": "print a.txt", "plan": plan, "history": []}


async def test_allowed_calls_run_without_an_interrupt() -> None:
    async with Gate() as gate:
        graph = ex.build_graph(gate, "lg")
        state = await graph.ainvoke(_start(ex.PLAN[:2]), {"configurable": {"thread_id": "run-1"}})
        assert "__interrupt__" not in state
        assert [h["observation"] for h in state["history"]] == ["a.txt b.txt", "hello"]


@pytest.mark.parametrize(("approved", "steps_run"), [(True, 3), (False, 2)])
async def test_a_repeat_interrupts_for_review_and_resumes_on_the_answer(approved: bool, steps_run: int) -> None:
    async with Gate() as gate:
        graph, config = ex.build_graph(gate, "lg"), {"configurable": {"thread_id": "run-1"}}
        state = await graph.ainvoke(_start(ex.PLAN), config)
        [pending] = state["__interrupt__"]
        assert pending.value == {
            "action": 'bash {"command":"cat a.txt"}',
            "score": pytest.approx(0.3),
            "decision": "review",
        }
        assert len(state["history"]) == 2  # stopped before the tool

        state = await graph.ainvoke(Command(resume=approved), config)
        assert "__interrupt__" not in state and len(state["history"]) == steps_run
        # The interrupting node re-runs on resume; the gate, a node before it, was asked once per proposal.
        assert gate.stats("lg")["streams"]["lg"]["scored_steps"] == 3


async def test_the_script_banks_the_steps_a_person_let_run(capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[dict[str, Any]] = []
    state = await ex.main(approve=lambda c: asked.append(c) or False)
    assert [c["decision"] for c in asked] == ["review"] and len(state["history"]) == 2
    assert "steps run: 2 | pseudo-labels: (1, 1)" in capsys.readouterr().out


async def test_no_answer_on_standard_input_is_a_no(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def eof(prompt: str = "") -> str:
        raise EOFError

    monkeypatch.setattr("builtins.input", eof)  # as `python examples/gate_langgraph.py < /dev/null`
    state = await ex.main()
    assert len(state["history"]) == 2  # the repeat waiting for review did not run
    out = capsys.readouterr().out
    assert "no answer on standard input: not run" in out and "steps run: 2" in out
