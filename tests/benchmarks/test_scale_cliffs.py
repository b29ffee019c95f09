"""The two scale-cliff proofs (issue 24 item 8, ``benchmarks/``) run end to end at tiny sizes and record figures."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from benchmarks import gate_restart, long_trajectory


def _result(folder: Path, kind: str) -> dict:
    (path,) = folder.glob(f"{kind}-*.json")
    return orjson.loads(path.read_bytes())


@pytest.mark.slow  # times both sizes here and in another checkout: minutes on a loaded machine
def test_long_trajectory_times_each_size_and_another_checkout(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    checkout = Path(__file__).resolve().parents[2]
    argv = ["--sizes", "13", "30", "--repeats", "1", "--before", str(checkout), "--out", str(tmp_path)]
    assert long_trajectory.main(argv) == 0
    doc = _result(tmp_path, "long-trajectory")
    assert set(doc["seconds_per_step"]) == {"13", "30"} and doc["ratio_to_shortest"]["13"] == 1.0
    assert doc["before"]["checkout"] == str(checkout) and len(doc["before"]["commit"]) in (40, 7)
    assert "| 30 |" in capsys.readouterr().out


@pytest.mark.slow  # restarts a gate five times, once from another checkout
def test_gate_restart_restores_the_same_bank_from_a_snapshot_and_by_replay(tmp_path: Path):
    checkout = Path(__file__).resolve().parents[2]
    argv = ["--sizes", "5", "20", "--before", str(checkout), "--before-sizes", "20", "--snapshot-every", "8"]
    assert gate_restart.main([*argv, "--out", str(tmp_path)]) == 0
    doc = _result(tmp_path, "gate-restart")
    rows = {(r["files"], r["code"].split(" ")[0], r["trajectories"]): r for r in doc["restarts"]}
    assert set(rows) == {
        ("snapshot", "this", 5),
        ("no snapshot", "this", 5),
        ("snapshot", "this", 20),
        ("no snapshot", "this", 20),
        ("no snapshot", "before", 20),
    }
    assert doc["same_bank"] == {"5": True, "20": True}
    # Snapshots at 8 and 16: header, snapshot, 4 updates; against header and one line per update.
    assert rows[("snapshot", "this", 20)]["journal_lines"] == 2 + 4
    assert rows[("no snapshot", "before", 20)]["journal_lines"] == 1 + 20
    assert all(r["bank_records"] == r["trajectories"] for r in rows.values())
