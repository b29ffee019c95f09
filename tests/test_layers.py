"""The package's layers, checked on the source: no module imports a layer above its own, lazy imports included.

Layers, lowest first: errors / config / logs / progress / registry / version / gc_tuning / dirlock -> data -> bank
-> backends (transports) -> stages -> pipeline / gate -> eval / serve / notebook -> cli / bench. The batch pipeline
and the live gate share a layer and neither imports the other: what both need lives below them (the directory lock,
dirlock).
``sim`` stands apart: it may import only errors, config and registry (for its package's lazy exports, PEP 562), and
only the top layer (cli, bench) may import it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import ceb

ROOT = Path(ceb.__file__).parent

LAYERS: dict[str, int] = {
    "__init__": 8,  # the package root re-exports the public API: it is above everything it exports
    "__main__": 8,  # python -m ceb: the command line
    "errors": 0,
    "config": 0,
    "configdoc": 0,
    "logs": 0,
    "progress": 0,
    "registry": 0,
    "version": 0,
    "gc_tuning": 0,
    "dirlock": 0,
    "data": 1,
    "bank": 2,
    "backends": 3,
    "stages": 4,
    "pipeline": 5,
    "gate": 5,
    "eval": 6,
    "serve": 6,
    "notebook": 6,
    "cli": 7,
    "bench": 7,
}
SIM_MAY_IMPORT = {"errors", "config", "registry", "sim"}
APART = {("pipeline", "gate"), ("gate", "pipeline")}
"""Parts of one layer that must not import each other."""


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _statements(path: Path, root: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """``(line, module, names)`` of every import in ``path``, at any depth of its code (functions included);
    relative imports resolved, ``names`` empty for ``import x``."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((node.lineno, target, tuple(a.name for a in node.names)))
    return out


def _imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """Every ``ceb`` module ``path`` imports, at any depth of its code (functions included)."""
    return [(line, name) for line, name, _ in _statements(path, root) if name == "ceb" or name.startswith("ceb.")]


def _violation(src: str, dst: str) -> bool:
    if src == dst:
        return False
    if src == "sim":
        return dst not in SIM_MAY_IMPORT
    if dst == "sim":
        return LAYERS[src] < LAYERS["cli"]
    return LAYERS[dst] > LAYERS[src] or (src, dst) in APART


def upward_imports(root: Path = ROOT) -> list[str]:
    """``file:line src -> dst`` for every import that runs against the layers."""
    found = []
    for path in sorted(root.rglob("*.py")):
        src = _part(_module_name(path, root))
        for line, target in _imports(path, root):
            dst = _part(target)
            if src not in LAYERS and src != "sim" or dst not in LAYERS and dst != "sim":
                found.append(f"{path.relative_to(root.parent)}:{line} {src} -> {dst} (a part with no layer)")
            elif _violation(src, dst):
                found.append(f"{path.relative_to(root.parent)}:{line} {src} -> {dst}")
    return found


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports() == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ceb.pipeline.runner import run_scoring\n", "stages -> pipeline"),
        ("def lazy():\n    from ceb.eval import ece\n", "stages -> eval"),
        ("from ..cli import main\n", "stages -> cli"),
        ("import ceb.sim\n", "stages -> sim"),
    ],
)
def test_the_check_sees_upward_imports_lazy_and_relative_ones_too(tmp_path: Path, source: str, expected: str) -> None:
    pkg = tmp_path / "ceb" / "stages"
    pkg.mkdir(parents=True)
    (tmp_path / "ceb" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "bad.py").write_text(source)
    found = upward_imports(tmp_path / "ceb")
    assert len(found) == 1 and expected in found[0]


