"""Verbal scores under both readouts on a real model, and hindsight votes read as probabilities.

Two commands:

``table RUN_DIR...``: per run directory (``ceb score`` output) and method, the steps scored, the distinct scores,
the AUROC against the ground-truth labels and the readouts the rows name. For the text readout of a run made under
``readout = "expected"`` it also reads the text score back from each row's reply (the same replies, read as text).

``hindsight STREAM --base-url URL --model NAME --limit N``: the hindsight prompt of each of the first ``N``
trajectories asked once at temperature 0 with ``top_logprobs``; per step, the probability mass on ``1`` against
``0`` at that step's label digit (:func:`ceb.stages.readout.expected_value`), and its AUROC against the
ground-truth labels and class balance at 0.5. With ``--hindsight-rows RUN_DIR`` it also prints the vote
distribution of that run's sampled votes.

``results RUN_DIR... [--boot B]``: issue 23 item 4's results table in Markdown, per run, stream and method: steps
scored, failed and not available, positives, distinct scores, ECE, Brier and AUROC with percentile bootstrap
intervals over trajectories (:func:`ceb.eval.bootstrap.bootstrap_metrics`, ``B`` replicates, seed 0), prompt and
completion tokens per step (every request of the step: re-asks and retries included), and the hindsight
labeller's votes per stream and method (valid 1 / 0, failed, pseudo-labels 1 / 0).

``python benchmarks/readout.py table RUN_DIR...``, ``python benchmarks/readout.py results RUN_DIR...`` or
``python benchmarks/readout.py hindsight STREAM ...``; it prints, and writes no results file.

Measured: the tables in docs/readout.md and docs/real-model.md (commits ``ffef07b`` and ``ff6d8de``), read from run
directories; it writes no results file. A one-question study of the readouts, so it lives in the checkout.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ceb, not another install's

from ceb.backends.base import ChatRequest
from ceb.backends.openai import OpenAIBackend
from ceb.config import BackendConfig
from ceb.data.reader import read_stream
from ceb.eval.bootstrap import Interval, bootstrap_metrics
from ceb.eval.metrics import auroc, summarize
from ceb.pipeline import read_rows
from ceb.pipeline.rundir import RunDir
from ceb.stages.baselines.cot import parse_confidence_line
from ceb.stages.hindsight import hindsight_context, labels_schema
from ceb.stages.parsing import parse_labels, parse_score
from ceb.stages.readout import expected_value
from ceb.stages.templates import PromptSet

_LABELS = re.compile(r'"labels"\s*:\s*\[([^\]]*)\]')
_DIGIT = re.compile(r"[0-9]+")


def _text_score(method: str, row: dict[str, Any]) -> float | None:
    """The text readout's score of a row scored under ``expected`` (the same reply, read as text)."""
    raw = row["raw"] or ""
    if row["readout"] is None:
        score: float | None = row["score"]
        return score
    if method == "verbalized":
        return float(json.loads(raw)["confidence"])
    if method == "cot":
        return parse_confidence_line(raw) / 100.0
    return min(1.0, max(0.0, parse_score(raw)))


def table(run_dirs: list[Path]) -> None:
    """Print, per run directory and method: steps scored, distinct scores, AUROC and the readouts in the rows."""
    print(f"{'run':<16} {'method':<12} {'readout':<9} {'scored':>6} {'distinct':>8} {'auroc':>7}  readouts in rows")
    for run in run_dirs:
        rows = list(read_rows(RunDir(run).scores))
        by_method: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            by_method[r["method"]].append(r)
        for method, rs in sorted(by_method.items()):
            scored = [r for r in rs if r["score"] is not None and r["label"] is not None]
            kinds = Counter(r.get("readout") for r in scored)
            variants = [("as run", [r["score"] for r in scored])]
            if any(k in ("expected", "text_fallback") for k in kinds):
                variants.append(("text*", [_text_score(method, r) for r in scored]))
            for name, scores in variants:
                labels = [r["label"] for r in scored]
                a = auroc(labels, scores) if scores else None
                shown = "-" if a is None else f"{a:.3f}"
                distinct = len({round(s, 6) for s in scores})
                print(f"{run.name:<16} {method:<12} {name:<9} {len(scored):>6} {distinct:>8} {shown:>7}  {dict(kinds)}")


