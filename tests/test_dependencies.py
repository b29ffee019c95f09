"""ceb installs beside vLLM: ``critic-experience-bank[vllm]`` and ``[vllm,dense]`` resolve on Linux x86_64, Python
3.11-3.13.

A dry run of uv's resolver against the package registry (metadata only; no wheel is downloaded). It fails, naming
the conflict, when a range in ``pyproject.toml`` meets a pin of vLLM's (numpy ``==2.4.6`` against mistral-common's
``numpy<2.4`` on Python <= 3.12 did; so did ``torch==2.13.0`` in the ``dense`` extra against vLLM 0.33's
``torch==2.14.0``). ``CEB_OFFLINE=1`` skips it on a machine without the registry.
"""

from __future__ import annotations

import os
import subprocess
import tomllib

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.skipif(os.environ.get("CEB_OFFLINE") == "1", reason="CEB_OFFLINE=1: no package registry")


def _uv() -> str:
    uv = pytest.importorskip("uv", reason="uv (the dev extra) resolves the extras")
    return str(uv.find_uv_bin())


@pytest.mark.slow  # six resolutions against the package registry
@pytest.mark.parametrize("python", ["3.11", "3.12", "3.13"])
@pytest.mark.parametrize("extras", [("vllm",), ("vllm", "dense")], ids=lambda e: ",".join(e))
def test_extras_resolve_beside_vllm(python: str, extras: tuple[str, ...]) -> None:
    cmd = [_uv(), "pip", "compile", str(REPO / "pyproject.toml"), "--no-header", "--quiet"]
    cmd += ["--python-version", python, "--python-platform", "x86_64-manylinux_2_28"]
    for extra in extras:
        cmd += ["--extra", extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    wanted = f"critic-experience-bank[{','.join(extras)}]"
    assert done.returncode == 0, f"{wanted} does not resolve on Python {python}:\n{done.stderr}"
    pins = dict(line.split("==", 1) for line in done.stdout.splitlines() if "==" in line and not line.startswith(" "))
    assert "vllm" in pins, f"vLLM missing from the resolution:\n{done.stdout}"
    assert "torch" in pins


def test_no_exact_pins_and_no_torch_in_an_extra() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra, reqs in project["optional-dependencies"].items():
        assert not any(r.split(">")[0].split("=")[0].strip() == "torch" for r in reqs), f"torch pinned in [{extra}]"
        requirements += reqs
    assert [r for r in requirements if "==" in r] == [], "exact pins belong in .ci/constraints*.txt"


def test_constraints_pin_every_dependency() -> None:
    """The compiled constraints hold an exact version for each requirement CI installs (else CI drifts)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in ("dev", "docs", "dense", "parquet", "adapters", "ray", "notebook", "inspect"):
        wanted += project["optional-dependencies"][extra]
    pinned = {
        line.split("==", 1)[0].lower()
        for line in (REPO / ".ci" / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    }
    names = {r.split(";")[0].split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip().lower() for r in wanted}
    assert sorted(names - pinned - {project["name"]}) == [], "run .ci/compile-constraints"  # dev names [docs]
