"""How each reading of the repetition flag ``rho_t`` fires, per stream (issue 32 item 3).

The paper (section 3.3) sets ``rho_t = 1[a_t matches the prefix of any action in a_{t-3:t-1}]``. For each reading
of "matches the prefix" (``ceb.repetition_reading``) and each stream this prints:

- ``fires``: the share of steps the flag is raised on;
- ``repeats``: the share of those firings whose action is an exact repeat of, a prefix of, or prefixed by one of
  the last 3 actions (both folded: white space collapsed, case folded), the label-free check of what the flag
  says to the critic ("this action repeats one of the last few");
- ``exact``: the share of firings that are an exact repeat (folded);
- ``AUROC``: the flag alone as a score (1 - rho_t) against the ground-truth step labels (scikit-learn's
  ``roc_auc_score``). It is reported, not used to choose: the default is the reading whose firings are at least
  80% repeats on EVERY InterCode-Bash stream (``CRITERION``), closest to the paper's words among those.

Streams: the seven InterCode-Bash streams, converted from ``--intercode`` (an InterCode checkout, as ``ceb convert
intercode`` reads it), and the Mind2Web and AMEX test fixtures (``tests/fixtures``), converted as the tests do.

    python benchmarks/repetition_flag.py --intercode ../shared/data/intercode

writes ``benchmarks/results/repetition-flag-<UTC stamp>.json`` and prints the tables (markdown) docs/design.md
quotes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sklearn.metrics import roc_auc_score

from ceb.bench.machine import machine_info
from ceb.bench.result_files import save_results
from ceb.config import RepetitionReading
from ceb.data.amex import convert_amex
from ceb.data.intercode import convert_intercode
from ceb.data.mind2web import convert_mind2web
from ceb.data.reader import read_stream
from ceb.data.trajectory import Trajectory
from ceb.stages.critic import actions_match, normalize_action, repetition_flag

WINDOW = 3
"""The paper's window: the last 3 actions."""

CRITERION = 0.8
"""Least share of a reading's firings that must be repeats on every InterCode-Bash stream to be the default."""

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


@dataclass(frozen=True)
class Reading:
    """One reading of "matches the prefix", with its parameter."""

    name: str
    reading: RepetitionReading
    prefix_chars: int = 40
    prefix_fraction: float = 0.9


READINGS = (
    Reading("chars (40)", "chars", prefix_chars=40),
    Reading("exact", "exact"),
    Reading("prefix", "prefix"),
    Reading("relative (0.9)", "relative", prefix_fraction=0.9),
    Reading("relative (0.8)", "relative", prefix_fraction=0.8),
)


def measure(trajectories: Sequence[Trajectory], r: Reading) -> dict[str, Any]:
    """The figures of one reading on one stream (see the module docstring)."""
    steps = fired = repeats = exact = 0
    labels: list[int] = []
    scores: list[float] = []
    for traj in trajectories:
        actions = [s.action for s in traj.steps]
        for t, step in enumerate(traj.steps):
            previous = actions[max(0, t - WINDOW) : t]
            rho = repetition_flag(
                previous,
                step.action,
                window=WINDOW,
                reading=r.reading,
                prefix_chars=r.prefix_chars,
                prefix_fraction=r.prefix_fraction,
            )
            steps += 1
            if rho:
                fired += 1
                a = normalize_action(step.action)
                folded = [normalize_action(p) for p in previous]
                repeats += any(actions_match(a, p, reading="prefix") for p in folded)
                exact += any(a == p for p in folded)
            if step.label is not None:
                labels.append(step.label)
                scores.append(0.0 if rho else 1.0)
    auroc = float(roc_auc_score(labels, scores)) if len(set(labels)) == 2 else None
    return {
        "reading": r.name,
        "steps": steps,
        "labelled": len(labels),
        "fires": fired / steps if steps else 0.0,
        "fired": fired,
        "repeats": repeats / fired if fired else None,
        "exact": exact / fired if fired else None,
        "auroc": auroc,
    }


