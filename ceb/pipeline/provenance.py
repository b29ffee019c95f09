"""What scored a run: ``summary.json``'s ``provenance``, the report's header and last line.

The record holds ceb's version, ``fingerprints.config_sha256`` (:func:`~ceb.pipeline.resume.config_fingerprint`),
the critic's readout and one entry per backend asked (critic per label, labeller, actor): ``role``, ``critic``,
``backend``, ``endpoint`` (without credentials), ``model``, the server's
:class:`~ceb.backends.transport.ModelIdentity` (or ``identity_error``), ``structured_output``,
``token_limit_field`` and ``adaptations`` (what ceb changed to be answered). An offline run has one ``offline``
entry. ``labels``: stream -> label source, when not the dataset's (``judge:<model>``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ceb.backends.base import ChatBackend, TransientError
from ceb.config import RunConfig
from ceb.errors import BackendError, RunError
from ceb.logs import get_logger
from ceb.stages.base import Stages
from ceb.version import __version__

__all__ = ["IDENTITY_FIELDS", "OFFLINE_NOTE", "identify", "merge_provenance", "provenance", "scored_by"]

log = get_logger(__name__)

IDENTITY_FIELDS = ("root", "server_version", "max_model_len", "weights_digest")
"""What a server reports of its model, recorded per backend (:class:`~ceb.backends.transport.ModelIdentity`)."""

OFFLINE_NOTE = "no language model: the model-free stand-ins of ceb.stages.offline scored every step"

_AGREE = ("backend", "model", *IDENTITY_FIELDS, "structured_output")
"""What the parts of a merged run must have in common for each backend: the model and how it was asked."""


async def identify(stages: Iterable[Stages]) -> dict[int, dict[str, Any]]:
    """``id(backend)`` -> what each distinct backend of ``stages`` says it serves (:meth:`ChatBackend.identify`).

    A server that cannot say gives ``{"identity_error": reason}``; never raises for it.
    """
    found: dict[int, dict[str, Any]] = {}
    for s in stages:
        for _, backend in s.asked():
            if id(backend) in found:
                continue
            try:
                identity = await backend.identify()
            except (TransientError, BackendError) as exc:
                log.warning("cannot ask the endpoint which model it serves", backend=backend.label, error=str(exc))
                found[id(backend)] = {"identity_error": str(exc)}
                continue
            fields = identity.to_dict() if identity is not None else {}
            found[id(backend)] = {k: v for k, v in fields.items() if k in IDENTITY_FIELDS}
    return found


def provenance(
    config: RunConfig,
    stages: Mapping[str, Stages],
    identities: Mapping[int, Mapping[str, Any]],
    config_sha256: str,
    label_sources: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The run's provenance record (module docstring), read from its backends at the end of the run.

    ``identities`` is :func:`identify`'s result; ``label_sources`` (:func:`ceb.pipeline.label.label_sources`) is
    recorded as ``labels`` when not empty.
    """
    entries: list[dict[str, Any]] = []
    for label, s in stages.items():
        asked = s.asked()
        if not any(role == "critic" for role, _ in asked):
            entries.append(_offline(label, config))
        entries += [_entry(role, label, backend, identities.get(id(backend), {})) for role, backend in asked]
    record: dict[str, Any] = {
        "ceb_version": __version__,
        "config_sha256": config_sha256,
        "readout": config.critic.readout,
        "endpoints": entries,
    }
    return record | ({"labels": dict(label_sources)} if label_sources else {})


def _offline(label: str, config: RunConfig) -> dict[str, Any]:
    return {
        "role": "critic",
        "critic": label,
        "backend": config.critic_configs()[label].backend.name,
        "endpoint": [],
        "model": None,
        "note": OFFLINE_NOTE,
    }


def _entry(role: str, label: str, backend: ChatBackend, identity: Mapping[str, Any]) -> dict[str, Any]:
    record = backend.describe()
    head = {"role": role, "critic": label, "backend": record.pop("backend"), "endpoint": record.pop("endpoint")}
    return head | {"model": record.pop("model")} | dict(identity) | record


def scored_by(record: Mapping[str, Any] | None) -> str:
    """One line naming what scored the run: each critic's backend, model and endpoint, and the readout."""
    if not record:
        return "scored by: not recorded (a run of a ceb without provenance)"
    parts = []
    for e in record.get("endpoints") or []:
        if e.get("role") != "critic":
            continue
        who = f"critic {e['critic']}: " if e.get("critic") else ""
        if not e.get("model"):
            parts.append(f"{who}{e.get('backend')} ({OFFLINE_NOTE})")
            continue
        server = f", server {e['server_version']}" if e.get("server_version") else ""
        where = f" at {','.join(e['endpoint'])}" if e.get("endpoint") else ""
        parts.append(f"{who}{e.get('backend')}, model {e['model']!r}{where}{server}")
    models = any(e.get("model") for e in record.get("endpoints") or [])
    return f"scored by: {'; '.join(parts)}" + (f"; readout {record.get('readout')}" if models else "")


def merge_provenance(parts: Sequence[tuple[str, Mapping[str, Any] | None]]) -> dict[str, Any] | None:
    """The provenance of a run merged from ``parts``: the first part's, with every endpoint and adaptation joined.

    Raises:
        RunError: A part's backends differ in one of :data:`_AGREE`, or only some parts recorded one.
    """
    (first_name, first), *rest = parts
    if first is None:
        if any(p is not None for _, p in rest):
            raise RunError(f"part {first_name} recorded no provenance, and other parts did: they are not one run")
        return None
    merged = {**first, "endpoints": [dict(e) for e in first.get("endpoints") or []]}
    for name, record in rest:
        if record is None:
            raise RunError(f"part {name} recorded no provenance, and part {first_name} did: they are not one run")
        mine = record.get("endpoints") or []
        if len(mine) != len(merged["endpoints"]):
            raise RunError(f"part {name} asked {len(mine)} backends, part {first_name} {len(merged['endpoints'])}")
        for into, e in zip(merged["endpoints"], mine, strict=True):
            for key in _AGREE:
                if into.get(key) != e.get(key):
                    raise RunError(
                        f"part {name} was scored by another model than part {first_name}: {e.get('role')} "
                        f"{key} {e.get(key)!r}, not {into.get(key)!r}"
                    )
            into["endpoint"] = list(dict.fromkeys([*into.get("endpoint", []), *e.get("endpoint", [])]))
            if "adaptations" in into or "adaptations" in e:
                into["adaptations"] = {**e.get("adaptations", {}), **into.get("adaptations", {})}
    return merged
