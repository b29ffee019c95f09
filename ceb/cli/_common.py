"""What every command shares: the consoles, logging set-up, the one error printer and the option helpers.

Exit codes of every ``ceb`` command (the only place they are defined):

====  ==========================================================================================================
code  meaning
====  ==========================================================================================================
0     done
1     the command ran and found a failure: ``ceb score`` and ``ceb grid``, no step got a score (every one failed;
      the reasons are in scores.jsonl); ``ceb doctor``, ceb cannot run on the endpoint at all (no chat
      reply); ``ceb relabel``, no trajectory got a judge label (nothing is written); ``ceb regenerate``, no
      flagged step got a regenerated action; ``ceb bench``, the benchmark failed (its own non-zero exit code when
      it gives one); ``ceb grid --ray``, a shard failed after its retries (every part is kept; ``--resume``
      continues, nothing is merged until every shard finished); ``ceb batch import``, no step got a score and
      none waits for another round
2     bad input or a refusal, printed as one line ``error: ...`` (a :class:`~ceb.errors.CEBError` naming the
      file, line or field; a path that does not exist; a ``--resume`` of a directory with no run; a port in use;
      a run or state directory another ceb process holds, naming its pid; ``ceb serve`` on a state directory it
      cannot write) or a usage error from the option parser
74    the machine refused a file (``EX_IOERR`` of sysexits.h): a full disk, a refused permission, a read-only
      file system, an I/O error. One line ``error: PATH: REASON; ...`` says what finished work is kept and how
      to go on (``ceb score`` and ``ceb grid``: ``--resume``; the others: run the same command again)
130   interrupted (Ctrl-C, or SIGTERM from ``timeout`` or a scheduler): every finished step is kept,
      summary.json says ``interrupted``, ``--resume`` continues
====  ==========================================================================================================
"""

from __future__ import annotations

import errno
import inspect
import os
import re
import shlex
import sys
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import typer.core
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from rich.console import Console
from rich.text import Text

from ceb.config import RunConfig
from ceb.errors import CEBError, ConfigError, reported_error

__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_IO",
    "Command",
    "config_field",
    "config_option",
    "check_new_stream",
    "config_overrides",
    "endpoint_options",
    "field_options",
    "option_group",
    "model_config",
    "engine_words",
    "err",
    "fail",
    "judged_outcome",
    "ApiKeyEnv",
    "BaseUrl",
    "ENDPOINT_PANEL",
    "GLOBAL_OPTIONS",
    "Limit",
    "MaxConcurrency",
    "ModelName",
    "ShardOption",
    "PORT_HELP",
    "out",
    "parse_shard",
    "setup_logging",
    "with_model",
]

EXIT_FAILED = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_IO = 74

T = TypeVar("T")

_FIXES: dict[int, str] = {
    errno.ENOSPC: "free some space",
    errno.EDQUOT: "free some space (or raise the quota)",
    errno.EFBIG: "write to a file system that takes larger files",
    errno.EACCES: "fix the permissions",
    errno.EPERM: "fix the permissions",
    errno.EROFS: "make the file system writable",
    errno.EIO: "check the disk",
}
"""The errors of the machine rather than of the command (exit :data:`EXIT_IO`), each with what fixes it."""


# To a file or pipe, tables keep their natural width; markup=False, as paths may hold brackets ("[grid]").
class _Stdout(Console):
    def on_broken_pipe(self) -> None:
        """The reader left (``ceb prompts ... | head``): what it read was all it wanted, so exit 0 quietly."""
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush fails no more
        raise SystemExit(0)  # rich's own exits 1


out = _Stdout(width=None if sys.stdout.isatty() else 10_000, markup=False)
err = Console(stderr=True, markup=False)


GLOBAL_OPTIONS = ("log_level", "log_format", "progress", "progress_interval")
"""The options of ``ceb`` itself that every command also takes after its name (``ceb score ... --progress log``)."""

_LATE = "late_"
"""The prefix of a global option's name where a command takes it (:meth:`Command.get_params`)."""


