"""Resume: kept rows are not recomputed, failed steps are retried, banks are restored, changes are refused."""

from __future__ import annotations

import anyio
import orjson
import pytest

from ceb.backends.base import ChatRequest
from ceb.backends.scripted import ScriptedChat
from ceb.bank import Bank
from ceb.config import load_config
from ceb.errors import RunError
from ceb.pipeline import read_rows, run_scoring
from ceb.pipeline.results import ROW_SCHEMA
from ceb.pipeline.resume import config_fingerprint, diff_fingerprints
from ceb.stages.assembly import llm_stages
from tests.support.builders import n_steps_of, step, trajectory

pytestmark = pytest.mark.anyio

TIMING = ("latency_s", "queue_s")


def stream(n: int = 6, steps: int = 3, tag: str = "") -> list:
    return [
        trajectory(f"t{i}", *(step(f"cmd {i} {t}{tag}", f"out {i} {t}", label=(i + t) % 2) for t in range(steps)))
        for i in range(n)
    ]


def reply(request: ChatRequest) -> str:
    """Deterministic in the prompt: critic score from the prompt's length, labels from the step count."""
    if request.stage == "critic":
        return orjson.dumps({"score": (len(request.messages[-1]["content"]) % 97) / 96, "reason": ""}).decode()
    n = n_steps_of(request)
    return orjson.dumps({"labels": [(len(request.messages[-1]["content"]) + t) % 2 for t in range(n)]}).decode()


CONFIG = load_config(overrides={"methods": ["ceb", "static"], "ceb": {"votes": 3}, "orders": 2})
STREAMS = {"a": stream(), "b": stream(4, 4, tag=" x")}


def rows(run_dir, name: str, leave_out: tuple[str, ...] = ()) -> list[bytes]:
    """The rows of a result file without timing fields (and ``leave_out``), serialised with sorted keys, sorted."""
    out = []
    for r in read_rows(run_dir / name):
        for f in TIMING + leave_out:
            r.pop(f, None)
        out.append(orjson.dumps(r, option=orjson.OPT_SORT_KEYS))
    return sorted(out)


async def score(
    run_dir, *, responder=reply, config=CONFIG, streams=STREAMS, resume=False, stop_after=None, on_start=None
):
    stages = llm_stages(config, ScriptedChat(responder))
    seen = 0
    with anyio.CancelScope() as scope:

        def on_row(row: object) -> None:
            nonlocal seen
            seen += 1
            if stop_after is not None and seen >= stop_after:
                scope.cancel()

        return await run_scoring(
            streams, config, run_dir, stages=stages, on_row=on_row, on_start=on_start, resume=resume
        )
    return None


async def test_an_interrupted_run_resumed_equals_an_uninterrupted_one(tmp_path):
    await score(tmp_path / "full")
    for stop in (1, 7, 25, 60):
        part = tmp_path / f"part{stop}"
        await score(part, stop_after=stop)
        assert (
            0 < len(list(read_rows(part / "scores.jsonl"))) < len(list(read_rows(tmp_path / "full" / "scores.jsonl")))
        )
        summary = await score(part, resume=True)
        assert summary is not None and summary.steps_resumed > 0
        assert rows(part, "scores.jsonl") == rows(tmp_path / "full", "scores.jsonl")
        assert rows(part, "hindsight.jsonl") == rows(tmp_path / "full", "hindsight.jsonl")
        for name in ("a__ceb.json", "b__ceb__o1.json"):
            assert Bank.load(part / "banks" / name).records == Bank.load(tmp_path / "full" / "banks" / name).records


