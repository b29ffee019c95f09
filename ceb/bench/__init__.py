"""Installed benchmarks: tools a user runs on their own deployment or data (``ceb bench NAME``).

Each module holds a measurement and its settings (:mod:`ceb.bench.commands` lists them); :mod:`ceb.bench.options`
holds the run they score and how they end. Nothing is imported here, so ``ceb bench --help`` imports no benchmark.
Proofs of past fixes and one-off studies live in the checkout's ``benchmarks/``.
"""