def setup_logging(level: str, log_format: str = "console", progress: str = "auto", interval_s: float = 30.0) -> None:
    """Apply the global options: log events at ``level`` and above to stderr, and the progress display.

    ``log_format`` is ``console`` or ``json``; ``progress`` a :func:`ceb.progress.set_progress` mode;
    ``interval_s`` the seconds between progress log lines.

    Raises:
        typer.BadParameter: ``level`` is not debug, info, warning or error, or the progress mode is unknown.
    """
    from ceb.logs import configure_logging
    from ceb.progress import set_progress

    try:
        configure_logging(level, json=log_format == "json")
        set_progress(progress, interval_s)  # type: ignore[arg-type]
    except (ConfigError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None


def fail(
    problem: CEBError | OSError | str,
    *,
    doing: str | None = None,
    path: str | Path | None = None,
    kept: str = "nothing finished is lost",
    then: str = "run the same command again",
) -> typer.Exit:
    """Print ``problem`` to stderr as one line ``error: ...``; return the exit to raise.

    A fault of the machine (:data:`_FIXES`) reads ``error: PATH: REASON; KEPT; FIX, then THEN`` and exits
    :data:`EXIT_IO`; anything else exits :data:`EXIT_ERROR`.

    Args:
        problem: A :class:`~ceb.errors.CEBError`, an ``OSError`` or a message.
        doing: For an ``OSError``, what could not be done ("cannot listen on 127.0.0.1:8100"), said before the
            system's reason in place of the file name.
        path: For an ``OSError`` that names no file, where it happened (a run directory).
        kept: For a fault of the machine, what finished work is kept.
        then: For a fault of the machine, how to go on once it is fixed.
    """
    code = EXIT_ERROR
    if isinstance(problem, OSError):
        reason = problem.strerror or str(problem)
        named = problem.filename if problem.filename is not None else path
        where = doing or (str(named) if named is not None else None)
        message = f"{where}: {reason}" if where else reason
        fix = _FIXES.get(problem.errno) if problem.errno is not None else None
        if fix is not None:
            message, code = f"{message}; {kept}; {fix}, then {then}", EXIT_IO
    else:
        message = str(problem)
    err.print(Text.assemble(("error:", "bold red"), f" {message}"), highlight=False, soft_wrap=True)
    return typer.Exit(code)


def judged_outcome(
    unreadable: Sequence[tuple[str, str]], judged: int, out_file: Path, journal: Path, *, unit: str, got: str
) -> None:
    """What ``ceb relabel`` and ``ceb label`` say after judging: each trajectory left out, where the rest stays.

    Args:
        unreadable: ``(trajectory id, reason)`` of each trajectory left without ``unit`` (``judge label``).
        judged: Trajectories that got it.
        out_file: The new stream, written only when ``judged``.
        journal: The judgments kept for a rerun.
        unit: What a trajectory gets, e.g. ``judge label``.
        got: The same after "no trajectory got", e.g. ``a judge label``.

    Raises:
        typer.Exit: :data:`EXIT_FAILED` when no trajectory was judged.
    """
    for trajectory_id, reason in unreadable:
        err.print(f"warning: trajectory {trajectory_id!r} has no {unit}: {reason}", soft_wrap=True)
    if unreadable and judged:
        err.print(
            f"note: the judgments so far stay in {journal}; run again with --overwrite to ask only the trajectories "
            "without them",
            soft_wrap=True,
        )
    if not judged:
        err.print(f"error: no trajectory got {got}; {out_file} is not written", soft_wrap=True)
        raise typer.Exit(EXIT_FAILED)


def check_new_stream(command: str, stream: Path, out_file: Path, overwrite: bool) -> None:
    """Refuse an ``--out`` of ``label`` or ``relabel`` before any request is paid for.

    Raises:
        typer.Exit: ``out_file`` is the input, a directory, or exists without ``overwrite`` (:func:`fail`).
    """
    if out_file.exists() and out_file.resolve() == stream.resolve():
        raise fail(f"{out_file}: --out is the input stream; {command} writes a new file and never modifies its input")
    if out_file.is_dir():
        raise fail(f"{out_file}: --out is a directory; give the new stream file's path")
    if out_file.exists() and not overwrite:
        raise fail(f"{out_file} exists; give --overwrite to replace it")


def with_model(command: str, backend: Any, call: Callable[[Any], Awaitable[T]]) -> T:
    """``call``'s result with the model of ``backend`` (a :class:`~ceb.config.BackendConfig`), opened and preflighted.

    Raises:
        typer.Exit: The backend has no model (:func:`fail`).
    """
    import anyio

    from ceb.backends import open_backend

    async def run() -> T:
        chat = open_backend(backend)
        if chat is None:  # a registered backend without a model
            raise fail(f"ceb {command} needs a language model: backend {backend.name!r} has none")
        async with chat:
            await chat.preflight()
            return await call(chat)

    return anyio.run(run)


def config_field(path: str) -> FieldInfo:
    """The field of :class:`~ceb.config.RunConfig` at the dotted ``path`` (``"backend.max_concurrency"``).

    Raises:
        KeyError: No such field.
    """
    model: type[BaseModel] = RunConfig
    *sections, name = path.split(".")
    for section in sections:
        annotation = model.model_fields[section].annotation
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel), path
        model = annotation
    return model.model_fields[name]


