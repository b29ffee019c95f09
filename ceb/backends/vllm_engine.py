"""The ``vllm`` transport: vLLM's engine (``AsyncLLM``) inside ceb's process, with no HTTP server.

It runs the code ``vllm serve`` runs, minus the HTTP: the ``backend.engine`` settings become ``vllm serve`` flags
(:func:`engine_argv`) parsed by vLLM's own parser and started with ``build_async_engine_client``; the serving objects
come from the server's ``init_app_state``; each request is the HTTP transport's body
(:func:`~ceb.backends._wire.chat_body`) validated into ``ChatCompletionRequest`` for
``OpenAIServingChat.create_chat_completion``, and the reply is read by the same
:func:`~ceb.backends._wire.parse_completion`. So the chat template, structured outputs, ``n``, log-probabilities and
seeds behave exactly as over HTTP.

vLLM's ``priority`` is lower-first and read only under ``--scheduling-policy priority``; there ceb's priority is sent as
:func:`~ceb.backends.scheduling.server_priority`, else 0. vLLM's engine core may start with ``spawn``, which re-imports
the main module: a script building this backend needs an ``if __name__ == "__main__":`` guard. vLLM reads its
environment (``VLLM_TARGET_DEVICE``, ``HF_HUB_OFFLINE``...) at import.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from ceb.backends._wire import chat_body, parse_completion
from ceb.backends.base import register_backend
from ceb.backends.openai import request_id
from ceb.backends.scheduling import current_lane, current_priority, server_priority
from ceb.backends.transport import ChatRequest, Completion, ModelIdentity, TransientError, Transport, weights_digest
from ceb.config import BackendConfig
from ceb.errors import BackendError, ConfigError, FatalBackendError

__all__ = ["VLLMEngineTransport", "engine_argv", "open_engine", "require_vllm", "settings_args", "vllm_priority"]

INSTALL_HINT = (
    "install ceb into vLLM's environment: <vllm-venv>/bin/pip install --no-deps -e <ceb checkout>, then the ceb "
    "dependencies it lacks (.ci/install-vllm does both)"
)
"""How to make vLLM importable next to ceb (the docs' "Serving" says why not ``pip install -e '.[vllm]'``)."""


_FLAGS = (
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "dtype",
    "max_model_len",
    "load_format",
    "seed",
    "max_logprobs",
    "scheduling_policy",
)


def engine_argv(settings: BackendConfig) -> list[str]:
    """The ``vllm serve`` words (no program name) that build the engine of ``settings``; ``None`` flags are left out.

    Returns:
        ``["--model", PATH, "--served-model-name", NAME, "--tensor-parallel-size", "2", ...]`` then ``engine.args``
            (:func:`settings_args`).
    """
    engine = settings.engine
    argv = ["--model", settings.model or "", "--served-model-name", settings.served_model]
    for name in _FLAGS:
        value = getattr(engine, name)
        if value is not None:
            argv += ["--" + name.replace("_", "-"), str(value)]
    if engine.enable_prefix_caching is not None:
        argv.append("--enable-prefix-caching" if engine.enable_prefix_caching else "--no-enable-prefix-caching")
    return [*argv, *settings_args(engine.args)]


def vllm_priority(ceb_priority: float, policy: str) -> int:
    """The ``priority`` vLLM reads: :func:`~ceb.backends.scheduling.server_priority` under ``priority``, else 0."""
    return server_priority(ceb_priority) if policy == "priority" else 0


def require_vllm() -> None:
    """Raise :class:`~ceb.errors.ConfigError`, saying how to install it, where vLLM cannot be imported."""
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(f"backend 'vllm' needs vLLM in ceb's environment, and it is not installed; {INSTALL_HINT}")


@dataclass
class _Engine:
    """A started engine and the server's chat handler over it."""

    stack: contextlib.AsyncExitStack
    chat: Any  # vllm.entrypoints.openai.chat_completion.serving.OpenAIServingChat
    request_type: Any  # vllm.entrypoints.openai.chat_completion.protocol.ChatCompletionRequest
    error_type: Any  # vllm.entrypoints.serve.engine.protocol.ErrorResponse
    policy: str
    start_s: float
    refused: tuple[type[Exception], ...] = (ValueError, TypeError)
    """Exceptions meaning vLLM refused the request (a 400 over HTTP)."""
    dead: tuple[type[Exception], ...] = ()
    """Exceptions meaning the engine is gone."""


class VLLMEngineTransport(Transport):
    """Chat completions from a vLLM engine in this process, started on first use in the running asyncio loop.

    Args:
        settings: The ``backend`` section: ``model`` (directory or hub name), the ``engine`` flags and
            ``structured_output``.

    Raises:
        ConfigError: ``settings.model`` is not set.
    """

    name = "vllm"

    def __init__(self, settings: BackendConfig) -> None:
        if not settings.model:
            raise ConfigError("the vllm backend needs backend.model, the model directory or hub name (--model)")
        super().__init__(f"vllm-engine:{settings.served_model}")
        self.settings = settings
        self._engine: _Engine | None = None
        self._starting = anyio.Lock()

    @property
    def engine(self) -> Any:
        """The running ``AsyncLLM``; :class:`RuntimeError` before :meth:`start`."""
        if self._engine is None:
            raise RuntimeError("the engine is not started")
        return self._engine.chat.engine_client

    @property
    def start_s(self) -> float | None:
        """Seconds the engine took to start (``None`` before)."""
        return None if self._engine is None else self._engine.start_s

    async def start(self) -> None:
        """Build and start the engine and the server's chat handler, once.

        Raises:
            ConfigError: vLLM is missing or refused the settings.
            FatalBackendError: The engine failed to start (no device, out of memory, a bad model directory).
        """
        async with self._starting:
            if self._engine is None:
                self._engine = await self._build()

    async def _build(self) -> _Engine:
        require_vllm()
        import time

        from pydantic import ValidationError
        from starlette.datastructures import State
        from vllm.entrypoints.launchers.api_server.app_state import init_app_state
        from vllm.entrypoints.launchers.api_server.entry import build_async_engine_client
        from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.entrypoints.serve.engine.protocol import ErrorResponse
        from vllm.exceptions import VLLMClientError
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        from vllm.v1.engine.exceptions import EngineDeadError

        started = time.perf_counter()
        parser = make_arg_parser(FlexibleArgumentParser(prog="ceb --backend vllm"))
        try:
            args = parser.parse_args(engine_argv(self.settings))
            validate_parsed_serve_args(args)
        except (SystemExit, ValueError, TypeError) as exc:
            raise ConfigError(f"vLLM refused the engine settings {engine_argv(self.settings)}: {exc}") from exc
        stack = contextlib.AsyncExitStack()
        try:
            engine = await stack.enter_async_context(build_async_engine_client(args))
            state = State()
            await init_app_state(engine, state, args, await engine.get_supported_tasks())
        except BaseException as exc:
            await stack.aclose()
            if isinstance(exc, Exception):
                raise FatalBackendError(f"the vLLM engine did not start: {exc}", backend=self.label) from exc
            raise
        chat = state.openai_serving_chat
        if chat is None:
            await stack.aclose()
            raise FatalBackendError(f"model {self.settings.model!r} cannot generate text", backend=self.label)
        policy = str(engine.vllm_config.scheduler_config.policy)
        # pydantic's ValidationError is a ValueError; vLLM's own request checks raise ValueError as well.
        refused = (ValidationError, VLLMClientError, ValueError, TypeError)
        return _Engine(
            stack,
            chat,
            ChatCompletionRequest,
            ErrorResponse,
            policy,
            time.perf_counter() - started,
            refused=refused,
            dead=(EngineDeadError,),
        )

    def body(self, request: ChatRequest, policy: str = "fcfs") -> dict[str, Any]:
        """The body for vLLM's chat handler: :func:`~ceb.backends._wire.chat_body`, ``request_id``, ``priority``.

        Raises:
            ValueError: ``request.extra`` repeats a field the request sets.
        """
        body = chat_body(request, model=self.settings.served_model, structured_output=self.settings.structured_output)
        body.setdefault("priority", vllm_priority(current_priority(), policy))
        body.setdefault("request_id", request_id(request.stage, current_lane()))
        return body

    async def send(self, request: ChatRequest, endpoint: str) -> Completion:
        """Run one attempt of ``request`` through the engine.

        Raises:
            BackendError: vLLM refused the request (a 4xx over HTTP).
            TransientError: A 5xx-class failure of one generation.
            FatalBackendError: The engine died or did not start.
            ConfigError: vLLM is missing or refused the engine settings.
            ValueError: ``request.extra`` repeats a field the request sets.
        """
        if self._engine is None:
            await self.start()
        assert self._engine is not None
        eng = self._engine
        body = self.body(request, eng.policy)  # a ValueError here is ours (extra repeats a field): not caught
        try:
            reply = await eng.chat.create_chat_completion(eng.request_type.model_validate(body), None)
        except eng.dead as exc:
            raise FatalBackendError(f"the vLLM engine died: {exc}", backend=self.label) from exc
        except eng.refused as exc:
            raise BackendError(f"vLLM refused the request: {exc}", backend=self.label) from exc
        except Exception as exc:
            raise TransientError(f"vLLM generation failed: {type(exc).__name__}: {exc}") from exc
        if isinstance(reply, eng.error_type):
            code, message = reply.error.code, reply.error.message
            if code >= 500 or code == 429:
                raise TransientError(f"{code} from the engine: {message}")
            raise BackendError(f"{code} from the engine: {message}", backend=self.label)
        return parse_completion(
            reply.model_dump(mode="json"),
            default_model=self.settings.served_model,
            asked_prompt_logprobs=request.extra.get("prompt_logprobs"),
        )

    async def identify(self) -> ModelIdentity:
        """The served name, model path, vLLM's version and the weights' digest."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            vllm_version: str | None = version("vllm")
        except PackageNotFoundError:
            vllm_version = None
        model = self.settings.model or ""
        length = self.settings.engine.max_model_len
        return ModelIdentity(self.settings.served_model, model, vllm_version, length, weights_digest(model))

    def describe(self) -> dict[str, Any]:
        """The base record with the model and the structured-output mode."""
        return super().describe() | {
            "model": self.settings.served_model,
            "structured_output": self.settings.structured_output,
        }

    async def preflight(self) -> None:
        """:meth:`start` the engine before the run (about 30 s for the tests' tiny model on 2 CPU cores)."""
        await self.start()

    async def aclose(self) -> None:
        """Stop the engine and its core process; a later request starts a new one."""
        eng, self._engine = self._engine, None
        if eng is not None:
            await eng.stack.aclose()  # AsyncLLM.shutdown(): the engine core process stops here
            # vLLM 0.32's serving objects keep the AsyncLLM alive until exit, where __del__ calls shutdown() again
            # with module globals gone and prints an ignored TypeError: that second call is made a no-op.
            eng.chat.engine_client.shutdown = _already_shut_down


def _already_shut_down(timeout: float | None = None) -> None:
    """Stands in for ``AsyncLLM.shutdown`` once the engine is stopped."""


def settings_args(raw: Sequence[str] | Mapping[str, Any] | None) -> tuple[str, ...]:
    """Further ``vllm serve`` flags as words, from a list of words or a table ``{flag: value}``.

    In a table ``True`` is a bare flag, ``False`` its ``--no-`` form, a mapping or list is JSON, anything else text;
    keys may use ``_``.
    """
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        return tuple(str(w) for w in raw)
    words: list[str] = []
    for key, value in raw.items():
        flag = "--" + str(key).lstrip("-").replace("_", "-")
        if value is True:
            words.append(flag)
        elif value is False:
            words.append("--no-" + flag[2:])
        elif isinstance(value, Mapping | list | tuple):
            words += [flag, json.dumps(value)]
        else:
            words += [flag, str(value)]
    return tuple(words)


@register_backend("vllm")
def open_engine(settings: BackendConfig) -> VLLMEngineTransport:
    """The ``vllm`` backend; :class:`~ceb.errors.ConfigError` without ``backend.model`` or without vLLM installed."""
    transport = VLLMEngineTransport(settings)  # refuses a missing model before the missing vLLM
    require_vllm()
    return transport