def test_no_module_imports_another_modules_private_names() -> None:
    private = [
        f"{path.relative_to(ROOT.parent)}: from {node.module} import {alias.name}"
        for path in sorted(ROOT.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ceb")
        for alias in node.names
        if alias.name.startswith("_") and alias.name != "__version__"
    ]
    assert private == []


_LAZY_PATH = re.compile(r"^(ceb(?:\.\w+)+):\w+$")
"""A lazy ``"module:attr"`` registry entry (:mod:`ceb.registry`): an import that runs later, counted as one."""


def _all_modules(root: Path) -> set[str]:
    return {_module_name(path, root) for path in root.rglob("*.py")}


def _target_module(target: str, names: tuple[str, ...], modules: set[str]) -> list[str]:
    """The modules an import of ``names`` from ``target`` loads: a submodule when a name is one, else ``target``."""
    subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
    return subs or ([target] if target in modules else [])


def module_imports(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the ``ceb`` modules it imports anywhere in its code: lazy, ``TYPE_CHECKING`` and registry paths too."""
    modules = _all_modules(root)
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        src = _module_name(path, root)
        edges = {m for _, target, names in _statements(path, root) for m in _target_module(target, names, modules)}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                m = _LAZY_PATH.match(node.value)
                if m and m.group(1) in modules:
                    edges.add(m.group(1))
        edges.discard(src)
        graph[src] = edges
    return graph


def import_cycles(root: Path = ROOT) -> list[list[str]]:
    """Every group of modules that import each other, directly or around a loop (Tarjan's strongly connected
    components of size > 1), each sorted."""
    graph = module_imports(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_two_modules_import_each_other_even_lazily() -> None:
    assert import_cycles() == []


@pytest.mark.parametrize(
    "source",
    [
        "from ceb.stages import a\n",
        "def lazy():\n    from ceb.stages.a import x\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n",
        'ENTRY = "ceb.stages.a:thing"\n',
    ],
)
def test_the_cycle_check_sees_lazy_type_only_relative_and_registry_imports(tmp_path: Path, source: str) -> None:
    pkg = tmp_path / "ceb" / "stages"
    pkg.mkdir(parents=True)
    (tmp_path / "ceb" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from ceb.stages.b import y\n")
    (pkg / "b.py").write_text(source)
    assert import_cycles(tmp_path / "ceb") == [["ceb.stages.a", "ceb.stages.b"]]


def test_commands_live_in_one_package() -> None:
    """Only ``ceb/cli/`` builds commands: no other module imports typer (its help, options and error printer)."""
    outside = [
        str(path.relative_to(ROOT.parent))
        for path in sorted(ROOT.rglob("*.py"))
        if path.parent.name != "cli"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(
            name.split(".")[0] == "typer"
            for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])
        )
    ]
    assert outside == []


@pytest.mark.parametrize(
    ("part", "source"), [("gate", "from ceb.pipeline.lane import Lane\n"), ("pipeline", "import ceb.gate\n")]
)
def test_the_gate_and_the_pipeline_do_not_import_each_other(tmp_path: Path, part: str, source: str) -> None:
    pkg = tmp_path / "ceb" / part
    pkg.mkdir(parents=True)
    (tmp_path / "ceb" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "bad.py").write_text(source)
    found = upward_imports(tmp_path / "ceb")
    assert len(found) == 1 and f"{part} -> {'pipeline' if part == 'gate' else 'gate'}" in found[0]


REPEATED_BASENAMES: dict[str, str] = {
    "__init__.py": "a package",
    "_common.py": "helpers shared by the modules of its own package (cli options, baseline critics)",
    "base.py": "the base types of its package (the Critic protocol, the ChatBackend protocol, the report Section)",
    "averaging.py": "one topic at two levels: eval/X.py computes it, eval/sections/X.py makes its report section "
    "(tables, figures, report.json entries) for the one renderer, eval/render.py",
    "calibration.py": "as averaging.py",
    "deployment.py": "as averaging.py",
    "paired.py": "as averaging.py (paired differences against Static and the references)",
    "label_free.py": "as averaging.py (what the scores say without labels)",
    "export.py": "a command (cli/X.py) named after what it runs",
    "grid.py": "as export.py",
    "merge.py": "as export.py (cli/merge.py runs pipeline/merge.py)",
    "metrics.py": "as export.py (ECE and friends: eval/metrics.py; the vLLM server's own are server_metrics.py)",
    "report.py": "as export.py",
    "relabel.py": "as export.py (the LLM judge's batch: pipeline/relabel.py; its command: cli/relabel.py)",
    "label.py": "as relabel.py (a judge's step labels for a stream without any: pipeline/label.py; its command: "
    "cli/label.py)",
    "batch.py": "one topic, OpenAI Batch files, at three levels: the line format and the backend that answers from "
    "the replies (backends/), the export and import runs (pipeline/), their commands (cli/)",
    "regenerate.py": "as relabel.py (the actor's request: stages/regenerate.py; the batch: pipeline/regenerate.py; "
    "its command: cli/regenerate.py)",
    "offline.py": "the one offline backend: its registration (backends/) and its critic and labeler (stages/)",
    "prompts.py": "as relabel.py (the walk that renders a method's requests: pipeline/prompts.py; its command: "
    "cli/prompts.py)",
    "provenance.py": "what scored a run: its record (pipeline/) and the report's block showing it (eval/)",
}
"""Module basenames allowed in several places, each because it means the same thing in each of them. A name
used for different things (``metrics.py`` once named both the ECE code and the Prometheus reader) is renamed
instead; a new repeat fails below until it is renamed or listed here with its reason."""


def test_a_module_basename_repeats_only_where_it_means_the_same_thing() -> None:
    seen: dict[str, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    repeated = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert {name: paths for name, paths in repeated.items() if name not in REPEATED_BASENAMES} == {}
    assert sorted(set(REPEATED_BASENAMES) - set(repeated)) == []  # a listed name no longer repeated: drop it
