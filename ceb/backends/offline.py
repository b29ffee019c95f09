"""The ``offline`` backend: no language model at all, the embedded default.

It opens no transport; a run on it scores with the model-free stand-ins of :mod:`ceb.stages.offline`, and every
method that needs an LLM endpoint reports its steps as not available. It runs only when nothing names an endpoint
or a model (:class:`~ceb.config.BackendConfig`).
"""

from __future__ import annotations

from ceb.backends.base import register_backend
from ceb.backends.transport import Transport
from ceb.config import BackendConfig
from ceb.errors import ConfigError

__all__ = ["open_offline"]


@register_backend("offline")
def open_offline(settings: BackendConfig) -> Transport | None:
    """No transport: ``None`` (the stages fall back to the offline stand-ins).

    Raises:
        ConfigError: ``settings.model`` names a model: a run that names one must not be scored with no model
            (issue 32); it needs an endpoint (``base_url``, which selects ``openai``) or the ``vllm`` backend.
    """
    if settings.model:
        raise ConfigError(
            f"model {settings.model!r} names a model but no endpoint: give base_url (--base-url) for an "
            "OpenAI-compatible server, or the backend 'vllm' (--backend vllm) for an engine in this process"
        )
    return None