async def test_a_run_directory_of_the_previous_row_layout_resumes_and_is_rewritten_in_the_current_one(tmp_path):
    await score(tmp_path / "full")
    part = tmp_path / "part"
    await score(part, stop_after=25)
    # Layout 2 wrote alt_labels as an object keyed by label name.
    old = [r | {"schema": 2, "alt_labels": {}} for r in read_rows(part / "scores.jsonl")]
    (part / "scores.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in old))
    summary = await score(part, resume=True)
    assert summary is not None and summary.steps_resumed > 0
    assert rows(part, "scores.jsonl") == rows(tmp_path / "full", "scores.jsonl")
    assert {(r["schema"], str(r["alt_labels"])) for r in read_rows(part / "scores.jsonl")} == {(ROW_SCHEMA, "[]")}


async def test_kept_steps_are_not_asked_again(tmp_path):
    await score(tmp_path, stop_after=20)
    kept = len(list(read_rows(tmp_path / "scores.jsonl")))
    asked: list[ChatRequest] = []

    def counting(request: ChatRequest) -> str:
        asked.append(request)
        return reply(request)

    summary = await score(tmp_path, responder=counting, resume=True)
    total = sum(len(t.steps) for s in STREAMS.values() for t in s) * 2 * 2
    critic_calls = sum(r.stage == "critic" for r in asked)
    assert summary is not None and 0 < summary.steps_resumed <= kept
    # static is asked in one order and copied to the other (ceb.pipeline.pool); copies are written anew.
    assert summary.steps_reused == sum(len(t.steps) for s in STREAMS.values() for t in s)
    # Speculation (ceb.pipeline.lane) asks some steps ahead twice: the discarded calls are counted apart.
    assert critic_calls == total - summary.steps_resumed - summary.steps_reused + summary.discarded_requests
    assert len(list(read_rows(tmp_path / "scores.jsonl"))) == total


async def test_failed_steps_are_retried_on_resume_and_rows_are_not_duplicated(tmp_path):
    config = load_config(overrides={"methods": ["ceb"], "ceb": {"votes": 1}, "critic": {"format_retries": 0}})
    streams = {"a": stream(3, 3)}

    def flaky(request: ChatRequest) -> str:
        if request.stage == "critic" and "cmd 1 1" in request.messages[-1]["content"].split("Proposed")[-1]:
            return "not json"
        return reply(request)

    await score(tmp_path, responder=flaky, config=config, streams=streams)
    first = list(read_rows(tmp_path / "scores.jsonl"))
    assert sum(r["score"] is None for r in first) == 1
    await score(tmp_path, config=config, streams=streams, resume=True)
    again = list(read_rows(tmp_path / "scores.jsonl"))
    assert len(again) == 9 and all(r["score"] is not None for r in again)
    assert len({(r["trajectory"], r["step"]) for r in again}) == 9
    assert len(list(read_rows(tmp_path / "hindsight.jsonl"))) == 3


async def test_resume_refuses_changed_settings_and_streams_and_names_them(tmp_path):
    await score(tmp_path, stop_after=5)
    k3 = load_config(overrides={"methods": ["ceb", "static"], "ceb": {"votes": 3, "k": 3}, "orders": 2})
    with pytest.raises(RunError, match=r"setting ceb\.k: 2 -> 3"):
        await score(tmp_path, config=k3, resume=True)
    changed = {"a": stream(), "b": stream(4, 4, tag=" y")}
    with pytest.raises(RunError, match="stream b: content changed"):
        await score(tmp_path, streams=changed, resume=True)
    # Settings that cannot change a result may differ.
    wider = CONFIG.model_copy(update={"backend": CONFIG.backend.model_copy(update={"max_concurrency": 3})})
    assert await score(tmp_path, config=wider, resume=True) is not None


async def test_resume_of_a_directory_without_a_run_is_refused_not_started(tmp_path):
    with pytest.raises(RunError, match="no such directory"):
        await score(tmp_path / "new", resume=True)
    assert not (tmp_path / "new").exists()
    (tmp_path / "new").mkdir()
    with pytest.raises(RunError, match=r"holds no run \(no config\.json\)"):
        await score(tmp_path / "new", resume=True)
    assert list((tmp_path / "new").iterdir()) == []
    # Rows without the config.json that says what they were scored with: refused, the rows left as they are.
    await score(tmp_path / "run", stop_after=10)
    (tmp_path / "run" / "config.json").unlink()
    rows_before = (tmp_path / "run" / "scores.jsonl").read_bytes()
    with pytest.raises(RunError, match="has scores.jsonl, hindsight.jsonl, banks, summary.json but no config.json"):
        await score(tmp_path / "run", resume=True)
    assert (tmp_path / "run" / "scores.jsonl").read_bytes() == rows_before


async def test_a_torn_last_line_is_redone(tmp_path):
    await score(tmp_path / "full")
    part = tmp_path / "part"
    await score(part, stop_after=30)
    with (part / "scores.jsonl").open("ab") as f:
        f.write(b'{"stream": "a", "method": "ce')
    await score(part, resume=True)
    assert rows(part, "scores.jsonl") == rows(tmp_path / "full", "scores.jsonl")


def test_a_run_recorded_before_the_repetition_reading_resumes_only_under_its_own_reading() -> None:
    # Runs before ceb.repetition_reading flagged by the first 40 characters (the chars reading); their recorded
    # fingerprints lack the key. The new default reads differently, so resuming one under it is refused by name.
    def recorded(**ceb: object) -> dict[str, object]:
        flat = config_fingerprint(load_config(overrides={"ceb": ceb}))[1]
        return {"config": flat, "streams": {}}

    old = recorded()
    del old["config"]["ceb.repetition_reading"]  # type: ignore[attr-defined]
    del old["config"]["ceb.repetition_prefix_fraction"]  # type: ignore[attr-defined]
    assert diff_fingerprints(old, recorded()) == ["setting ceb.repetition_reading: 'chars' -> 'prefix'"]
    assert diff_fingerprints(old, recorded(repetition_reading="chars")) == []
