"""The ``offline`` backend: no language model; a run scores with the stand-ins of :mod:`ceb.stages.offline`."""

from __future__ import annotations

from ceb.backends.base import register_backend
from ceb.backends.transport import Transport
from ceb.config import BackendConfig
from ceb.errors import ConfigError

__all__ = ["open_offline"]


@register_backend("offline")
def open_offline(settings: BackendConfig) -> Transport | None:
    """No transport; :class:`~ceb.errors.ConfigError` when ``settings.model`` names a model (that needs an endpoint)."""
    if settings.model:
        raise ConfigError(
            f"model {settings.model!r} names a model but no endpoint: give base_url (--base-url) for an "
            "OpenAI-compatible server, or the backend 'vllm' (--backend vllm) for an engine in this process"
        )
    return None
