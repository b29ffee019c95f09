"""Bank benchmark: the incremental TF-IDF kernel against the refit-per-update reference, on real keys.

For each bank size ``N`` the benchmark builds two banks from the same records, one on
:class:`~ceb.bank.kernel.IncrementalTfidf` and one on :class:`~ceb.bank.retrieval.TfidfReference`, and measures:

- **query**: ``similarities(query)`` latency (the cosine vector over all ``N`` keys), and **retrieve**:
  :meth:`~ceb.bank.bank.Bank.retrieve` with ``k`` (similarities plus the class-split top-k), on the same sampled
  queries for both banks;
- **update**: the cost of adding one real trajectory to a bank of about ``N`` records
  (:meth:`~ceb.bank.bank.Bank.add_trajectory`: for the reference a full refit on all keys);
- **agreement**: on every sampled query, the largest absolute difference between the two similarity vectors,
  whether they are bit-identical, and whether the class-split top-k records are the same.

Keys are the pipeline's real retrieval keys from the InterCode-SQL streams (paper section 3.3: ``composite_key(
task, clip(state, 400), action)``), pseudo-labelled with the streams' step labels. Where ``N`` exceeds the real
records (58,185 SQL steps), the streams are replayed: see :func:`grow`.

Measured: ``benchmarks/results/bank-20261123T185919Z.json`` at commit ``07b2f06`` (and the first run,
``bank-20261121T042851Z.json``, at ``2ac65ab``), as docs/performance.md cites them. It proved the kernel against
the refit once; the replay helpers it shares with ``ceb bench bank-policies`` stay in :mod:`ceb.bench.bank_policies`.
"""

from __future__ import annotations

import gc
import itertools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ceb, not another install's

from benchmarks._cli import bench_parser
from ceb.bank import Bank, BankRecord, IncrementalTfidf, TfidfReference, class_split_topk
from ceb.bench.bank_policies import REPLAY_RULE, Latency, grow, load_sql_trajectories
from ceb.bench.machine import machine_info
from ceb.bench.result_files import save_results
from ceb.logs import configure_logging

__all__ = ["Agreement", "SideResult", "SizeResult", "format_table", "main", "run_size"]


@dataclass(frozen=True, slots=True)
class SideResult:
    """One retriever's figures at one bank size.

    Attributes:
        retriever: Class name.
        build_s: Seconds to load the bank's first records in one update (not a per-trajectory figure).
        query: ``similarities(query)`` latency.
        retrieve: ``Bank.retrieve(query, k)`` latency.
        update: Per-trajectory ``Bank.add_trajectory`` cost at about ``N`` records.
    """

    retriever: str
    build_s: float
    query: Latency
    retrieve: Latency
    update: Latency


@dataclass(frozen=True, slots=True)
class Agreement:
    """Kernel against reference on the sampled queries.

    Attributes:
        queries: Queries compared.
        max_abs_diff: Largest ``|kernel - reference|`` over all similarities of all queries.
        bit_identical: Queries whose similarity vectors are equal bit for bit.
        topk_identical: Queries whose class-split top-k records (same ``k``) are the same, in the same order.
        retrieve_identical: Queries for which the two banks' :meth:`~ceb.bank.bank.Bank.retrieve` give the same
            records in the same order with bit-identical similarities (the kernel's bank ranks a large bank
            with its pruned top-k, not with the similarity vector).
    """

    queries: int
    max_abs_diff: float
    bit_identical: int
    topk_identical: int
    retrieve_identical: int = 0


@dataclass(frozen=True, slots=True)
class SizeResult:
    """Both retrievers at one bank size ``N``.

    Attributes:
        size: Records in the bank when queried.
        trajectories: Trajectories they came from.
        replay_passes: Passes over the real records (1 = no replay; see :data:`REPLAY_RULE`).
        vocabulary: Distinct 1-2 gram terms.
        nnz: Stored (key, term) counts.
        k: Records per class retrieved.
        kernel: The incremental kernel's figures.
        reference: The refit reference's figures.
        query_speedup: Reference over kernel, median ``similarities`` latency.
        retrieve_speedup: Reference over kernel, median ``retrieve`` latency.
        update_speedup: Reference over kernel, mean per-trajectory update cost.
        agreement: Kernel against reference on the sampled queries.
    """

    size: int
    trajectories: int
    replay_passes: int
    vocabulary: int
    nnz: int
    k: int
    kernel: SideResult
    reference: SideResult
    query_speedup: float
    retrieve_speedup: float
    update_speedup: float
    agreement: Agreement


