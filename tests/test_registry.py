"""The one registry kind: declaration order, lazy dependency-checked entries, plugin packages, lazy exports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ceb.errors import ConfigError
from ceb.registry import Registry, lazy_exports


def test_names_keep_declaration_order_and_a_re_registration_keeps_its_place() -> None:
    reg: Registry[int] = Registry("thing")
    for name, value in (("b", 1), ("a", 2), ("c", 3)):
        reg.register(name, value)
    reg.register("a", 20)
    reg.register("z", 0, before="a")
    assert reg.names() == ["b", "z", "a", "c"]
    assert reg.items() == [("b", 1), ("z", 0), ("a", 20), ("c", 3)]
    assert reg.position("c") == 3


def test_a_lazy_entry_is_imported_on_first_get_only() -> None:
    reg: Registry[object] = Registry("thing")
    reg.register("dumps", "json:dumps")
    assert reg.get("dumps") is sys.modules["json"].dumps


def test_an_unknown_name_lists_the_known_ones_and_suggests_the_closest() -> None:
    reg: Registry[int] = Registry("backend")
    reg.register("openai", 1)
    reg.register("offline", 2)
    with pytest.raises(ConfigError, match=r"unknown backend 'opneai' \(did you mean 'openai'\?\); choose one of: "):
        reg.get("opneai")


def test_a_missing_dependency_is_found_before_importing_and_names_the_extra() -> None:
    reg: Registry[object] = Registry("retriever")
    reg.register("dense", "ceb_no_such_module:Thing", extra="dense", requires=("ceb_no_such_module",))
    assert reg.missing("dense") == ["ceb_no_such_module"]
    with pytest.raises(
        ConfigError,
        match=r"needs ceb_no_such_module, which is not installed; install it with: pip install -e '\.\[dense\]' in ceb",
    ):
        reg.get("dense")


def test_a_broken_path_is_a_config_error_naming_the_entry() -> None:
    reg: Registry[object] = Registry("method")
    reg.register("x", "json:no_such_name")
    with pytest.raises(ConfigError, match="method 'x' cannot be loaded: json has no 'no_such_name'"):
        reg.get("x")


def test_plugin_modules_register_themselves_on_the_first_look_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "ceb_toy_plugins"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from ceb.registry import Registry\nREG = Registry('toy', plugins=[__name__])\n")
    (pkg / "b_second.py").write_text("from ceb_toy_plugins import REG\nREG.register('second', 2)\n")
    (pkg / "a_first.py").write_text("from ceb_toy_plugins import REG\nREG.register('first', 1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = __import__("ceb_toy_plugins").REG
    __import__("ceb_toy_plugins.b_second")  # imported first by its user...
    assert "ceb_toy_plugins.a_first" not in sys.modules
    assert reg.names() == ["first", "second"]  # ...yet listed in module-name order, as every run lists them
    assert reg.get("second") == 2


def test_lazy_exports_load_a_name_once_and_refuse_unknown_ones() -> None:
    import types

    module = types.ModuleType("ceb_toy_lazy")
    sys.modules["ceb_toy_lazy"] = module
    try:
        getattr_, dir_ = lazy_exports("ceb_toy_lazy", {"dumps": "json"}, ["dumps"])
        assert getattr_("dumps") is sys.modules["json"].dumps
        assert module.__dict__["dumps"] is sys.modules["json"].dumps  # stored: the next access skips __getattr__
        assert dir_() == ["dumps"]
        with pytest.raises(AttributeError, match="module 'ceb_toy_lazy' has no attribute 'loads'"):
            getattr_("loads")
    finally:
        del sys.modules["ceb_toy_lazy"]
