"""Bank benchmark: incremental TF-IDF kernel vs the scikit-learn refit reference on real InterCode-SQL keys.

    .venv/bin/python benchmarks/bench_bank.py --sizes 1000 10000 100000 --queries 200 --out benchmarks/results/

Prints a Markdown table and writes ``bank-<UTC timestamp>.json`` (figures, settings, how keys were made, and the
machine) into ``--out``. See ``ceb/bench/bank.py`` for what each figure measures.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import orjson

from ceb.bench import machine_info
from ceb.bench.bank import REPLAY_RULE, format_table, load_sql_trajectories, run_size
from ceb.logs import configure_logging

REPO = Path(__file__).resolve().parents[1]
DEFAULT_INTERCODE = Path(os.environ.get("CEB_SHARED", REPO.parent / "shared")) / "data" / "intercode"
TARGETS = "query p50 <= 1 ms at 10k and <= 10 ms at 100k; update >= 50x faster than refit-per-trajectory at 10k"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000], help="bank sizes (records)")
    ap.add_argument("--queries", type=int, default=200, help="query keys timed per size (same for both retrievers)")
    ap.add_argument("--k", type=int, default=2, help="records per class for retrieve (paper: 2)")
    ap.add_argument("--updates", type=int, default=50, help="trajectories added one at a time (kernel; timed)")
    ap.add_argument(
        "--reference-budget-s", type=float, default=30.0, help="about how long the timed reference refits may take"
    )
    ap.add_argument("--seed", type=int, default=0, help="seed for sampling the queries")
    ap.add_argument("--intercode", type=Path, default=DEFAULT_INTERCODE, help="InterCode data root")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results", help="directory for the JSON")
    args = ap.parse_args(argv)
    configure_logging("warning")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = time.perf_counter()
    real = load_sql_trajectories(args.intercode)
    real_keys = [r.key for traj in real for r in traj]
    rng = np.random.default_rng(args.seed)
    queries = [real_keys[i] for i in rng.choice(len(real_keys), size=args.queries, replace=False)]
    say(f"{len(real_keys):,} real InterCode-SQL records in {len(real):,} trajectories")
    results = []
    for size in args.sizes:
        results.append(
            run_size(
                real,
                size,
                queries,
                k=args.k,
                update_trajectories=args.updates,
                reference_budget_s=args.reference_budget_s,
                log=say,
            )
        )
    table = format_table(results)
    doc = {
        "benchmark": "bank",
        "machine": machine_info(),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "data": {
            "source": "InterCode-SQL multi-turn streams (convert_intercode), key = composite_key(task, "
            "clip(state, 400), action), pseudo_label = the step's ground-truth label",
            "real_records": len(real_keys),
            "real_trajectories": len(real),
            "replay": REPLAY_RULE,
            "queries": f"{args.queries} real keys sampled without replacement (seed {args.seed}); the same "
            "queries at every size and for both retrievers",
        },
        "targets": TARGETS,
        "results": [asdict(r) for r in results],
        "table": table,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = doc["machine"]["timestamp"].replace(":", "").replace("-", "").replace("+0000", "Z")
    path = args.out / f"bank-{stamp}.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    print(table)
    print(f"\nkeys: {REPLAY_RULE}")
    for r in results:
        a = r.agreement
        print(
            f"N={r.size:,}: kernel vs reference on {a.queries} queries: max abs diff {a.max_abs_diff:.3e}, "
            f"bit-identical {a.bit_identical}/{a.queries}, same top-{r.k} {a.topk_identical}/{a.queries}, "
            f"same retrieve {a.retrieve_identical}/{a.queries}"
        )
    print(f"targets: {TARGETS}\nwrote {path} ({doc['wall_s']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
