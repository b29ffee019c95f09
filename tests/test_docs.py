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


def test_command_line_page_is_current() -> None:
    from ceb.cli._reference import render as render_cli

    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert page == render_cli(), "docs/cli.md is stale: python -m ceb.cli._reference > docs/cli.md"


def test_generated_tables_show_no_escaped_pipe_inside_code() -> None:
    """A pipe escaped inside a code span shows as a literal backslash in the built manual (it did 42 times)."""
    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    spans = re.findall(r"`[^`\n]*`", page)
    assert not [s for s in spans if "\\|" in s]


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
    # CI runs exactly the README's test command (the fast tier), as a line of its own.
    test_command = blocks[1].strip().rsplit(" && ", 1)[1]
    assert test_command in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()


# The words after `pip install` up to the end of the command: a backtick, a comment, a shell operator, or a comma
# followed by a space (prose) ends it; a comma inside `ceb[ray,dense]` does not.
_PIP_INSTALL = re.compile(r"pip3? install\b(?P<args>(?:[^`\n#|;&),]|,(?=\S))*)")
_THE_OTHER_CEB = re.compile(r"ceb(\[[^\]]*\])?((==|>=|<=|~=|!=|<|>)\S*)?")


def _installs_the_registrys_ceb(line: str) -> bool:
    """Whether ``line`` runs ``pip install`` with ``ceb`` as a requirement (extras, quotes, a version or not)."""
    for match in _PIP_INSTALL.finditer(line):
        for word in match.group("args").split():
            if _THE_OTHER_CEB.fullmatch(word.strip("'\"")):
                return True
    return False


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        ("pip install ceb", True),
        ("pip install 'ceb[vllm]'   # from a checkout: pip install -e '.[vllm]'", True),
        ('.venv/bin/pip install -q -U "ceb[ray,dense]>=0.1"', True),
        ("python -m pip install ceb==0.1.0", True),
        ("`pip install 'ceb[dense]'`", True),
        ("pip install 'critic-experience-bank[vllm]'", False),
        ("pip install -e '.[vllm]'", False),
        ("pip install -q -c .ci/constraints.txt -e '.[dev]' && .venv/bin/ceb score x", False),
        ("pip install vllm-router==0.1.17; ceb grid g.toml", False),
        ('"<venv>/bin/pip install --no-deps -e <ceb checkout>, then the ceb "', False),
    ],
)
def test_the_install_line_check_tells_the_registrys_ceb_from_ours(line: str, bad: bool) -> None:
    assert _installs_the_registrys_ceb(line) is bad


def test_no_doc_or_message_tells_users_to_pip_install_ceb() -> None:
    """The registry's ``ceb`` is someone else's empty package: every install line names ``critic-experience-bank``.

    Read: the README, every page of the manual, and the package's and examples' sources (error messages and help
    texts that name an extra to install).
    """
    files = [README, *sorted((REPO / "docs").rglob("*.md"))]
    files += sorted((REPO / "ceb").rglob("*.py")) + sorted((REPO / "examples").rglob("*.py"))
    bad = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _installs_the_registrys_ceb(line)
    ]
    assert bad == [], "install critic-experience-bank, not ceb (the registry's ceb is another package):\n" + "\n".join(
        bad
    )


_OURS_FROM_THE_REGISTRY = re.compile(r"critic-experience-bank(\[[^\]]*\])?((==|>=|<=|~=|!=|<|>)\S*)?")
_SAYS_NOT_YET = ("once published", "not on the package registry", "No matching distribution")


def _installs_ours_from_the_registry(line: str) -> bool:
    """Whether ``line`` runs ``pip install critic-experience-bank`` (the registry's copy, not a checkout or a wheel)."""
    for match in _PIP_INSTALL.finditer(line):
        for word in match.group("args").split():
            if _OURS_FROM_THE_REGISTRY.fullmatch(word.strip("'\"")):
                return True
    return False


def test_no_doc_or_message_gives_the_registry_install_as_working_before_publishing() -> None:
    """Nothing is published: ``pip install critic-experience-bank`` answers "No matching distribution", so an install
    line naming it must say it is for after publishing; every hint ceb prints names the checkout's command."""
    from ceb.version import PUBLISHED, install_command

    assert not PUBLISHED
    files = [README, *sorted((REPO / "docs").rglob("*.md"))]
    files += sorted((REPO / "ceb").rglob("*.py")) + sorted((REPO / "examples").rglob("*.py"))
    bad = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _installs_ours_from_the_registry(line) and not any(s in line for s in _SAYS_NOT_YET)
    ]
    assert bad == [], "not published yet: install from a checkout, or say 'once published':\n" + "\n".join(bad)
    assert install_command("ray") == "pip install -e '.[ray]' in ceb's checkout"
    install = (REPO / "docs" / "installation.md").read_text(encoding="utf-8")
    assert "pip install -c .ci/constraints.txt -e ." in install and "python -m build" in install


def test_readme_gate_example_runs_and_runs_again_on_its_state(tmp_path: pytest.TempPathFactory) -> None:
    """The README's live-gate example, run as a user would paste it (offline backend, a fresh state directory), then
    a second time on the state the first left: the same trajectory is acknowledged once, not banked twice."""
    code = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)[0]
    env = os.environ | {"PYTHONPATH": str(REPO)}
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        # Only the example's print: a library is silent on stdout (the second run's info event went there).
        [line] = done.stdout.splitlines()
        score, decision = line.split()
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
