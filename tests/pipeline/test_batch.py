"""The bank-free baselines through a Batch file: export, a Batch run, import, against the same baselines online.

The "Batch service" here posts each line's body to the loopback OpenAI server (:mod:`tests.support.openai_server`)
and writes the output line OpenAI's Batch API writes, so the replies are the ones the online run got.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from ceb.backends.batch import BATCH_URL, read_requests
from ceb.backends.openai import PREFLIGHT_MESSAGES
from ceb.config import RunConfig, load_config
from ceb.data import read_stream, write_stream
from ceb.errors import ConfigError, DataError, RunError
from ceb.eval import run_metrics
from ceb.pipeline import read_rows, run_scoring
from ceb.pipeline.batch import BatchDir, export_batch, import_batch
from ceb.stages.asking import REASK_PREFIX
from tests.support.builders import step, trajectory
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.anyio

SIX = ["ppl", "me", "ptrue", "cot", "verbalized", "pro"]


def respond(body: dict[str, Any], i: int) -> Reply:
    """A deterministic answer for every baseline's request, varying with the step (its action)."""
    last = body["messages"][-1]
    if "prompt_logprobs" in body:  # teacher forcing: ppl, me, pro, forced ptrue
        text = last["content"]
        lp = {"True": -0.2, "False": -1.4}.get(text, -0.1 - 0.05 * len(text))
        alternative = (text + "x", lp - 1.0, 2)
        return Reply("\n", prompt_logprobs=[None, {7: ("\n", -0.3, 1)}, {8: (text, lp, 1), 9: alternative}])
    if body.get("n", 1) > 1:  # pro's samples
        n = body["n"]
        return Reply(["ls"] * (n - 1) + ["pwd"], logprobs=[[("ls", -0.4)]] * (n - 1) + [[("pwd", -1.1)]])
    if last["role"] == "assistant":  # verbalized: the continuation of the frozen action and its cue
        return Reply(str(40 + len(last["content"]) % 50))
    user = body["messages"][1]["content"]
    return Reply(orjson.dumps({"reasoning": ["checked"], "confidence": 30 + len(user) % 60}).decode())


def stream() -> list[Any]:
    return [
        trajectory(f"t{i}", step(f"ls {i}", "x", label=1), step("pwd", "/", label=0), step(f"cat f{i}", "y", label=1))
        for i in range(3)
    ]


def config(server: OpenAITestServer, methods: list[str] = SIX) -> RunConfig:
    # The online run each lane's own requests, as a Batch export sends them (batch_config turns sharing off), so
    # the two are compared request for request.
    return load_config(
        overrides={
            "methods": methods,
            "backend": {"name": "openai", "base_url": server.base_url, "model": server.model},
            "baselines": {"share_statistics": False},
        }
    )


@pytest.fixture
def files(tmp_path: Path) -> dict[str, list[Path]]:
    path = tmp_path / "s.jsonl"
    write_stream(path, stream())
    return {"s": [path]}


def data(files: dict[str, list[Path]]) -> dict[str, Any]:
    return {name: read_stream(paths) for name, paths in files.items()}


async def run_batch(server: OpenAITestServer, requests: Path, output: Path) -> None:
    """What a Batch service does with an input file: each body to the endpoint, each answer an output line."""
    lines = []
    async with aiohttp.ClientSession() as session:
        for number, r in enumerate(read_requests(requests)):
            async with session.post(server.base_url + "/chat/completions", json=r.body) as resp:
                body = await resp.json()
            response = {"status_code": resp.status, "request_id": f"req-{number}", "body": body}
            lines.append({"id": f"batch_req_{number}", "custom_id": r.custom_id, "response": response, "error": None})
    output.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))


def scores(run: Path) -> dict[tuple[str, str, int], float | None]:
    return {(r["method"], r["trajectory"], r["step"]): r["score"] for r in read_rows(run / "scores.jsonl")}


def sent(server: OpenAITestServer) -> list[dict[str, Any]]:
    """The bodies the online run sent, without the preflight's and without the scheduling priority."""
    bodies = [b for b in server.requests if tuple(b["messages"]) != PREFLIGHT_MESSAGES]
    return [{k: v for k, v in b.items() if k != "priority"} for b in bodies]