def _time_each(fn: Callable[[str], object], queries: Sequence[str]) -> tuple[list[float], list[object]]:
    results: list[object] = []
    times: list[float] = []
    for q in queries:
        t0 = time.perf_counter()
        results.append(fn(q))
        times.append(time.perf_counter() - t0)
    return times, results


def run_size(
    real: Sequence[Sequence[BankRecord]],
    size: int,
    queries: Sequence[str],
    *,
    k: int = 2,
    update_trajectories: int = 50,
    reference_budget_s: float = 30.0,
    log: Callable[[str], None] = lambda _: None,
) -> SizeResult:
    """Measure both retrievers on one bank of ``size`` records.

    Each bank is loaded with all but the last ``update_trajectories`` trajectories in one update; the kernel
    then takes the remaining trajectories one at a time, each timed. The reference's refits cost seconds at
    large ``N``, so only the last ``R`` of them are timed one by one, ``R = clamp(reference_budget_s /
    (seconds of its first load), 2, update_trajectories)``; the others are added in one untimed update
    first. Both banks end with the same records, and then answer the same queries.

    Args:
        real: Real trajectories (from :func:`load_sql_trajectories`).
        size: Records in the bank.
        queries: Query keys, the same for both retrievers.
        k: Records per class for ``retrieve`` and the top-k agreement check (paper: 2).
        update_trajectories: Trajectories added one by one (timed for the kernel).
        reference_budget_s: About how long the timed reference refits may take, in seconds.
        log: Receives a line of progress now and then.

    Returns:
        The figures for this size.
    """
    trajectories, passes = grow(real, size)
    u = max(1, min(update_trajectories, len(trajectories) - 1))
    bulk, last = trajectories[:-u], trajectories[-u:]

    kernel = IncrementalTfidf()
    kernel_bank = Bank(kernel)
    t0 = time.perf_counter()
    kernel_bank.add_trajectory(itertools.chain.from_iterable(bulk))
    kernel_build = time.perf_counter() - t0
    kernel_updates = []
    gc.collect()
    for traj in last:
        t0 = time.perf_counter()
        kernel_bank.add_trajectory(traj)
        kernel_updates.append(time.perf_counter() - t0)
    log(f"N={size}: kernel loaded in {kernel_build:.2f} s, {u} updates timed")

    reference = TfidfReference()
    reference_bank = Bank(reference)
    t0 = time.perf_counter()
    reference_bank.add_trajectory(itertools.chain.from_iterable(bulk))
    reference_build = time.perf_counter() - t0
    r = int(max(2, min(u, reference_budget_s // max(reference_build, 1e-9))))
    r = min(r, u)
    if r < u:
        reference_bank.add_trajectory(itertools.chain.from_iterable(last[: u - r]))
    reference_updates = []
    gc.collect()
    for traj in last[u - r :]:
        t0 = time.perf_counter()
        reference_bank.add_trajectory(traj)
        reference_updates.append(time.perf_counter() - t0)
    log(f"N={size}: reference loaded in {reference_build:.2f} s, {r} refits timed")
    if len(kernel_bank) != size or len(reference_bank) != size:
        raise AssertionError(f"banks hold {len(kernel_bank)} and {len(reference_bank)} records, not {size}")

    for q in queries[:5]:  # warm caches and lazily built state outside the timings
        kernel.similarities(q)
        reference.similarities(q)
    gc.collect()
    kq_times, kq = _time_each(kernel.similarities, queries)
    rq_times, rq = _time_each(reference.similarities, queries)
    kr_times, kr = _time_each(lambda q: kernel_bank.retrieve(q, k), queries)
    rr_times, rr = _time_each(lambda q: reference_bank.retrieve(q, k), queries)
    same_retrieve = sum(a == b for a, b in zip(kr, rr, strict=True))  # Retrieval: records, similarities, counts
    log(f"N={size}: {len(queries)} queries timed on each bank")

    labels = np.fromiter((rec.pseudo_label for rec in kernel_bank.records), dtype=np.int8, count=size)
    max_diff, bit, topk = 0.0, 0, 0
    for a, b in zip(kq, rq, strict=True):
        sa, sb = np.asarray(a), np.asarray(b)
        max_diff = max(max_diff, float(np.max(np.abs(sa - sb), initial=0.0)))
        bit += int(np.array_equal(sa, sb))
        (pa, na), (pb, nb) = class_split_topk(sa, labels, k), class_split_topk(sb, labels, k)
        topk += int(np.array_equal(pa, pb) and np.array_equal(na, nb))

    kernel_side = SideResult(
        "IncrementalTfidf", kernel_build, Latency.of(kq_times), Latency.of(kr_times), Latency.of(kernel_updates)
    )
    reference_side = SideResult(
        "TfidfReference", reference_build, Latency.of(rq_times), Latency.of(rr_times), Latency.of(reference_updates)
    )
    return SizeResult(
        size=size,
        trajectories=len(trajectories),
        replay_passes=passes,
        vocabulary=kernel.vocabulary_size,
        nnz=kernel.nnz,
        k=k,
        kernel=kernel_side,
        reference=reference_side,
        query_speedup=reference_side.query.p50_ms / kernel_side.query.p50_ms,
        retrieve_speedup=reference_side.retrieve.p50_ms / kernel_side.retrieve.p50_ms,
        update_speedup=reference_side.update.mean_ms / kernel_side.update.mean_ms,
        agreement=Agreement(len(queries), max_diff, bit, topk, same_retrieve),
    )


def format_table(results: Sequence[SizeResult]) -> str:
    """Render results as a Markdown table (milliseconds; speed-ups as reference / kernel)."""
    head = (
        "| N | vocab | nnz | kernel query p50 / p99 ms | reference query p50 / p99 ms | query x "
        "| kernel retrieve p50 / p99 ms | reference retrieve p50 ms | retrieve x "
        "| kernel update p50 / mean / max ms (n) | reference update mean ms (n) | update x "
        "| max abs diff | bit-identical | same top-k | same retrieve |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        kq, rq, kr, rr = r.kernel.query, r.reference.query, r.kernel.retrieve, r.reference.retrieve
        ku, ru, a = r.kernel.update, r.reference.update, r.agreement
        lines.append(
            f"| {r.size:,} | {r.vocabulary:,} | {r.nnz:,} | {kq.p50_ms:.3f} / {kq.p99_ms:.3f} "
            f"| {rq.p50_ms:.2f} / {rq.p99_ms:.2f} | {r.query_speedup:.0f}x "
            f"| {kr.p50_ms:.3f} / {kr.p99_ms:.3f} | {rr.p50_ms:.2f} | {r.retrieve_speedup:.0f}x "
            f"| {ku.p50_ms:.2f} / {ku.mean_ms:.2f} / {ku.max_ms:.2f} ({ku.n}) | {ru.mean_ms:.1f} ({ru.n}) "
            f"| {r.update_speedup:.0f}x | {a.max_abs_diff:.1e} | {a.bit_identical}/{a.queries} "
            f"| {a.topk_identical}/{a.queries} | {a.retrieve_identical}/{a.queries} |"
        )
    return "\n".join(lines)


# --- command line: python benchmarks/bank.py --------------------------------------------------------------------------

_HELP = """Bank benchmark: incremental TF-IDF kernel vs the scikit-learn refit reference on real InterCode-SQL keys.

    python benchmarks/bank.py --sizes 1000 10000 100000 --queries 200

Prints a Markdown table and writes ``bank-<UTC timestamp>.json`` (figures, settings, how keys were made, and the
machine) into ``--out``. See ``benchmarks/bank.py`` for what each figure measures.
"""

TARGETS = "query p50 <= 1 ms at 10k and <= 10 ms at 100k; update >= 50x faster than refit-per-trajectory at 10k"


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: run :func:`run_size` per ``--sizes`` and save the figures (``--help`` lists options)."""
    ap = bench_parser("bank", _HELP, prog="python benchmarks/bank.py")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000], help="bank sizes (records)")
    ap.add_argument("--queries", type=int, default=200, help="query keys timed per size (same for both retrievers)")
    ap.add_argument("--k", type=int, default=2, help="records per class for retrieve (paper: 2)")
    ap.add_argument("--updates", type=int, default=50, help="trajectories added one at a time (kernel; timed)")
    ap.add_argument(
        "--reference-budget-s", type=float, default=30.0, help="about how long the timed reference refits may take"
    )
    ap.add_argument("--seed", type=int, default=0, help="seed for sampling the queries")
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
    results = [
        run_size(
            real,
            size,
            queries,
            k=args.k,
            update_trajectories=args.updates,
            reference_budget_s=args.reference_budget_s,
            log=say,
        )
        for size in args.sizes
    ]
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
    path = save_results(args.out, "bank", doc)
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