def head_only(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """The labelled steps the old ``chars (40)`` reading flags and ``prefix`` does not, against all labelled steps.

    A step there shares its first 40 folded characters with a recent action without repeating it; its positive
    rate says what the old reading's higher AUROC rests on.
    """
    n = positive = total = total_positive = 0
    for traj in trajectories:
        actions = [s.action for s in traj.steps]
        for t, step in enumerate(traj.steps):
            if step.label is None:
                continue
            previous = actions[max(0, t - WINDOW) : t]
            total += 1
            total_positive += step.label
            old = repetition_flag(previous, step.action, window=WINDOW, reading="chars", prefix_chars=40)
            if old and not repetition_flag(previous, step.action, window=WINDOW, reading="prefix"):
                n += 1
                positive += step.label
    return {
        "steps": n,
        "positive_rate": positive / n if n else None,
        "labelled": total,
        "positive_rate_all": total_positive / total if total else None,
    }


def _streams(intercode: Path, work: Path) -> dict[str, list[Trajectory]]:
    """Stream name -> trajectories: the InterCode-Bash streams, then the web and mobile fixtures."""
    out: dict[str, list[Trajectory]] = {}
    for s in sorted(convert_intercode(intercode, work / "intercode", datasets=("bash",)), key=lambda s: s.actor):
        out[f"bash/{s.actor}"] = read_stream([s.path])
    out["bash/pooled"] = [t for name, trajs in out.items() for t in trajs]
    m2w = FIXTURES / "mind2web"
    for s in convert_mind2web(m2w, m2w / "predictions.jsonl", work / "mind2web"):
        out[f"mind2web fixture/{s.actor}"] = read_stream([s.path])
    amex = FIXTURES / "amex"
    for s in convert_amex(amex / "instruction_anno", amex / "predictions.jsonl", work / "amex"):
        out[f"amex fixture/{s.actor}"] = read_stream([s.path])
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The markdown table docs/design.md quotes: one row per (stream, reading)."""
    lines = [
        "| stream | steps | reading | fires | repeats (exact or prefix) | exact | flag-alone AUROC |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        auroc = "n/a" if r["auroc"] is None else f"{r['auroc']:.3f}"
        lines.append(
            f"| {r['stream']} | {r['steps']:,} | {r['reading']} | {_pct(r['fires'])} | {_pct(r['repeats'])} "
            f"| {_pct(r['exact'])} | {auroc} |"
        )
    return "\n".join(lines)


def meets_criterion(rows: Sequence[dict[str, Any]]) -> dict[str, bool]:
    """Reading -> whether at least ``CRITERION`` of its firings are repeats on every bash stream (labels unread)."""
    out: dict[str, bool] = {}
    for r in READINGS:
        bash = [row for row in rows if row["reading"] == r.name and row["stream"].startswith("bash/")]
        bash = [row for row in bash if row["stream"] != "bash/pooled"]
        out[r.name] = bool(bash) and all(row["repeats"] is None or row["repeats"] >= CRITERION for row in bash)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--intercode",
        type=Path,
        default=os.environ.get("CEB_INTERCODE_ROOT"),
        help="InterCode checkout (data/results/bash/...); default $CEB_INTERCODE_ROOT",
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="results folder")
    args = parser.parse_args(argv)
    if args.intercode is None:
        parser.error("--intercode is required (or set CEB_INTERCODE_ROOT)")
    with tempfile.TemporaryDirectory() as tmp:
        streams = _streams(args.intercode, Path(tmp))
    rows = [{"stream": name, **measure(trajs, r)} for name, trajs in streams.items() for r in READINGS]
    meets = meets_criterion(rows)
    shared_head = head_only(streams["bash/pooled"])
    print(table(rows))
    print()
    print(
        f"Pooled bash, flagged by chars (40) and not by prefix: {shared_head['steps']:,} labelled steps, "
        f"positive rate {_pct(shared_head['positive_rate'])} (all {shared_head['labelled']:,} labelled steps: "
        f"{_pct(shared_head['positive_rate_all'])})."
    )
    print()
    print(f"At least {CRITERION:.0%} of firings are repeats on every bash stream:")
    for name, ok in meets.items():
        print(f"- {name}: {'yes' if ok else 'no'}")
    doc = {
        "benchmark": "repetition-flag",
        "machine": machine_info(),
        "settings": {"intercode": str(args.intercode), "window": WINDOW, "criterion": CRITERION},
        "readings": [r.__dict__ for r in READINGS],
        "rows": rows,
        "meets_criterion": meets,
        "chars40_not_prefix_pooled_bash": shared_head,
    }
    print(f"\nwritten: {save_results(args.out, 'repetition-flag', doc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