def canonical(bodies: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(b, option=orjson.OPT_SORT_KEYS) for b in bodies]


async def test_export_writes_one_batch_line_per_request_with_the_body_sent_online(
    tmp_path: Path, files: dict[str, list[Path]], openai_server: OpenAITestServer
) -> None:
    openai_server.responder = respond
    cfg = config(openai_server)
    await run_scoring(data(files), cfg, tmp_path / "online")

    done = await export_batch(data(files), files, cfg, tmp_path / "batch")

    lines = [orjson.loads(line) for line in done.path.read_bytes().splitlines()]
    assert {(line["method"], line["url"]) for line in lines} == {("POST", BATCH_URL)}
    assert done.requests == len(lines) == 9 * 7  # 9 steps: ptrue two requests, the other five one (pro's samples)
    ids = [line["custom_id"] for line in lines]
    assert len(set(ids)) == len(ids)
    tag = orjson.loads((tmp_path / "batch" / "batch.json").read_bytes())["tag"]
    parts = {tuple(cid.split("/")) for cid in ids}
    assert {p[0] for p in parts} == {tag}
    assert {p[1] for p in parts} == {f"s|0|{m}|" for m in SIX}  # the lane: stream, order, method, critic
    assert {(p[2], p[3]) for p in parts} == {(f"t{i}", str(t)) for i in range(3) for t in range(3)}
    assert {p[4] for p in parts if "|ptrue|" in p[1]} == {"0", "1"}
    # The bodies of the online run, less pro's teacher forcing (the next round) and the priority.
    exported = Counter(canonical([line["body"] for line in lines]))
    online = Counter(canonical(sent(openai_server)))
    assert not exported - online
    left = [orjson.loads(b) for b in (online - exported).elements()]
    assert len(left) == 9 and all("prompt_logprobs" in b for b in left)
    assert {b["messages"][-1]["content"] for b in left} == {s.action for t in stream() for s in t.steps}
    assert all("priority" not in line["body"] for line in lines)


async def test_import_of_two_rounds_gives_the_scores_and_metrics_of_the_online_run(
    tmp_path: Path, files: dict[str, list[Path]], openai_server: OpenAITestServer
) -> None:
    openai_server.responder = respond
    cfg = config(openai_server)
    await run_scoring(data(files), cfg, tmp_path / "online")
    online = scores(tmp_path / "online")
    batch, run = tmp_path / "batch", tmp_path / "run"
    first = await export_batch(data(files), files, cfg, batch)

    await run_batch(openai_server, first.path, tmp_path / "out-1.jsonl")
    second = await import_batch(data(files), batch, [tmp_path / "out-1.jsonl"], run)

    # pro teacher-forces the frozen action only once its samples came back with log-probs: a second round.
    assert second.round == 2 and second.requests == 9
    assert {r.custom_id.split("/")[1] for r in read_requests(second.path)} == {"s|0|pro|"}
    waiting = {k: v for k, v in scores(run).items() if k[0] == "pro"}
    assert set(waiting.values()) == {None}
    assert {k: v for k, v in scores(run).items() if k[0] != "pro"} == {k: v for k, v in online.items() if k[0] != "pro"}

    await run_batch(openai_server, second.path, tmp_path / "out-2.jsonl")
    final = await import_batch(data(files), batch, [tmp_path / "out-2.jsonl"], run, overwrite=True)

    assert final.path is None and final.unanswered == 0
    assert final.summary is not None and final.summary.steps_scored == 9 * 6 and final.summary.steps_failed == 0
    assert scores(run) == online and all(v is not None for v in online.values())
    assert run_metrics(run)["results"] == run_metrics(tmp_path / "online")["results"]
    rows = {(r["method"], r["trajectory"], r["step"]): r for r in read_rows(run / "scores.jsonl")}
    online_rows = {
        (r["method"], r["trajectory"], r["step"]): r for r in read_rows(tmp_path / "online" / "scores.jsonl")
    }
    for key, row in rows.items():  # token counts come from the replies' usage, as online
        assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (
            online_rows[key]["requests"],
            online_rows[key]["prompt_tokens"],
            online_rows[key]["completion_tokens"],
        )
    assert (run / "summary.json").is_file() and (run / "config.json").is_file()


