"""ceb/data is the bottom layer: it imports only errors, config, logs, the registry and itself."""

from __future__ import annotations

import ast
from pathlib import Path

import ceb.data

DATA = Path(ceb.data.__file__).parent
ALLOWED = ("ceb.data", "ceb.errors", "ceb.config", "ceb.logs", "ceb.registry")


def ceb_imports(path: Path) -> list[str]:
    """Every ``ceb`` module the file imports, at any depth (inside functions and ``TYPE_CHECKING`` too)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return [name for name in found if name == "ceb" or name.startswith("ceb.")]


def test_data_modules_import_nothing_above_their_layer() -> None:
    modules = sorted(DATA.glob("*.py"))
    assert len(modules) > 5

    breaking = {
        f"{path.name}: {name}"
        for path in modules
        for name in ceb_imports(path)
        if not any(name == allowed or name.startswith(allowed + ".") for allowed in ALLOWED)
    }

    assert not breaking


def test_no_data_module_imports_a_private_name_of_another() -> None:
    private = {
        f"{path.name}: from {node.module} import {alias.name}"
        for path in sorted(DATA.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ceb.")
        for alias in node.names
        if alias.name.startswith("_")
    }

    assert not private
