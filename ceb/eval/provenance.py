"""The report's provenance block ("What scored this run"): ``summary.json``'s record (:mod:`ceb.pipeline.provenance`).

Each model backend's line names the served model id, its root and the weights digest, saying each one missing when
the server did not report it, never filling it in. A run without a recorded provenance shows what its
``config.json`` says. A stream converted from an offline benchmark (``meta.reference_actions``) gets a line on
its observations: by default the page after the human's action, not after the agent's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ceb.data.converters import REFERENCE_ACTIONS, REFERENCE_OBSERVATION
from ceb.errors import CEBError
from ceb.eval.render import Data, Lines, Note, Result
from ceb.pipeline.provenance import OFFLINE_NOTE
from ceb.pipeline.rundir import RunDir

__all__ = ["provenance_block", "recorded_provenance"]

_READOUTS = {
    "text": "the number the reply writes (the paper's)",
    "expected": "the expectation under the reply's top log-probs (G-Eval's weighting)",
}


def recorded_provenance(run: RunDir) -> dict[str, Any] | None:
    """The run's provenance: ``summary.json``'s, else rebuilt from ``config.json``; ``None`` without."""
    try:
        summary = run.recorded_summary()
    except CEBError:
        summary = None
    if summary and isinstance(summary.get("provenance"), dict):
        return {**summary["provenance"], "source": RunDir.SUMMARY}
    try:
        record = run.record()
    except CEBError:
        return None
    config, recorded = run.recorded_or_default()
    if not recorded:
        return None
    return {
        "ceb_version": record.get("ceb_version"),
        "config_sha256": (record.get("fingerprints") or {}).get("config_sha256"),
        "readout": config.critic.readout,
        "endpoints": [
            {
                "role": "critic",
                "critic": label,
                "backend": c.backend.name,
                "endpoint": list(c.backend.base_urls),
                "model": c.backend.served_model or None,
                "structured_output": c.backend.structured_output if c.backend.name != "offline" else None,
            }
            for label, c in config.critic_configs().items()
        ],
        "source": RunDir.CONFIG,
    }


def provenance_block(run: RunDir) -> Result:
    """The provenance block: ``report.md`` lines under the heading "What scored this run", ``provenance`` in JSON."""
    record = recorded_provenance(run)
    data = Data("provenance", record)
    if record is None:
        return Result((data, Note(f"Not recorded: the run has no readable {RunDir.SUMMARY} or {RunDir.CONFIG}.")))
    lines = [f"- {_entry(e, record.get('source'))}" for e in record.get("endpoints") or []]
    readout = record.get("readout")
    if any(e.get("model") for e in record.get("endpoints") or []):
        lines.append(f"- Readout: `{readout}`, {_READOUTS.get(str(readout), 'as configured')} (`critic.readout`).")
    lines.append(
        f"- ceb {record.get('ceb_version') or 'version not recorded'}; configuration digest "
        f"`{record.get('config_sha256') or 'not recorded'}` (`{RunDir.CONFIG}` `fingerprints.config_sha256`)."
    )
    lines += _label_lines(record)
    lines += _observation_lines(run)
    if record.get("source") == RunDir.CONFIG:
        lines.append(
            f"- Read from `{RunDir.CONFIG}`: this run's {RunDir.SUMMARY} records no provenance (an older ceb, or a "
            "run that did not end), so what the server reported of its model and what ceb adapted are unknown."
        )
    return Result((data, Lines((*lines, ""))))


def _observation_lines(run: RunDir) -> list[str]:
    """A line per stream converted from an offline benchmark (Mind2Web, AMEX): what its observations are."""
    streams, _ = run.recorded_trajectories()
    said = {}
    for stream, trajectories in streams.items():
        if not any(REFERENCE_ACTIONS in t.meta for t in trajectories):
            continue
        observations = [s.observation for t in trajectories for s in t.steps]
        if any(o.startswith(REFERENCE_OBSERVATION) for o in observations):
            said[stream] = "the human's recorded action (`--observation reference`): it shows the reference answer"
        elif any(observations):
            said[stream] = "the page after the human's action, not after the agent's (`--observation next-state`)"
    return [
        f"- Observations of stream `{stream}`: {what}. The benchmark is offline: nothing the agent did was executed."
        for stream, what in said.items()
    ]


def _label_lines(record: Mapping[str, Any]) -> list[str]:
    """A line per stream whose step labels are not the dataset's (``ceb label``'s judge), saying what they are."""
    return [
        f"- Labels of stream `{stream}`: `{source}`, a judge model's step labels (`ceb label`), not ground truth: "
        "ECE, Brier and AUROC on this stream measure agreement with that judge."
        for stream, source in (record.get("labels") or {}).items()
    ]


def _entry(e: Mapping[str, Any], source: object) -> str:
    """One backend of the record, in words."""
    role = {"critic": "Critic", "hindsight": "Hindsight labeller", "actor": "Actor"}.get(str(e.get("role")), "Model")
    who = f"{role} `{e['critic']}`" if e.get("critic") else role
    if not e.get("model"):
        return f"{who}: `{e.get('backend')}`, {e.get('note') or OFFLINE_NOTE}. These numbers measure no model."
    text = f"{who}: `{e.get('backend')}`, model `{e['model']}`"
    if e.get("endpoint"):
        text += " at " + ", ".join(f"`{u}`" for u in e["endpoint"])
    unknown = "not recorded" if source == RunDir.CONFIG else "missing: the server did not report it"
    root = f"weights `{e['root']}` (its root)" if e.get("root") is not None else f"root {unknown}"
    if e.get("weights_digest") is not None:
        digest = f"weights digest `{e['weights_digest']}`"
    elif e.get("root") is not None:
        digest = "weights digest missing: the root is not a directory on this machine"
    else:
        digest = "weights digest not recorded" if source == RunDir.CONFIG else "weights digest missing: no root"
    served = [f"served model id `{e['model']}`", root, digest]
    served += [
        f"{name} `{e[key]}`"
        for key, name in (("server_version", "server version"), ("max_model_len", "context"))
        if e.get(key) is not None
    ]
    replied = [m for m in e.get("replied_models") or [] if m != e["model"]]
    if replied:
        served.append("replies name " + ", ".join(f"`{m}`" for m in replied))
    if e.get("identity_error"):
        served.append(f"the server could not be asked which model it serves ({e['identity_error']})")
    text += f" ({'; '.join(served)})"
    sent = [f"structured output `{e['structured_output']}`"] if e.get("structured_output") else []
    sent += [f"token field `{e['token_limit_field']}`"] if e.get("token_limit_field") else []
    if sent:
        text += "; " + ", ".join(sent)
    adapted = e.get("adaptations") or {}
    text += ("; ceb adapted to the endpoint: " + "; ".join(adapted.values())) if adapted else "; no adaptation"
    return text + "."
