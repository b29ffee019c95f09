"""Backends: how a chat request reaches a model and comes back. Nothing here knows what a critic is.

A provider is a :class:`Transport` (one attempt of one request): :mod:`ceb.backends.openai` speaks the
OpenAI-compatible HTTP API (vLLM's server, OpenAI, Azure) with aiohttp; :mod:`ceb.backends.vllm_engine` runs
vLLM's engine inside this process behind the same request contract; :mod:`ceb.backends.batch` answers from Batch
replies; :mod:`ceb.backends.scripted` replays canned replies for tests; :mod:`ceb.backends.offline` is the backend
without a model. :class:`ChatBackend`, the one client the stages call, owns the policy around any transport: the
reply cache (:mod:`ceb.backends.cache`), retries, routing, and the priority slots of :mod:`ceb.backends.scheduling`.
The stages built over a backend are assembled in :mod:`ceb.stages.assembly`.

Each provider module registers a factory in :data:`BACKENDS` (:func:`register_backend`) that builds its transport
straight from the run's ``backend`` section (:class:`~ceb.config.BackendConfig`); :func:`open_backend` is the
one way a run, the gate, ``ceb doctor`` and the actor endpoint open one, wrapping the transport in the client.
Adding a backend is its module (a :class:`Transport` subclass and a registered factory;
``tests/backends/test_new_provider.py`` is one) plus, when it needs settings of its own, a field of that section.
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