def _shown(value: object) -> str:
    """A default as a user types it: tuples comma-joined, as the options that take lists read them."""
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def _first_sentence(doc: str) -> str:
    first = re.split(r"(?<=\.)\s", " ".join(doc.split()), maxsplit=1)[0]
    return first.replace("``", "")


def config_option(
    path: str, *flags: str, help: str | None = None, base: object = None, convert: Any = None, **kwargs: Any
) -> Any:
    """A ``typer.Option`` bound to the config setting at ``path`` (:func:`config_overrides`); help shows its default.

    The option's own default is ``None`` (the config file, else the field, decides) unless the command has its own.

    Args:
        path: Dotted field of :class:`~ceb.config.RunConfig`, e.g. ``"ceb.votes"``.
        *flags: The option's names, when not derived from the parameter name.
        help: The help text, stating no default (by default the first sentence of the field's docstring).
        base: The command's own default for the setting, shown instead of the field's; ``False``: none shown.
        convert: Makes a given value the field's (``--methods a,b`` -> a tuple); ``None``: taken as given.
        **kwargs: Further ``typer.Option`` arguments (``min``, ``rich_help_panel``...).

    Raises:
        KeyError: ``path`` names no config field (at import: a typo fails every command at once).
    """
    field = config_field(path)
    text = help if help is not None else _first_sentence(field.description or "")
    default = field.default if base is None else base
    if default is not None and default is not False:
        text = f"{text.rstrip('.')} (default: {_shown(default)})."
    option = typer.Option(*flags, help=text, **kwargs)
    option.config_path, option.convert = path, convert
    return option


