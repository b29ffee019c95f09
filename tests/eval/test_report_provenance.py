"""The report's provenance block (ceb/eval/provenance.py): what the server said of its model, and what it did not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from ceb.data import write_stream
from ceb.data.converters import OBSERVATION, REFERENCE_ACTIONS, next_state_observations
from ceb.eval.provenance import provenance_block
from ceb.eval.render import Lines
from ceb.pipeline.rundir import RunDir
from tests.support.builders import step, trajectory


def _lines(run: Path) -> str:
    (part,) = [p for p in provenance_block(RunDir(run)).parts if isinstance(p, Lines)]
    return "\n".join(part.lines)


def _critic(**served: Any) -> dict[str, Any]:
    endpoint = {"role": "critic", "critic": "", "backend": "openai", "endpoint": ["http://h:8000/v1"], "model": "m"}
    return endpoint | served


def _run(tmp_path: Path, *endpoints: dict[str, Any]) -> Path:
    run = tmp_path / "run"
    run.mkdir(parents=True)
    record = {"ceb_version": "1", "config_sha256": "abc", "readout": "text", "endpoints": list(endpoints)}
    (run / "summary.json").write_bytes(orjson.dumps({"status": "finished", "provenance": record}))
    return run


def test_provenance_names_the_served_model_its_root_and_digest_and_says_which_are_missing(tmp_path: Path) -> None:
    full = _critic(root="/w/qwen", weights_digest="d1g35t", server_version="0.11.0")
    text = _lines(_run(tmp_path, full))
    assert "served model id `m`; weights `/w/qwen` (its root); weights digest `d1g35t`; server version `0.11.0`" in text
    remote = _lines(_run(tmp_path / "remote", _critic(root="/elsewhere/qwen")))
    assert "weights `/elsewhere/qwen` (its root); weights digest missing: the root is not a directory on this" in remote
    bare = _lines(_run(tmp_path / "bare", _critic()))  # OpenAI: /v1/models lists the id only
    assert "served model id `m`; root missing: the server did not report it; weights digest missing: no root" in bare


def test_offline_web_observations_are_said_to_be_the_page_after_the_humans_action(tmp_path: Path) -> None:
    steps = next_state_observations((step("[CLICK] a", state="<page 1>"), step("[CLICK] b", state="<page 2>")))
    web = trajectory("t0", *steps, domain="web", meta={REFERENCE_ACTIONS: ["[CLICK] a", "[CLICK] b"]})
    shell = trajectory("t1", step("ls", observation="file.txt"))
    write_stream(tmp_path / "web.jsonl", [web])
    write_stream(tmp_path / "bash.jsonl", [shell])
    run = _run(tmp_path, _critic())
    streams = {s: {"files": [str(tmp_path / f"{s}.jsonl")], "trajectories": 1} for s in ("web", "bash")}
    (run / "config.json").write_bytes(orjson.dumps({"config": {}, "streams": streams}))
    text = _lines(run)
    assert "Observations of stream `web`: the page after the human's action, not after the agent's" in text
    assert "`bash`" not in text


def test_help_docs_and_provenance_say_the_offline_observation_in_the_same_words() -> None:
    words = "the page after the human's action, not after the agent's"
    assert words in " ".join(OBSERVATION.help.split())
    root = Path(__file__).parents[2]
    for doc in ("docs/cli.md", "docs/data.md", "docs/stream-format.md"):
        text = " ".join((root / doc).read_text().split())
        assert words in text and "paper's critic sees" not in text, doc
