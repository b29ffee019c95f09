"""The README and the manual: short, current, and their code runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from ceb.configdoc import render
from tests.support.paths import REPO

README = REPO / "README.md"


def test_configuration_page_is_current() -> None:
    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page == render(), "docs/configuration.md is stale: python -m ceb.configdoc > docs/configuration.md"


def test_configuration_page_has_a_row_or_a_heading_for_every_setting() -> None:
    from pydantic import BaseModel

    from ceb.config import RunConfig

    page = render()
    queue: list[tuple[str, type[BaseModel]]] = [("", RunConfig)]
    while queue:
        prefix, model = queue.pop()
        for name, info in model.model_fields.items():
            key = f"{prefix}.{name}" if prefix else name
            sub = info.annotation
            if isinstance(sub, type) and issubclass(sub, BaseModel):
                assert f"## `[{key}]`" in page, f"section [{key}] missing"
                queue.append((key, sub))
            elif name != "critics":
                assert f"| `{name}` |" in page, f"{key} missing from the configuration page"


def test_the_exit_code_table_lists_every_exit_code_of_the_commands() -> None:
    import ceb.cli._common as common

    page = (REPO / "docs" / "run-directory.md").read_text(encoding="utf-8")
    table = page[page.index("## Exit codes") :]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", table, re.M)}
    defined = {value for name, value in vars(common).items() if name.startswith("EXIT_")}
    assert documented == defined | {0}
    for code in defined:
        assert re.search(rf"^{code} +\S", common.__doc__ or "", re.M), f"exit code {code} missing from _common"


def test_readme_is_short_and_opens_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert "ceb convert intercode" in blocks[0] and "ceb score" in blocks[0]
    assert "-m pytest" in blocks[1]


def test_readme_gate_example_runs_and_runs_again_on_its_state(tmp_path: pytest.TempPathFactory) -> None:
    """The README's live-gate example, run as a user would paste it (offline backend, a fresh state directory), then
    a second time on the state the first left: the same trajectory is acknowledged once, not banked twice."""
    code = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)[0]
    env = os.environ | {"PYTHONPATH": str(REPO)}
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        score, decision = done.stdout.splitlines()[0].split()  # the first print; log lines may follow
        assert 0.0 <= float(score) <= 1.0 and decision in {"allow", "review", "block"}
    journal = (tmp_path / "ceb-state" / "my-agent" / "bank.journal").read_bytes().splitlines()
    assert len(journal) == 1 + 1  # a header line and one bank update


def test_manual_builds_without_warnings(tmp_path: pytest.TempPathFactory) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs (the dev extra) builds the manual")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").is_file()
