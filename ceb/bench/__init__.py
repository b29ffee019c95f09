"""Installed benchmarks: tools a user runs on their own deployment or data (``ceb bench NAME``).

Each module holds a measurement and its command line (:mod:`ceb.bench.commands` lists them). Results go under
``./benchmarks/results`` by default (:func:`ceb.bench.result_files.save_results`); the percentiles are
:func:`ceb.bench.stats.summarize`'s; child processes (the simulator, fresh measurements) :mod:`ceb.bench.processes`.
Nothing is imported here, so listing the commands (``ceb bench --help``) imports no benchmark. Proofs of past fixes
and one-off studies live in the checkout's ``benchmarks/`` (``python benchmarks/NAME.py``).
"""
