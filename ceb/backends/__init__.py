"""Backends: how a chat request reaches a model and comes back. Nothing here knows what a critic is.

A provider is a :class:`Transport` (one attempt of one request): :mod:`~ceb.backends.openai` (OpenAI-compatible HTTP:
vLLM's server, OpenAI, Azure), :mod:`~ceb.backends.vllm_engine` (vLLM's engine in this process),
:mod:`~ceb.backends.batch` (Batch replies), :mod:`~ceb.backends.scripted` (tests) and :mod:`~ceb.backends.offline` (no
model). :class:`ChatBackend` wraps any transport in the shared policy: reply cache, retries, routing and priority slots.
Each provider module registers a factory in :data:`BACKENDS`; :func:`open_backend` is the one way to open one.
"""

from ceb.backends.base import (
    BACKENDS,
    ChatBackend,
    ChatRequest,
    ChatResponse,
    Completion,
    EndpointLimits,
    RetryPolicy,
    TransientError,
    Transport,
    open_backend,
    register_backend,
)

__all__ = [
    "BACKENDS",
    "ChatBackend",
    "ChatRequest",
    "ChatResponse",
    "Completion",
    "EndpointLimits",
    "RetryPolicy",
    "TransientError",
    "Transport",
    "open_backend",
    "register_backend",
]
