"""``ceb batch export`` / ``import`` on the command line: a grid's baselines, and what import prints."""

from __future__ import annotations

from pathlib import Path

import orjson
from typer.testing import CliRunner

from ceb.backends.batch import BatchRequest, read_requests
from ceb.cli import app
from ceb.cli._common import EXIT_ERROR, EXIT_FAILED
from ceb.data import write_stream
from ceb.pipeline import read_rows
from tests.support.builders import step, trajectory

runner = CliRunner()


def _stream(tmp_path: Path) -> Path:
    path = tmp_path / "s.jsonl"
    write_stream(path, [trajectory(f"t{i}", step("ls", "a", label=1), step("pwd", "/", label=0)) for i in range(2)])
    return path


def test_a_grid_exports_its_bank_free_baselines_and_names_the_methods_left_online(tmp_path: Path) -> None:
    _stream(tmp_path)
    grid = tmp_path / "grid.toml"
    grid.write_text("methods = ['ceb', 'static', 'ppl', 'cot']\n[backend]\nmodel = 'm'\n"
                    "[grid]\nstreams = ['s.jsonl']\nout = 'run'\n")  # fmt: skip

    result = runner.invoke(app, ["batch", "export", "--grid", str(grid), "--out", str(tmp_path / "b")])

    assert result.exit_code == 0, result.output
    assert "note: ceb, static need the bank and stay online (ceb grid); exporting ppl, cot" in result.output
    lanes = {r.custom_id.split("/")[1] for r in read_requests(tmp_path / "b" / "round-1.jsonl")}
    assert lanes == {"s|0|ppl|", "s|0|cot|"}


def test_export_needs_streams_or_a_grid_and_a_model(tmp_path: Path) -> None:
    nothing = runner.invoke(app, ["batch", "export", "--out", str(tmp_path / "b")])
    assert nothing.exit_code == EXIT_ERROR and "give the STREAMS to export, or --grid FILE" in nothing.output
    no_model = runner.invoke(app, ["batch", "export", str(_stream(tmp_path)), "--out", str(tmp_path / "b")])
    assert no_model.exit_code == EXIT_ERROR and "set backend.model (--model)" in no_model.output
    assert not (tmp_path / "b").exists()


def test_import_prints_the_metrics_and_the_steps_the_batch_failed(tmp_path: Path) -> None:
    stream, batch = _stream(tmp_path), tmp_path / "b"
    result = runner.invoke(
        app, ["batch", "export", str(stream), "--methods", "ptrue", "--model", "m", "--out", str(batch)]
    )
    assert result.exit_code == 0, result.output
    refused = {"status_code": 400, "request_id": "r", "body": None}
    lines = [
        orjson.dumps({"id": "x", "custom_id": r.custom_id, "response": refused, "error": {"message": "no such model"}})
        for r in read_requests(batch / "round-1.jsonl")
    ]
    (tmp_path / "out.jsonl").write_bytes(b"\n".join(lines[1:]) + b"\n")  # the first request has no line

    result = runner.invoke(
        app, ["batch", "import", str(batch), str(tmp_path / "out.jsonl"), "--out", str(tmp_path / "r")]
    )

    assert result.exit_code == EXIT_FAILED, result.output  # as ceb score: no step got a score
    assert "0 steps scored, 4 failed, from 7 Batch output lines" in result.output
    assert "error: every step failed (no score)" in result.output
    assert "warning: 1 requests have no line in the Batch output: their steps failed" in result.output
    errors = {r["error"] for r in read_rows(tmp_path / "r" / "scores.jsonl")}
    assert any("400 from the Batch: no such model" in e for e in errors)
    assert (tmp_path / "r" / "metrics.json").is_file() and (batch / "round-1.output.jsonl").is_file()


def _samples_output(request: BatchRequest) -> bytes:
    """OpenAI's output line for one of pro's sample requests: ``n`` choices, each with its log-probs."""
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "ls"},
        "logprobs": {"content": [{"token": "ls", "logprob": -0.1, "bytes": None, "top_logprobs": []}]},
        "finish_reason": "stop",
    }
    n = request.body["n"]
    body = {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [choice | {"index": i} for i in range(n)],
        "usage": {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n},
    }
    response = {"status_code": 200, "request_id": "r", "body": body}
    return orjson.dumps({"id": "x", "custom_id": request.custom_id, "response": response, "error": None}) + b"\n"


def _export_pro(tmp_path: Path) -> Path:
    stream, batch = _stream(tmp_path), tmp_path / "b"
    result = runner.invoke(
        app, ["batch", "export", str(stream), "--methods", "pro", "--model", "m", "--out", str(batch)]
    )
    assert result.exit_code == 0, result.output
    return batch


def test_an_import_whose_steps_all_wait_for_the_next_round_is_no_failure(tmp_path: Path) -> None:
    batch = _export_pro(tmp_path)
    # pro's samples, each with its log-probs: teacher forcing next
    (tmp_path / "out.jsonl").write_bytes(b"".join(map(_samples_output, read_requests(batch / "round-1.jsonl"))))

    result = runner.invoke(
        app, ["batch", "import", str(batch), str(tmp_path / "out.jsonl"), "--out", str(tmp_path / "r")]
    )

    assert result.exit_code == 0, result.output
    assert "0 steps scored, 4 failed" in result.output and "round 2: 4 follow-up requests wait in" in result.output


def test_openais_error_file_after_the_output_file_that_opened_round_2_is_imported_as_docs_scale_out_shows(
    tmp_path: Path,
) -> None:
    batch, run = _export_pro(tmp_path), tmp_path / "r"
    first, *rest = read_requests(batch / "round-1.jsonl")
    (tmp_path / "output.jsonl").write_bytes(b"".join(map(_samples_output, rest)))
    expired = {"code": "batch_expired", "message": "This request could not be executed before the window expired."}
    line = {"id": "x", "custom_id": first.custom_id, "response": None, "error": expired}
    (tmp_path / "errors.jsonl").write_bytes(orjson.dumps(line) + b"\n")
    imported = runner.invoke(app, ["batch", "import", str(batch), str(tmp_path / "output.jsonl"), "--out", str(run)])
    assert imported.exit_code == 0, imported.output
    assert "round 2: 3 follow-up requests wait in" in imported.output
    assert "warning: 1 requests have no line in the Batch output" in imported.output

    later = runner.invoke(
        app, ["batch", "import", str(batch), str(tmp_path / "errors.jsonl"), "--out", str(run), "--overwrite"]
    )

    assert later.exit_code == 0, later.output
    assert f"round 2: 3 follow-up requests wait in {batch / 'round-2.jsonl'}" in later.output
    assert "0 steps scored, 4 failed, from 4 Batch output lines" in later.output
    assert "no line in the Batch output" not in later.output and "earlier round" not in later.output
    errors = [r["error"] for r in read_rows(run / "scores.jsonl")]
    assert sum("not run by the Batch: This request could not be executed" in e for e in errors) == 1
    assert sum("no reply yet" in e for e in errors) == 3