def _cell(value: float | None, interval: Interval | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if interval is None else f"{value:.3f} [{interval.low:.2f}, {interval.high:.2f}]"


def results(run_dirs: list[Path], n_boot: int) -> None:
    """Print the results table and the hindsight votes of each run (Markdown; module docstring)."""
    print(
        "| run | stream | method | scored | failed | n/a | positives | distinct | ECE | Brier | AUROC "
        "| prompt tok/step | completion tok/step |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---|---|---|---:|---:|")
    for run in run_dirs:
        rows = list(read_rows(RunDir(run).scores))
        groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            groups[(r["stream"], r["method"])].append(r)
        for (stream, method), rs in sorted(groups.items()):
            na = sum(r["status"] == "not_available" for r in rs)
            failed = sum(r["status"] == "failed" for r in rs)
            scored = [r for r in rs if r["score"] is not None and r["label"] is not None]
            y = [int(r["label"]) for r in scored]
            p = [float(r["score"]) for r in scored]
            cells = ["-", "-", "-"]
            if scored:
                point = summarize(y, p)
                boot = bootstrap_metrics(y, p, [r["trajectory"] for r in scored], n_boot=n_boot)
                cells = [
                    _cell(point.ece, boot.ece),
                    _cell(point.brier, boot.brier),
                    _cell(point.auroc, boot.auroc),
                ]
            asked = [r for r in rs if r["status"] != "not_available"]
            per_step = [
                sum(r[k] or 0 for r in asked) / max(1, len(asked)) for k in ("prompt_tokens", "completion_tokens")
            ]
            print(
                f"| {run.name} | {stream} | {method} | {len(scored)} | {failed} | {na} | {sum(y)} "
                f"| {len({round(x, 6) for x in p})} | {' | '.join(cells)} | {per_step[0]:.0f} | {per_step[1]:.0f} |"
            )
    print("\n| run | stream | method | votes 1 | votes 0 | failed votes | valid share | pseudo 1 | pseudo 0 |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for run in run_dirs:
        hind: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for h in read_rows(RunDir(run).hindsight):
            hind[(h["stream"], h["method"])].append(h)
        for (stream, method), hs in sorted(hind.items()):
            votes = Counter(v for h in hs for vote in h["votes"] for v in vote)
            pseudo = Counter(x for h in hs for x in h["pseudo_labels"])
            valid, bad = sum(len(h["votes"]) for h in hs), sum(h["failed_votes"] for h in hs)
            print(
                f"| {run.name} | {stream} | {method} | {votes[1]} | {votes[0]} | {bad} "
                f"| {valid / max(1, valid + bad):.2f} | {pseudo[1]} | {pseudo[0]} |"
            )


async def _hindsight(stream: Path, base_url: str, model: str, limit: int, top: int) -> None:
    prompts = PromptSet()
    trajectories = read_stream([stream])[:limit]
    masses: list[float] = []
    labels: list[int] = []
    greedy: list[int] = []
    positions: list[int] = []
    failed = 0
    settings = BackendConfig(base_url=base_url, model=model, timeout_s=600)
    async with OpenAIBackend(settings) as chat:
        for traj in trajectories:
            n = len(traj.steps)
            request = ChatRequest(
                messages=prompts.messages(traj.domain, "hindsight", hindsight_context(traj)),
                temperature=0.0,
                max_tokens=512,
                json_schema=labels_schema(n),
                schema_name="hindsight_labels",
                logprobs=True,
                top_logprobs=top,
                stage="hindsight",
            )
            resp = await chat.complete(request)
            c = resp.completion
            text = c.texts[0]
            tokens = c.logprobs[0] if c.logprobs else None
            try:
                votes = parse_labels(text, n)
                m = _LABELS.search(text)
                assert m is not None and tokens
                spans = [(m.start(1) + d.start(), m.start(1) + d.end()) for d in _DIGIT.finditer(m.group(1))]
            except (ValueError, AssertionError) as exc:
                failed += 1
                print(f"{traj.id}: unreadable ({exc}): {text[:80]!r}")
                continue

            def label_value(number: str) -> float:
                if number not in ("0", "1"):
                    raise ValueError(number)
                return float(number)

            for t, span in enumerate(spans):
                p1 = expected_value(tokens, text, span, label_value).value
                y = traj.steps[t].label
                if y is None:
                    continue
                masses.append(p1)
                labels.append(int(y))
                greedy.append(votes[t])
                positions.append(t)
    a = auroc(labels, masses)
    print(f"trajectories {len(trajectories)}, unreadable {failed}, steps {len(labels)}, positives {sum(labels)}")
    print(f"greedy vote = 1 on {sum(greedy)} of {len(greedy)} steps")
    print(f"P(1) per step: min {min(masses):.3f} median {sorted(masses)[len(masses) // 2]:.3f} max {max(masses):.3f}")
    print(f"AUROC of P(1) against the ground-truth labels: {'-' if a is None else f'{a:.3f}'}")
    # A labeller that only follows the list (later labels surer of 1) would rank steps by position alone.
    by_step = defaultdict(list)
    for t, p in zip(positions, masses, strict=True):
        by_step[t].append(p)
    print("mean P(1) by step index:", {t: round(sum(ps) / len(ps), 3) for t, ps in sorted(by_step.items())})
    first = [y for t, y in zip(positions, labels, strict=True) if t == 0]
    print(
        f"ground truth: first steps {sum(first)} of {len(first)} positive; later steps "
        f"{sum(labels) - sum(first)} of {len(labels) - len(first)}"
    )
    for threshold in (0.5, 0.6, 0.7, 0.8, 0.9):
        ones = sum(p >= threshold for p in masses)
        agree = sum((p >= threshold) == bool(y) for p, y in zip(masses, labels, strict=True))
        print(f"  pseudo-label 1[P(1) >= {threshold}]: {ones} ones / {len(masses)}; agrees with truth on {agree}")


def _votes(run: Path) -> None:
    rows = list(read_rows(RunDir(run).hindsight))
    for method in sorted({r["method"] for r in rows}):
        rs = [r for r in rows if r["method"] == method]
        votes = Counter(v for r in rs for vote in r["votes"] for v in vote)
        pseudo = Counter(p for r in rs for p in r["pseudo_labels"])
        failed = sum(r["failed_votes"] for r in rs)
        valid = sum(len(r["votes"]) for r in rs)
        print(
            f"{run.name} {method}: votes 1={votes[1]} 0={votes[0]} ({votes[1] / max(1, sum(votes.values())):.1%} "
            f"productive); valid votes {valid}, failed {failed}; pseudo-labels 1={pseudo[1]} 0={pseudo[0]}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """``python benchmarks/readout.py``: the ``table`` or ``hindsight`` command (module docstring)."""
    parser = argparse.ArgumentParser(prog="python benchmarks/readout.py", description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("table")
    t.add_argument("runs", nargs="+", type=Path)
    r = sub.add_parser("results")
    r.add_argument("runs", nargs="+", type=Path)
    r.add_argument("--boot", type=int, default=1000, help="bootstrap replicates over trajectories")
    h = sub.add_parser("hindsight")
    h.add_argument("stream", type=Path)
    h.add_argument("--base-url", required=True)
    h.add_argument("--model", required=True)
    h.add_argument("--limit", type=int, default=8)
    h.add_argument("--top-logprobs", type=int, default=20)
    h.add_argument("--hindsight-rows", type=Path, action="append", default=[])
    args = parser.parse_args(argv)
    if args.command == "table":
        table(args.runs)
    elif args.command == "results":
        results(args.runs, args.boot)
    else:
        for run in args.hindsight_rows:
            _votes(run)
        anyio.run(_hindsight, args.stream, args.base_url, args.model, args.limit, args.top_logprobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
