"""Transports: how a chat request reaches a model and comes back. Nothing here knows what a critic is.

:class:`ChatBackend` owns retries, endpoint slots and accounting; :mod:`ceb.backends.openai` speaks the
OpenAI-compatible HTTP API (vLLM's server, OpenAI, Azure) with aiohttp; :mod:`ceb.backends.vllm_engine` runs
vLLM's engine inside this process behind the same request contract; :mod:`ceb.backends.scripted` replays
canned replies for tests; :mod:`ceb.backends.scheduling` holds the priority slots and replica balancing. The
stages built over a transport are assembled in :mod:`ceb.stages.assembly`.
"""

from ceb.backends.base import (
    ChatBackend,
    ChatRequest,
    ChatResponse,
    Completion,
    EndpointLimits,
    RetryPolicy,
    TransientError,
)

__all__ = [
    "ChatBackend",
    "ChatRequest",
    "ChatResponse",
    "Completion",
    "EndpointLimits",
    "RetryPolicy",
    "TransientError",
]