async def _exported(tmp_path: Path, files: dict[str, list[Path]], server: OpenAITestServer, methods: list[str]) -> Path:
    server.responder = respond
    done = await export_batch(data(files), files, config(server, methods), tmp_path / "batch")
    assert done.path is not None
    return done.path


async def test_a_failed_request_and_a_missing_line_are_failed_steps_with_the_reason(
    tmp_path: Path, files: dict[str, list[Path]], openai_server: OpenAITestServer
) -> None:
    requests = await _exported(tmp_path, files, openai_server, ["verbalized"])
    await run_batch(openai_server, requests, tmp_path / "out.jsonl")
    lines = [orjson.loads(line) for line in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    refused = {"status_code": 400, "request_id": "r", "body": None}
    lines[0] |= {"response": refused, "error": {"code": "invalid_request", "message": "too many tokens"}}  # OpenAI's
    vllm_error = {"error": {"message": "n must be 1", "type": "BadRequestError", "param": None, "code": 400}}
    lines[1] |= {"response": refused, "error": vllm_error}  # vLLM's run-batch: an error response
    missing = lines.pop()["custom_id"]
    (tmp_path / "out.jsonl").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))

    done = await import_batch(data(files), tmp_path / "batch", [tmp_path / "out.jsonl"], tmp_path / "run")

    assert done.path is None and done.unanswered == 1
    assert done.summary is not None and done.summary.steps_failed == 3 and done.summary.steps_scored == 6
    errors = {r["trajectory"] + "/" + str(r["step"]): r["error"] for r in read_rows(tmp_path / "run" / "scores.jsonl")}
    first = lines[0]["custom_id"].split("/")
    assert "400 from the Batch: too many tokens" in errors[f"{first[2]}/{first[3]}"]
    second = lines[1]["custom_id"].split("/")
    assert "400 from the Batch: n must be 1 [" in errors[f"{second[2]}/{second[3]}"]
    gone = missing.split("/")
    assert f"no reply in the Batch output for {missing}" in errors[f"{gone[2]}/{gone[3]}"]


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        (b"{not json", "<line>", "not JSON"),
        (b'{"id": "x", "response": null, "error": null}', "custom_id", "missing"),
        (
            b'{"id": "x", "custom_id": "elsewhere/0", "response": null, "error": null}',
            "custom_id",
            "in no request file",
        ),
        (b'{"id": "x", "custom_id": "@ID", "response": {"status_code": 200}, "error": null}', "response.body", "2xx"),
    ],
)
async def test_a_bad_output_line_is_refused_naming_the_file_line_and_field(
    tmp_path: Path,
    files: dict[str, list[Path]],
    openai_server: OpenAITestServer,
    line: bytes,
    field: str,
    message: str,
) -> None:
    requests = await _exported(tmp_path, files, openai_server, ["verbalized"])
    await run_batch(openai_server, requests, tmp_path / "out.jsonl")
    good = (tmp_path / "out.jsonl").read_bytes().splitlines()
    second = read_requests(requests)[1].custom_id  # the id of the line replaced
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join([good[0], line.replace(b"@ID", second.encode()), *good[2:]]) + b"\n")

    with pytest.raises(DataError, match=rf"bad\.jsonl:2: field {field}: .*{message}"):
        await import_batch(data(files), tmp_path / "batch", [bad], tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert not BatchDir(tmp_path / "batch").output_file(1).exists()  # nothing imported from a refused file


async def test_methods_that_cannot_be_batched_are_refused_with_the_reason(
    tmp_path: Path, files: dict[str, list[Path]], openai_server: OpenAITestServer
) -> None:
    with pytest.raises(ConfigError, match=r"ceb, static cannot go through a Batch file: only the bank-free"):
        await export_batch(data(files), files, config(openai_server, ["ceb", "static", "ppl"]), tmp_path / "b")
    actor = config(openai_server, ["pro"]).model_copy(
        update={"baselines": config(openai_server).baselines.model_copy(update={"actor_model": "other"})}
    )
    with pytest.raises(ConfigError, match="a Batch file serves one model"):
        await export_batch(data(files), files, actor, tmp_path / "b")
    assert not (tmp_path / "b").exists()


async def test_an_import_refuses_a_stream_changed_since_the_export(
    tmp_path: Path, files: dict[str, list[Path]], openai_server: OpenAITestServer
) -> None:
    requests = await _exported(tmp_path, files, openai_server, ["ppl"])
    await run_batch(openai_server, requests, tmp_path / "out.jsonl")
    write_stream(files["s"][0], stream()[:2])

    with pytest.raises(RunError, match=r"s\.jsonl: changed since the batch export"):
        BatchDir(tmp_path / "batch").streams()


async def test_an_export_is_the_same_file_each_time_and_refuses_an_existing_export(
    tmp_path: Path, files: dict[str, list[Path]], openai_server: OpenAITestServer
) -> None:
    cfg = config(openai_server, ["ptrue", "cot"])
    one = await export_batch(data(files), files, cfg, tmp_path / "one")
    two = await export_batch(data(files), files, cfg, tmp_path / "two")
    assert one.path is not None and two.path is not None
    assert one.path.read_bytes() == two.path.read_bytes()
    with pytest.raises(RunError, match="already holds a batch export"):
        await export_batch(data(files), files, cfg, tmp_path / "one")


async def test_openais_output_and_error_files_are_read_together_and_a_wrong_rounds_output_is_refused(
    tmp_path: Path, files: dict[str, list[Path]], openai_server: OpenAITestServer
) -> None:
    cfg = config(openai_server, ["pro"])
    openai_server.responder = respond
    first = await export_batch(data(files), files, cfg, tmp_path / "batch")
    await run_batch(openai_server, first.path, tmp_path / "out-1.jsonl")
    lines = (tmp_path / "out-1.jsonl").read_bytes().splitlines()
    failed = orjson.loads(lines[0]) | {"response": None, "error": {"code": "batch_expired", "message": "expired"}}
    (tmp_path / "output.jsonl").write_bytes(b"\n".join(lines[1:]) + b"\n")
    (tmp_path / "errors.jsonl").write_bytes(orjson.dumps(failed))  # OpenAI's error file: the failed lines
    both = [tmp_path / "output.jsonl", tmp_path / "errors.jsonl"]

    with pytest.raises(RunError, match=r"output\.jsonl: .* is answered in .*output\.jsonl too"):
        await import_batch(data(files), tmp_path / "batch", [*both, tmp_path / "output.jsonl"], tmp_path / "run")
    second = await import_batch(data(files), tmp_path / "batch", both, tmp_path / "run")

    assert second.round == 2 and second.requests == 8  # the expired step has no samples: no teacher forcing
    expired = {
        r["error"] for r in read_rows(tmp_path / "run" / "scores.jsonl") if r["error"] and "expired" in r["error"]
    }
    assert len(expired) == 1 and "not run by the Batch: expired" in expired.pop()  # no response: no status to give
    with pytest.raises(RunError, match=r"a request of an earlier round; give the output of round 2"):
        await import_batch(
            data(files), tmp_path / "batch", [tmp_path / "output.jsonl"], tmp_path / "run", overwrite=True
        )


async def test_an_output_given_later_for_the_last_round_adds_to_what_was_imported_and_loses_no_reply(
    tmp_path: Path, files: dict[str, list[Path]], openai_server: OpenAITestServer
) -> None:
    # OpenAI's output and error files are downloaded apart: the error file imported after the output must not
    # drop the output's replies (it did: the round's imported output was replaced by the error file alone).
    requests = await _exported(tmp_path, files, openai_server, ["verbalized"])
    await run_batch(openai_server, requests, tmp_path / "all.jsonl")
    lines = (tmp_path / "all.jsonl").read_bytes().splitlines()
    failed = orjson.loads(lines[0]) | {"response": None, "error": {"code": "batch_expired", "message": "expired"}}
    (tmp_path / "output.jsonl").write_bytes(b"\n".join(lines[1:]) + b"\n")
    (tmp_path / "errors.jsonl").write_bytes(orjson.dumps(failed) + b"\n")
    batch, run = tmp_path / "batch", tmp_path / "run"
    first = await import_batch(data(files), batch, [tmp_path / "output.jsonl"], run)
    assert first.summary is not None and first.summary.steps_scored == 8 and first.unanswered == 1

    later = await import_batch(data(files), batch, [tmp_path / "errors.jsonl"], run, overwrite=True)

    assert later.summary is not None and later.summary.steps_scored == 8 and later.summary.steps_failed == 1
    assert later.unanswered == 0 and later.replies == 9
    assert any("expired" in (r["error"] or "") for r in read_rows(run / "scores.jsonl"))
    # A request answered again takes the new answer: the batch run again in full replaces every line.
    again = await import_batch(data(files), batch, [tmp_path / "all.jsonl"], run, overwrite=True)
    assert again.summary is not None and again.summary.steps_scored == 9 and again.replies == 9


async def test_an_import_into_a_run_with_results_is_refused_before_anything_is_copied_in(
    tmp_path: Path, files: dict[str, list[Path]], openai_server: OpenAITestServer
) -> None:
    requests = await _exported(tmp_path, files, openai_server, ["verbalized"])
    await run_batch(openai_server, requests, tmp_path / "out.jsonl")
    lines = (tmp_path / "out.jsonl").read_bytes().splitlines()
    (tmp_path / "part.jsonl").write_bytes(b"\n".join(lines[:4]) + b"\n")
    batch, run = tmp_path / "batch", tmp_path / "run"
    await import_batch(data(files), batch, [tmp_path / "out.jsonl"], run)
    imported = BatchDir(batch).output_file(1).read_bytes()

    # ceb batch import has no --resume: the message must not send the user to one.
    with pytest.raises(RunError, match=r"already holds results .*--overwrite") as refused:
        await import_batch(data(files), batch, [tmp_path / "part.jsonl"], run)
    assert "--resume" not in str(refused.value)
    assert BatchDir(batch).output_file(1).read_bytes() == imported


async def test_a_cot_reply_that_cannot_be_read_is_re_asked_in_the_next_round_as_online(
    tmp_path: Path, files: dict[str, list[Path]], openai_server: OpenAITestServer
) -> None:
    def unreadable_first(body: dict[str, Any], i: int) -> Reply:
        if REASK_PREFIX in body["messages"][-1]["content"]:  # the re-ask, after the reply below
            return respond(body, i)
        return Reply("confidence: high")

    openai_server.responder = unreadable_first
    cfg = config(openai_server, ["cot"])
    await run_scoring(data(files), cfg, tmp_path / "online")
    batch, run = tmp_path / "batch", tmp_path / "run"
    first = await export_batch(data(files), files, cfg, batch)
    assert first.path is not None
    await run_batch(openai_server, first.path, tmp_path / "out-1.jsonl")

    second = await import_batch(data(files), batch, [tmp_path / "out-1.jsonl"], run)

    assert second.path is not None and second.round == 2 and second.requests == 9
    assert {r.custom_id.rsplit("/", 1)[1] for r in read_requests(second.path)} == {"1"}  # after round 1's /0
    assert all(REASK_PREFIX in r.body["messages"][-1]["content"] for r in read_requests(second.path))
    await run_batch(openai_server, second.path, tmp_path / "out-2.jsonl")
    final = await import_batch(data(files), batch, [tmp_path / "out-2.jsonl"], run, overwrite=True)
    assert final.path is None and final.summary is not None and final.summary.steps_scored == 9
    assert scores(run) == scores(tmp_path / "online") and None not in scores(run).values()
    assert {r["requests"] for r in read_rows(run / "scores.jsonl")} == {2}
