"""The report's bytes: every file ``ceb report`` writes for the fixture runs and the README's run, against digests.

``tests/eval/golden_reports.json`` holds, per case, the sha256 of each file of the report directory (report.md,
report.json, each table's .md / .tex, each figure). report.json is hashed with its numbers rounded to
:data:`JSON_DIGITS` significant digits: the README run's scores come from the TF-IDF kernel, whose idf is
``np.log`` of an array, and numpy computes that with its own AVX-512 routines on a CPU that has them and with the C
library's elsewhere, so the last bits of report.json's numbers depend on the CPU (report.md's do not).
A change that alters a report on purpose rewrites it:
``python -m tests.eval.test_report_golden --write`` (add ``--slow`` for the README run, about 25 s). To see what
changed, dump the reports of two checkouts and diff them: ``python -m tests.eval.test_report_golden --dump DIR``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from ceb.eval.report import build_report
from tests.eval.test_report import _write_run as write_two_streams
from tests.eval.test_report_appendix import _write_run as write_appendix_run

GOLDEN = Path(__file__).with_name("golden_reports.json")
ROOT = Path(__file__).parents[2]
INTERCODE = Path(os.environ.get("CEB_INTERCODE_ROOT", ROOT.parent / "shared" / "data" / "intercode"))


def _two_streams(run: Path) -> Path:
    write_two_streams(run)
    return build_report(run, n_boot=20, seed=0)


def _one_lane(run: Path) -> Path:
    write_two_streams(run, alt=False, orders=1, methods=("ceb",))
    return build_report(run, n_boot=0, figure_formats=("png", "svg"))


def _appendix(run: Path) -> Path:
    methods = {
        "static": (0.85, 0.85, (1400, 0)),
        "ceb": (0.85, 0.25, (2100, 700)),
        "ceb-positives-only": (0.7, 0.3, None),
        "ceb-gt-oracle": (0.95, 0.15, None),
        "ceb-V1": (0.85, 0.35, None),
        "ceb-k1": (0.75, 0.25, (1750, 350)),
        "ceb-random-retrieval": (0.65, 0.35, None),
        "ppl": (0.5, 0.5, None),
    }
    write_appendix_run(run, methods, {"config": {"ceb": {"votes": 5, "k": 2, "retriever": "tfidf"}}})
    return build_report(run, n_boot=0)


def _unlabelled(run: Path) -> Path:
    """Two streams without a single label: the label-free section alone."""
    write_two_streams(run, alt=False, orders=1, methods=("ceb", "static"))
    scores = run / "scores.jsonl"
    rows = [orjson.loads(line) | {"label": None} for line in scores.read_bytes().splitlines()]
    scores.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return build_report(run, n_boot=0)


def _readme(run: Path) -> Path:
    """The README's run: convert InterCode, score the seven InterCode-Bash streams offline, report."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    work = run.parent
    cli = [sys.executable, str(ROOT / "run.py")]
    subprocess.run([*cli, "convert", "intercode", "--root", str(INTERCODE)], cwd=work, env=env, check=True)
    streams = sorted(str(p.relative_to(work)) for p in (work / "streams").glob("intercode-bash-*.jsonl"))
    subprocess.run([*cli, "score", *streams, "--out", run.name, "--overwrite"], cwd=work, env=env, check=True)
    subprocess.run([*cli, "report", run.name], cwd=work, env=env, check=True)
    return run / "report" / "report.md"


CASES: dict[str, Callable[[Path], Path]] = {
    "two-streams": _two_streams,
    "one-lane": _one_lane,
    "appendix": _appendix,
    "unlabelled": _unlabelled,
}
SLOW_CASES: dict[str, Callable[[Path], Path]] = {"readme": _readme}


JSON_DIGITS = 10
"""Significant digits of report.json's numbers in its digest (the module docstring says why not all 17)."""


def _rounded(value: object) -> object:
    """``value`` with every float rounded to :data:`JSON_DIGITS` significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{JSON_DIGITS}g}")
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def _digest(path: Path) -> str:
    """sha256 of a report file; of report.json's numbers rounded (:data:`JSON_DIGITS`), in its own key order."""
    data = path.read_bytes()
    if path.name == "report.json":
        data = orjson.dumps(_rounded(orjson.loads(data)))
    return hashlib.sha256(data).hexdigest()


def digests(report_dir: Path) -> dict[str, str]:
    """sha256 of each file of a report directory, by name (:func:`_digest`)."""
    return {p.name: _digest(p) for p in sorted(report_dir.iterdir()) if p.is_file()}


def build(case: str, work: Path) -> Path:
    """Build ``case``'s report in ``work`` (the run is ``work/run``, named relatively, as the report prints it)."""
    work.mkdir(parents=True, exist_ok=True)
    here = Path.cwd()
    os.chdir(work)
    try:
        return (work / {**CASES, **SLOW_CASES}[case](Path("run"))).parent
    finally:
        os.chdir(here)


def _check(case: str, tmp_path: Path) -> None:
    expected = orjson.loads(GOLDEN.read_bytes())[case]
    got = digests(build(case, tmp_path))
    changed = sorted(name for name in expected.keys() | got.keys() if expected.get(name) != got.get(name))
    assert not changed, f"{case}: these report files changed: {changed} (see {GOLDEN.name}'s module docstring)"


@pytest.mark.parametrize("case", CASES)
def test_the_report_of_a_fixture_run_keeps_its_bytes(case: str, tmp_path: Path) -> None:
    _check(case, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_report_of_the_readme_run_keeps_its_bytes(tmp_path: Path) -> None:
    if not INTERCODE.is_dir():
        pytest.skip(f"the InterCode data is not at {INTERCODE} (set CEB_INTERCODE_ROOT)")
    _check("readme", tmp_path)


def main() -> None:
    """Rewrite the digests (``--write``) or keep the reports themselves (``--dump DIR``)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"rewrite {GOLDEN.name}")
    parser.add_argument("--slow", action="store_true", help="include the README run")
    parser.add_argument("--dump", type=Path, help="keep each case's report directory under DIR/<case>")
    args = parser.parse_args()
    old = orjson.loads(GOLDEN.read_bytes()) if GOLDEN.exists() else {}
    cases = [*CASES, *(SLOW_CASES if args.slow else ())]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            out = build(case, Path(tmp) / case)
            old[case] = digests(out)
            if args.dump:
                shutil.copytree(out, args.dump / case, dirs_exist_ok=True)
    if args.write:
        GOLDEN.write_bytes(orjson.dumps(old, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")


if __name__ == "__main__":
    main()
