"""``ceb --help`` reads as a workflow: commands in order, whole one-line descriptions, no internal issue numbers."""

from __future__ import annotations

import re

import typer.main
from typer.testing import CliRunner

from ceb.cli import WORKFLOW, app

ROOT = typer.main.get_command(app)


def _commands(group: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path under ``group``: ``("score",)``, ``("bench", "gate")``, ..."""
    found = []
    for name in group.list_commands(None):  # type: ignore[attr-defined]
        command = group.get_command(None, name)  # type: ignore[attr-defined]
        found.append((*path, name))
        if hasattr(command, "list_commands"):
            found += _commands(command, (*path, name))
    return found


def test_top_level_help_lists_the_commands_in_workflow_order_with_whole_descriptions() -> None:
    out = CliRunner().invoke(app, ["--help"], terminal_width=80).output
    listed = re.findall(r"^  ([a-z][a-z-]+)  ", out.split("Commands:")[1], re.MULTILINE)
    assert listed == list(WORKFLOW)
    assert set(ROOT.commands) == set(WORKFLOW)  # a new command must take its place in the workflow
    assert "..." not in out.split("Commands:")[1]
    assert "--root" in out.split("Commands:")[0]  # the typical use names what `ceb convert intercode` requires


def test_no_help_text_cites_an_internal_issue_number() -> None:
    runner = CliRunner()
    paths = _commands(ROOT)
    assert ("bench", "gate") in paths and ("convert", "mind2web") in paths and ("batch", "export") in paths
    for path in [(), *paths]:
        result = runner.invoke(app, [*path, "--help"], terminal_width=100)
        assert result.exit_code == 0, (path, result.output)
        assert not re.search(r"\bissues? ?#?\d", result.output, re.IGNORECASE), (path, result.output)
        if "Commands:" in result.output:  # a group: each subcommand's description whole, not cut with "..."
            assert "..." not in result.output.split("Commands:")[1], (path, result.output)
