"""Command-line options made from the settings they set: one option per field of a pydantic model.

Type, default, required-ness, range (``ge`` / ``le``) and help (the field's docstring) come from the field.
Sequences are written comma-separated (``--sizes 1000,10000``), mappings as a JSON object; the model's first
error is a usage error (exit 2) naming the option. The pattern of inspect_ai's ``_cli/common.py``.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import annotated_types
import orjson
import typer
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

__all__ = ["settings_command", "split_list"]

M = TypeVar("M", bound=BaseModel)

_SCALARS = (bool, int, float, str, Path)


def split_list(text: str) -> list[str]:
    """``"a, b,c"`` -> ``["a", "b", "c"]``; empty items dropped."""
    return [part.strip() for part in text.split(",") if part.strip()]


def _inner(annotation: Any) -> tuple[Any, bool]:
    """The annotation without ``| None``, and whether ``None`` was allowed."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else annotation), True
    return annotation, False


def _kind(annotation: Any) -> str:
    """How a field is written on the command line: ``scalar``, ``literal``, ``list`` or ``json``."""
    if annotation in _SCALARS:
        return "scalar"
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "literal"
    if origin in (tuple, list, Sequence, set, frozenset) or annotation in (tuple, list):
        return "list"
    return "json"


def _option(name: str, field: FieldInfo) -> inspect.Parameter:
    """The typer parameter of one field."""
    annotation, optional = _inner(field.annotation)
    kind = _kind(annotation)
    bounds: dict[str, Any] = {}
    for rule in field.metadata:
        if isinstance(rule, annotated_types.Ge):
            bounds["min"] = rule.ge
        elif isinstance(rule, annotated_types.Le):
            bounds["max"] = rule.le
    help_text = (field.description or "").strip().split("\n\n")[0].replace("\n", " ")
    if kind in ("list", "json"):
        help_text = help_text.removesuffix(".") + (" (comma-separated)." if kind == "list" else " (a JSON object).")
    shown: Any = annotation if kind in ("scalar", "literal") else str
    if optional:
        shown = shown | None
    default: Any = inspect.Parameter.empty if field.is_required() else field.get_default(call_default_factory=True)
    if kind == "list" and default not in (None, inspect.Parameter.empty):
        default = ",".join(str(v) for v in default)
    elif kind == "json" and default not in (None, inspect.Parameter.empty):
        default = orjson.dumps(default).decode()
    flag = "--" + name.replace("_", "-")
    decls = (f"{flag}/--no-{flag[2:]}",) if annotation is bool else (flag,)
    computed = field.default_factory is not None  # e.g. a path found at run time: its help says what it is
    option = typer.Option(*decls, help=help_text, show_default=not computed, **bounds)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[shown, option])


def _parse(model: type[BaseModel], given: Mapping[str, Any]) -> dict[str, Any]:
    """The command line's strings made into the shapes the model validates (lists, JSON objects)."""
    out: dict[str, Any] = {}
    for name, value in given.items():
        kind = _kind(_inner(model.model_fields[name].annotation)[0])
        if isinstance(value, str) and kind == "list":
            value = split_list(value)
        elif isinstance(value, str) and kind == "json":
            try:
                value = orjson.loads(value)
            except orjson.JSONDecodeError as exc:
                raise typer.BadParameter(f"not JSON: {exc}", param_hint=f"--{name.replace('_', '-')}") from None
        out[name] = value
    return out


def settings_command(run: Callable[..., int | None]) -> Callable[..., int | None]:
    """``run`` as a typer callback whose pydantic-model parameter becomes one option per field of the model.

    Args:
        run: A function with one parameter annotated with a pydantic model class; its other parameters keep their
            own typer annotations (e.g. ``host``, ``port``).

    Returns:
        The callback: the fields' values are validated into the model, then ``run`` is called with it and the other
        parameters; its ``__doc__`` is ``run``'s, else the model's.

    Raises:
        typer.BadParameter: (when called) a value the model refuses, naming its option: click prints it and exits 2.
    """
    hints = typing.get_type_hints(run, include_extras=True)
    params = list(inspect.signature(run).parameters.values())
    (name,) = (p.name for p in params if isinstance(hints.get(p.name), type) and issubclass(hints[p.name], BaseModel))
    model: type[BaseModel] = hints[name]
    own = [p.replace(annotation=hints[p.name]) for p in params if p.name != name]
    options = [_option(field_name, field) for field_name, field in model.model_fields.items()]

    def callback(**given: Any) -> int | None:
        fields = {k: given.pop(k) for k in model.model_fields}
        try:
            settings = model(**_parse(model, fields))
        except ValidationError as exc:
            error = exc.errors()[0]
            hint = "--" + str(error["loc"][0]).replace("_", "-") if error["loc"] else None
            raise typer.BadParameter(error["msg"], param_hint=hint) from None
        return run(**{name: settings}, **given)

    signature = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + options
    callback.__signature__ = inspect.Signature(signature)  # type: ignore[attr-defined]
    callback.__annotations__ = {p.name: p.annotation for p in signature}
    callback.__doc__ = run.__doc__ or model.__doc__
    callback.__name__ = run.__name__
    return callback