def config_overrides(command: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """The nested overrides of :func:`~ceb.config.load_config` that ``command``'s :func:`config_option` set.

    Args:
        command: The command function, whose options bind config paths.
        values: Its parameters' values by name (``locals()`` on entry); ``None``: not given.

    Raises:
        typer.BadParameter: From an option's ``convert`` (``--engine-args`` with an unbalanced quote).
    """
    overrides: dict[str, Any] = {}
    for name, hint in typing.get_type_hints(command, include_extras=True).items():
        option = next((m for m in getattr(hint, "__metadata__", ()) if hasattr(m, "config_path")), None)
        if option is None or name not in values:
            continue
        *sections, field = option.config_path.split(".")
        section = overrides
        for key in sections:
            section = section.setdefault(key, {})
        value = values[name]
        section[field] = option.convert(value) if option.convert and value is not None else value
    return overrides


ENDPOINT_PANEL = "Endpoint"
"""The help panel of the endpoint option group (:func:`endpoint_options`)."""

BaseUrl = Annotated[
    str | None,
    config_option(
        "backend.base_url",
        "--base-url",
        help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1",
        rich_help_panel=ENDPOINT_PANEL,
    ),
]
ModelName = Annotated[
    str | None,
    config_option(
        "backend.model",
        "--model",
        help="Model name at the endpoint; left out, the one model its /models lists. With --backend vllm the "
        "model directory.",
        rich_help_panel=ENDPOINT_PANEL,
    ),
]
ApiKeyEnv = Annotated[
    str | None,
    config_option(
        "backend.api_key_env", "--api-key-env", help="Env variable holding the API key", rich_help_panel=ENDPOINT_PANEL
    ),
]
MaxConcurrency = Annotated[
    int | None,
    config_option(
        "backend.max_concurrency",
        "--max-concurrency",
        help="Requests in flight to the endpoint",
        rich_help_panel=ENDPOINT_PANEL,
    ),
]

MODEL_BACKEND = (
    "openai (an endpoint) or vllm (a vLLM engine in this process); default: the config's backend, else openai."
)
"""``--backend`` of a command whose stage needs a language model (:func:`model_config`)."""


def option_group(param: str, path: str, group: Mapping[str, Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: the command's parameter ``param`` becomes the options ``group`` (name -> annotation) in its place.

    The command gets ``param``: the overrides those options set at the dotted config ``path``
    (:func:`config_overrides`; ``None`` values: not given).
    """

    def decorate(run: Callable[..., Any]) -> Callable[..., Any]:
        hints = typing.get_type_hints(run, include_extras=True)
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in inspect.signature(run).parameters.values()]
        at = [p.name for p in params].index(param)
        options = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=hint)
            for name, hint in group.items()
        ]
        own = [p.replace(annotation=hints[p.name]) for p in params if p.name != param]
        signature = [*own[:at], *options, *own[at:]]

        def command(**given: Any) -> Any:
            section = config_overrides(command, {name: given.pop(name) for name in group})
            for key in path.split("."):
                section = section[key]
            return run(**{param: section}, **given)

        command.__signature__ = inspect.Signature(signature)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in signature}
        command.__doc__, command.__name__, command.__module__ = run.__doc__, run.__name__, run.__module__
        return command

    return decorate


def endpoint_options(
    backend_help: str = MODEL_BACKEND, *, base: object = False, panel: str | None = ENDPOINT_PANEL
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The endpoint option group in place of the ``endpoint`` parameter, which gets the ``backend`` overrides.

    ``--backend``, ``--base-url``, ``--model``, ``--api-key-env`` and ``--max-concurrency`` (:func:`option_group`).

    Args:
        backend_help: The help of ``--backend``.
        base: Passed to :func:`config_option` for ``--backend`` (``False``: no default shown; ``None``: the field's).
        panel: The help panel of ``--backend`` (``None``: the first screen's).
    """
    backend = Annotated[
        str | None,
        config_option("backend.name", "--backend", help=backend_help, base=base, rich_help_panel=panel),
    ]
    group = {"backend": backend, "base_url": BaseUrl, "model": ModelName, "api_key_env": ApiKeyEnv}
    return option_group("endpoint", "backend", group | {"max_concurrency": MaxConcurrency})


def field_options(path: str, names: Sequence[str], panel: str) -> dict[str, Any]:
    """One option per field ``names`` of the config section at ``path``: type, help and default from the field."""
    options: dict[str, Any] = {}
    for name in names:
        annotation = config_field(f"{path}.{name}").annotation
        flag = "--" + name.replace("_", "-")
        flags = (f"{flag}/--no-{flag[2:]}",) if annotation == bool | None else ()
        options[name] = Annotated[annotation, config_option(f"{path}.{name}", *flags, rich_help_panel=panel)]
    return options


def model_config(command: str, config: Path | None, overrides: dict[str, Any]) -> RunConfig:
    """The config file with ``overrides`` for a command that needs a model; no backend chosen anywhere: ``openai``.

    Raises:
        CEBError: ``--backend offline`` was given, which has no model (through :func:`fail`: one line, exit 2),
            or the config file is unreadable or invalid.
    """
    from ceb.config import load_config

    cfg = load_config(config, overrides)
    if cfg.backend.name != "offline":
        return cfg
    if overrides["backend"].get("name") is not None:
        raise fail(f"ceb {command} needs a language model: --backend offline has none; use openai or vllm")
    return load_config(config, overrides | {"backend": overrides["backend"] | {"name": "openai"}})


Limit = Annotated[
    int | None,
    config_option(
        "max_trajectories",
        "--limit",
        min=1,
        help="Score only the first N trajectories of each stream order (a first look, a paid API). Recorded in the "
        "run; a --resume may raise it and carry on.",
    ),
]
"""``--limit`` of ``score`` and ``grid``: :attr:`ceb.config.RunConfig.max_trajectories`."""

ShardOption = Annotated[
    str | None,
    typer.Option(
        "--shard",
        help="Score only shard i of N (i/N, e.g. 0/3 or $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT): the lanes "
        "a stable hash of the lane key puts there. Recorded in the run; its --resume must give the same i/N. "
        "`ceb merge` joins the N parts into one run directory.",
    ),
]
"""``--shard`` of ``score`` and ``grid`` (:mod:`ceb.pipeline.shard`); read with :func:`parse_shard`."""


def parse_shard(text: str | None) -> Any:
    """The :class:`~ceb.pipeline.shard.Shard` of a ``--shard`` value, ``None`` without one.

    Raises:
        typer.BadParameter: Not ``i/N`` with ``0 <= i < N`` (a usage error, exit 2).
    """
    if text is None:
        return None
    from ceb.pipeline.shard import Shard

    try:
        return Shard.parse(text)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from None


def engine_words(engine_args: str | None) -> tuple[str, ...] | None:
    """``--engine-args`` split as a shell would (``None`` when not given).

    Raises:
        typer.BadParameter: An unbalanced quote (a usage error, not a traceback).
    """
    if not engine_args:
        return None
    try:
        return tuple(shlex.split(engine_args))
    except ValueError as exc:  # "No closing quotation"
        raise typer.BadParameter(f"{exc.args[0].lower()} in {engine_args!r}", param_hint="--engine-args") from None


PORT_HELP = "TCP port, 0 to 65535 (0: any free one; the URL is printed)."
"""Help of the ``--port`` of ``serve`` and ``sim-server``; both take ``min=0, max=65535`` (the range TCP has)."""


def _is_path(annotation: object) -> bool:
    return annotation is Path or Path in typing.get_args(annotation)


def _path_flags(command: typer.core.TyperCommand) -> set[str]:
    """The flags of ``command``'s options that take a file or directory (annotated ``Path``)."""
    callback = command.callback
    if callback is None:
        return set()
    try:
        hints = typing.get_type_hints(callback)
    except (NameError, TypeError):
        hints = {}
    signature = inspect.signature(callback).parameters
    flags: set[str] = set()
    for param in command.params:
        if param.name is None or param.param_type_name != "option":
            continue
        given = signature.get(param.name)
        annotation = hints.get(param.name, given.annotation if given is not None else None)
        if _is_path(annotation):
            flags.update(param.opts)
    return flags


class CommandGroup(typer.core.TyperGroup):
    """A command group whose ``--help`` lists its commands in :attr:`order` (the rest by name), wrapped, not cut."""

    order: tuple[str, ...] = ()

    def list_commands(self, ctx: Any) -> list[str]:
        rank = {name: i for i, name in enumerate(self.order)}
        return sorted(super().list_commands(ctx), key=lambda name: (rank.get(name, len(rank)), name))

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class Command(typer.core.TyperCommand):
    """Every ``ceb`` command: an error it lets through is one :func:`fail` line, and its help has panels.

    An option's panel is its ``rich_help_panel``, drawn here without rich (whose markup would eat "[grid]").
    """

    def get_params(self, ctx: Any) -> list[Any]:
        """The command's parameters and, hidden, the :data:`GLOBAL_OPTIONS` of ``ceb`` (the root's declarations)."""
        params = list(super().get_params(ctx))
        root = ctx.find_root().command
        if root is self:
            return params
        for p in root.params:
            if isinstance(p, typer.core.TyperOption) and p.name in GLOBAL_OPTIONS:
                late = [*p.opts, _LATE + p.name]
                params.append(
                    typer.core.TyperOption(
                        param_decls=late, type_descriptor=p.type_descriptor, min=p.min, max=p.max, hidden=True
                    )
                )
        return params

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click.Context
        """Run the command after the global options given after its name; print an unreported error.

        Raises:
            typer.Exit: :data:`EXIT_ERROR` after a :class:`~ceb.errors.CEBError` or ``OSError``, :data:`EXIT_IO`
                after a fault of the machine (:func:`fail`), also from inside exception groups.
        """
        late = {name[len(_LATE) :]: ctx.params.pop(name) for name in list(ctx.params) if name.startswith(_LATE)}
        if any(value is not None for value in late.values()):
            given = ctx.find_root().params | {name: value for name, value in late.items() if value is not None}
            setup_logging(*(given[name] for name in GLOBAL_OPTIONS))
        try:
            return super().invoke(ctx)
        except (CEBError, OSError) as exc:
            raise fail(exc) from exc
        except BaseExceptionGroup as group:  # a task group's errors, e.g. a port in use under anyio
            inner = reported_error(group)
            if inner is None:
                raise
            raise fail(inner) from group

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Parse ``args``, first refusing an empty file or directory (``--out ""`` would mean the current one).

        Raises:
            typer.BadParameter: An option that takes a path is given an empty string (a usage error, exit 2).
        """
        flags = _path_flags(self)
        for i, arg in enumerate(args):
            flag, eq, value = arg.partition("=")
            if (eq and flag in flags and not value) or (arg in flags and i + 1 < len(args) and not args[i + 1]):
                raise typer.BadParameter(f"{flag} is empty; name a file or directory ('.' for the current one)")
        return list(super().parse_args(ctx, args))

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """Write the arguments, the options without a panel, then each panel's options in declaration order."""
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            title = "Arguments" if param.param_type_name == "argument" else "Options"
            sections.setdefault(getattr(param, "rich_help_panel", None) or title, []).append(record)
        for title in sorted(sections, key=lambda t: (t != "Arguments", t != "Options")):  # stable: panels in order
            with formatter.section(title):
                formatter.write_dl(sections[title])
