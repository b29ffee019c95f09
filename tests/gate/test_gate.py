"""The live gate: the same step function as the lanes, per-stream order, durability and the decision thresholds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import anyio
import orjson
import pytest

from ceb.config import GateConfig, RunConfig, load_config
from ceb.data import convert_intercode, read_stream
from ceb.data.reader import trajectory_object
from ceb.data.trajectory import Step, Trajectory
from ceb.errors import ConfigError, DataError, DuplicateTrajectoryError, OverloadedError, StreamLimitError
from ceb.gate import Gate, Receipt, StepContext, SyncGate
from ceb.gate import stream as gate_stream
from ceb.gate.inbox import Inbox
from ceb.pipeline import read_step_rows, run_scoring
from ceb.serve.payloads import parse_score_request, parse_trajectory_request
from ceb.stages.assembly import Stages, offline_stages
from ceb.stages.base import HindsightResult
from ceb.stages.offline import OfflineHindsight
from tests.support.builders import step, trajectory
from tests.support.paths import INTERCODE

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def gpt4_stream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("streams")
    convert_intercode(INTERCODE, out, datasets=("bash",))
    return out / "intercode-bash-gpt-4.jsonl"


async def _replay(gate: Gate, stream: str, trajs: list[Trajectory]) -> dict[tuple[str, int], float | None]:
    scores = {}
    for traj in trajs:
        for t in range(len(traj.steps)):
            c = await gate.score(stream, StepContext.of(traj, t))
            scores[(traj.id, t)] = c.score
        await gate.finish(stream, traj)
    return scores


async def test_replaying_a_real_stream_through_the_gate_gives_ceb_scores_scores_and_bank(
    gpt4_stream: Path, tmp_path: Path
) -> None:
    trajs = read_stream([gpt4_stream])
    config = load_config(overrides={"methods": ("ceb",)})
    await run_scoring({"s": trajs}, config, tmp_path / "run")
    batch = {(r.trajectory, r.step): r.score for r in read_step_rows(tmp_path / "run" / "scores.jsonl")}

    async with Gate(config) as gate:
        live = await _replay(gate, "s", trajs)
        gate.bank("s").save(tmp_path / "gate-bank.json")

    assert live == batch and len(live) == sum(len(t.steps) for t in trajs)
    assert len({s for s in live.values()}) > 10  # the bank moved the scores: not a constant prior
    assert (tmp_path / "gate-bank.json").read_bytes() == (tmp_path / "run" / "banks" / "s__ceb.json").read_bytes()


async def test_a_durable_gate_reopened_after_each_trajectory_still_matches(gpt4_stream: Path, tmp_path: Path) -> None:
    trajs = read_stream([gpt4_stream])[:12]
    config = load_config(overrides={"methods": ("ceb",)})
    async with Gate(config) as gate:
        expected = await _replay(gate, "s", trajs)
        reference = gate.bank("s").to_document()
    live = {}
    for traj in trajs:  # a new process for every trajectory: the bank comes back from its journal
        async with Gate(config, state_dir=tmp_path / "state") as gate:
            live |= await _replay(gate, "s", [traj])
    async with Gate(config, state_dir=tmp_path / "state") as gate:
        assert gate.bank("s").to_document() == reference
        assert gate.stats("s")["streams"]["s"]["bank_version"] == len(trajs)
    assert live == expected


def test_the_sync_wrapper_scores_and_banks() -> None:
    traj = trajectory("t0", step("ls", "a.txt"), step("cat a.txt", "hello"))
    with SyncGate() as gate:
        first = gate.score("agent", StepContext.of(traj, 0))
        banked = gate.finish("agent", traj)
        again = gate.score("agent", StepContext.of(traj, 0))
        stats = gate.stats()
    assert first.score == 0.5 and first.bank_version == 0 and first.precedents == ()
    assert banked.seq == 1 and banked.records_added == 2 and banked.bank_version == 1
    assert again.bank_version == 1 and again.bank_size == 2 and len(again.precedents) == 2
    assert stats["streams"]["agent"]["records"] == 2 and stats["method"] == "ceb"


@pytest.mark.parametrize(
    ("score", "decision"), [(0.9, "allow"), (0.5, "allow"), (0.49, "review"), (0.2, "review"), (0.1, "block")]
)
def test_decisions_follow_the_thresholds(score: float, decision: str) -> None:
    gate = Gate(RunConfig(gate=GateConfig(allow=0.5, block=0.2)))
    assert gate.decide(score) == decision
    assert gate.decide(None) == "review"


def test_thresholds_out_of_order_and_label_methods_are_refused() -> None:
    with pytest.raises(ConfigError, match="block"):
        load_config(overrides={"gate": {"allow": 0.3, "block": 0.6}})
    with pytest.raises(ConfigError, match="held-out labels"):
        Gate(RunConfig(gate=GateConfig(method="ceb-gt-oracle")))


async def test_a_bad_stream_name_is_a_data_error_naming_the_field() -> None:
    async with Gate() as gate:
        with pytest.raises(DataError) as info:
            await gate.score("../etc", StepContext.of(trajectory("t", step("ls")), 0))
    assert info.value.problem.field == "stream"


async def test_history_carries_the_scores_the_gate_gave_those_steps() -> None:
    seen = []

    class Spy:
        async def score(self, inp):  # type: ignore[no-untyped-def]
            seen.append(inp)
            return await offline.critic.score(inp)

    offline = offline_stages(RunConfig(), None)  # type: ignore[arg-type]
    labelled = trajectory("t0", step("ls", "x", label=1), step("ls", "x", label=0))
    async with Gate() as gate:
        gate.critic = Spy()
        a = await gate.score("s", StepContext.of(labelled, 0))
        b = await gate.score("s", StepContext.of(labelled, 1))
    assert seen[1].history[0].score == a.score and b.repetition_flag and b.step == 1


async def test_updates_apply_in_acceptance_order_while_scores_go_on(tmp_path: Path) -> None:
    order: list[str] = []
    release = anyio.Event()

    class SlowFirst(OfflineHindsight):
        async def label(self, trajectory: Trajectory, votes: int) -> HindsightResult:
            if trajectory.id == "t0":
                await release.wait()  # the first trajectory's votes are slow
            order.append(trajectory.id)
            return await super().label(trajectory, votes)

    stages = offline_stages(RunConfig(), None)  # type: ignore[arg-type]
    stages.hindsight = SlowFirst()
    trajs = [trajectory(f"t{i}", step(f"echo {i}", f"{i}")) for i in range(3)]
    async with Gate(stages=stages) as gate:
        seqs = [(await gate.accept("s", t)).seq for t in trajs]
        other = await gate.finish("other", trajs[1])  # another stream is not held up
        c = await gate.score("s", StepContext.of(trajs[2], 0))  # nor is scoring: it sees version 0
        assert (c.bank_version, other.bank_version) == (0, 1)
        release.set()
        await gate.flush("s")
        assert gate.stats("s")["streams"]["s"]["bank_version"] == 3
    assert seqs == [1, 2, 3] and order == ["t1", "t0", "t1", "t2"]


async def test_an_overloaded_stream_refuses_more_trajectories() -> None:
    never = anyio.Event()

    class Stuck(OfflineHindsight):
        async def label(self, trajectory: Trajectory, votes: int) -> HindsightResult:
            await never.wait()
            raise AssertionError

    stages = offline_stages(RunConfig(), None)  # type: ignore[arg-type]
    stages.hindsight = Stuck()
    config = RunConfig(gate=GateConfig(max_pending=2))
    with anyio.move_on_after(5):
        async with Gate(config, stages=stages, state_dir=None) as gate:
            await gate.accept("s", trajectory("a", step("ls")))
            await gate.accept("s", trajectory("b", step("ls")))
            with pytest.raises(OverloadedError):
                await gate.accept("s", trajectory("c", step("ls")))
            never.set()


async def test_acknowledged_trajectories_left_unapplied_are_replayed_at_the_next_start(tmp_path: Path) -> None:
    never = anyio.Event()

    class Stuck(OfflineHindsight):
        async def label(self, trajectory: Trajectory, votes: int) -> HindsightResult:
            await never.wait()
            raise AssertionError

    stages = offline_stages(RunConfig(), None)  # type: ignore[arg-type]
    stages.hindsight = Stuck()
    trajs = [trajectory(f"t{i}", step(f"echo {i}", f"{i}"), step("ls", "a")) for i in range(3)]
    async with Gate(stages=stages, state_dir=tmp_path) as gate:
        for t in trajs:
            await gate.accept("s", t)
    inbox = (tmp_path / "s" / "inbox.jsonl").read_bytes().splitlines()
    assert [orjson.loads(line)["seq"] for line in inbox] == [1, 2, 3]
    async with Gate(state_dir=tmp_path) as gate:
        await gate.flush()
        bank = gate.bank("s")
        assert {r.trajectory_id for r in bank.records} == {"t0", "t1", "t2"}
        assert gate.stats("s")["streams"]["s"]["bank_version"] == 3
    async with Gate(state_dir=tmp_path) as gate:  # nothing applied twice
        assert len(gate.bank("s")) == len(bank)


async def test_a_journal_line_carries_its_trajectory_seq(tmp_path: Path) -> None:
    async with Gate(state_dir=tmp_path) as gate:
        await gate.finish("s", trajectory("t0", step("ls", "a")))
        await gate.finish("s", trajectory("t1", step("pwd", "/")))
    lines = [orjson.loads(x) for x in (tmp_path / "s" / "bank.journal").read_bytes().splitlines()]
    assert [d.get("mark") for d in lines[1:]] == [1, 2]


def _stuck_stages() -> Stages:
    """Offline stages whose hindsight never answers: accepted trajectories stay pending."""

    class Stuck(OfflineHindsight):
        async def label(self, trajectory: Trajectory, votes: int) -> HindsightResult:
            await anyio.sleep_forever()
            raise AssertionError

    stages = offline_stages(RunConfig(), None)  # type: ignore[arg-type]
    stages.hindsight = Stuck()
    return stages


async def test_a_new_stream_beyond_max_streams_is_refused_and_the_others_keep_working() -> None:
    traj = trajectory("t0", step("ls", "a.txt"))
    async with Gate(RunConfig(gate=GateConfig(max_streams=2))) as gate:
        await gate.score("a", StepContext.of(traj, 0))
        await gate.finish("b", traj)
        with pytest.raises(StreamLimitError, match=r"gate\.max_streams = 2") as info:
            await gate.score("c", StepContext.of(traj, 0))
        with pytest.raises(StreamLimitError):
            await gate.accept("c", traj)
        assert (info.value.held, info.value.limit, info.value.field) == (2, 2, "stream")
        assert (await gate.finish("a", traj)).seq == 1 and (await gate.score("b", StepContext.of(traj, 0))).bank_size
        assert gate.streams == ["a", "b"]


async def test_streams_restored_from_the_state_directory_count_and_are_all_restored(tmp_path: Path) -> None:
    traj = trajectory("t0", step("ls", "a.txt"))
    async with Gate(state_dir=tmp_path) as gate:
        for name in ("a", "b", "c"):
            await gate.finish(name, traj)
    async with Gate(RunConfig(gate=GateConfig(max_streams=2)), state_dir=tmp_path) as gate:
        assert gate.streams == ["a", "b", "c"]  # more than the limit: every acknowledged trajectory comes back
        with pytest.raises(StreamLimitError, match="holds 3 streams"):
            await gate.score("d", StepContext.of(traj, 0))
        assert (await gate.score("c", StepContext.of(traj, 0))).bank_size == 1
    async with Gate(RunConfig(gate=GateConfig(max_streams=4)), state_dir=tmp_path) as gate:
        await gate.score("d", StepContext.of(traj, 0))
        with pytest.raises(StreamLimitError):
            await gate.score("e", StepContext.of(traj, 0))


async def test_a_trajectory_sent_twice_is_banked_once_and_gets_the_same_seq() -> None:
    first = trajectory("t0", step("ls", "a.txt", label=1), step("cat a.txt", "hi"))
    again = trajectory("t0", step("ls", "a.txt", label=0), step("cat a.txt", "hi"), meta={"try": 2})
    other = trajectory("t0", step("ls", "b.txt"))
    async with Gate() as gate:
        banked = await gate.finish("s", first)
        size = len(gate.bank("s"))
        # Labels and meta never reach a stage, so they do not make another trajectory.
        assert await gate.accept("s", again) == Receipt(1, replayed=True)
        assert await gate.finish("s", first) == replace(banked, replayed=True)
        with pytest.raises(DuplicateTrajectoryError, match="seq 1") as info:
            await gate.accept("s", other)
        assert (info.value.trajectory_id, info.value.seq, info.value.field) == ("t0", 1, "trajectory.id")
        assert (await gate.accept("other-stream", other)).seq == 1  # ids are per stream
        await gate.flush()
        stats = gate.stats("s")["streams"]["s"]
        assert len(gate.bank("s")) == size == 2 and {r.trajectory_id for r in gate.bank("s").records} == {"t0"}
        assert (stats["accepted"], stats["replayed"], stats["bank_version"]) == (1, 2, 1)


async def test_concurrent_copies_of_one_trajectory_are_accepted_once() -> None:
    traj = trajectory("t0", step("ls", "a.txt"))
    receipts: list[Receipt] = []
    async with Gate() as gate:

        async def send() -> None:
            receipts.append(await gate.accept("s", traj))

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(send)
        await gate.flush()
        assert len(gate.bank("s")) == 1
    assert sorted(r.replayed for r in receipts) == [False, True, True, True, True] and {r.seq for r in receipts} == {1}


async def test_a_retry_is_acknowledged_even_when_the_stream_is_full(tmp_path: Path) -> None:
    config = RunConfig(gate=GateConfig(max_pending=1))
    traj = trajectory("t0", step("ls"))
    async with Gate(config, stages=_stuck_stages(), state_dir=tmp_path) as gate:
        assert (await gate.accept("s", traj)).seq == 1
        assert await gate.accept("s", traj) == Receipt(1, replayed=True)
        with pytest.raises(OverloadedError):
            await gate.accept("s", trajectory("t1", step("ls")))


async def test_ids_are_known_after_a_restart_pending_or_banked(tmp_path: Path) -> None:
    banked = [trajectory(f"t{i}", step(f"echo {i}", f"{i}")) for i in range(2)]
    waiting = trajectory("w", step("pwd", "/"))
    async with Gate(state_dir=tmp_path) as gate:
        for t in banked:
            await gate.finish("s", t)
    async with Gate(stages=_stuck_stages(), state_dir=tmp_path) as gate:
        assert (await gate.accept("s", waiting)).seq == 3  # acknowledged, never applied
    async with Gate(state_dir=tmp_path) as gate:
        assert await gate.accept("s", banked[0]) == Receipt(1, replayed=True)
        assert await gate.accept("s", waiting) == Receipt(3, replayed=True)
        with pytest.raises(DuplicateTrajectoryError):
            await gate.accept("s", trajectory("t1", step("echo 1", "another output")))
        await gate.flush()
        ids = [r.trajectory_id for r in gate.bank("s").records]
        assert sorted(ids) == ["t0", "t1", "w"] and gate.stats("s")["streams"]["s"]["bank_version"] == 3
        assert (await gate.accept("s", trajectory("t2", step("ls")))).seq == 4


async def test_ids_survive_inbox_compaction_and_a_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_stream, "_COMPACT_LINES", 4)
    trajs = [trajectory(f"t{i}", step(f"echo {i}", f"{i}")) for i in range(10)]
    async with Gate(state_dir=tmp_path) as gate:
        for t in trajs:
            await gate.finish("s", t)
    inbox = (tmp_path / "s" / "inbox.jsonl").read_bytes().splitlines()
    ids_file = (tmp_path / "s" / "inbox.ids.jsonl").read_bytes().splitlines()
    assert len(inbox) < 4 and [orjson.loads(x)["id"] for x in ids_file] == [f"t{i}" for i in range(len(ids_file))]
    async with Gate(state_dir=tmp_path) as gate:
        receipts = [await gate.accept("s", t) for t in trajs]
        with pytest.raises(DuplicateTrajectoryError):
            await gate.accept("s", trajectory("t0", step("echo 0", "changed")))
        await gate.flush()
        assert len(gate.bank("s")) == 10
    assert receipts == [Receipt(i + 1, replayed=True) for i in range(10)]


async def test_a_torn_last_line_of_the_ids_file_is_cut_and_its_id_still_known(tmp_path: Path) -> None:
    async with Gate(state_dir=tmp_path) as gate:
        for i in range(3):
            await gate.finish("s", trajectory(f"t{i}", step(f"echo {i}", f"{i}")))
    inbox_path = tmp_path / "s" / "inbox.jsonl"
    inbox, entries, _ = Inbox.open(inbox_path)
    inbox.compact(entries[2:])  # t0 and t1 leave the inbox for the ids file
    inbox.close()
    ids_path = tmp_path / "s" / "inbox.ids.jsonl"
    assert len(ids_path.read_bytes().splitlines()) == 2
    with ids_path.open("ab") as f:
        f.write(b'{"seq": 3, "id": "t2", "fing')  # killed mid-line during a later compaction
    inbox, entries, known = Inbox.open(inbox_path)
    inbox.close()
    assert [e.seq for e in entries] == [3] and {k: v[0] for k, v in known.items()} == {"t0": 1, "t1": 2, "t2": 3}
    assert len(ids_path.read_bytes().splitlines()) == 2 and ids_path.read_bytes().endswith(b"\n")


async def test_a_last_line_cut_just_before_its_newline_is_dropped_and_the_file_stays_readable(tmp_path: Path) -> None:
    async with Gate(stages=_stuck_stages(), state_dir=tmp_path) as gate:
        await gate.accept("s", trajectory("t0", step("ls", "a")))
        await gate.accept("s", trajectory("t1", step("pwd", "/")))
    path = tmp_path / "s" / "inbox.jsonl"
    path.write_bytes(path.read_bytes()[:-1])  # killed after the JSON of t1, before its newline and fsync
    async with Gate(stages=_stuck_stages(), state_dir=tmp_path) as gate:
        assert gate.stats("s")["streams"]["s"]["pending"] == 1  # t1 was never acknowledged
        assert await gate.accept("s", trajectory("t1", step("pwd", "/"))) == Receipt(2, replayed=False)
    inbox, entries, known = Inbox.open(path)
    inbox.close()
    assert [e.trajectory.id for e in entries] == ["t0", "t1"] and set(known) == {"t0", "t1"}


async def test_finishing_a_trajectory_banked_before_a_restart_is_acknowledged_once(tmp_path: Path) -> None:
    """The README's example run twice on one state directory: the second finish banks nothing and raises nothing."""
    traj = trajectory("run-1", step("ls -la", "a.txt b.txt"))
    async with Gate(state_dir=tmp_path) as gate:
        first = await gate.finish("s", traj)
    async with Gate(state_dir=tmp_path) as gate:
        again = await gate.finish("s", traj)
        stats = gate.stats("s")["streams"]["s"]
        records = len(gate.bank("s"))
    assert (first.seq, first.replayed, first.records_added) == (1, False, 1)
    assert (again.seq, again.replayed, again.records_added, again.votes) == (1, True, 0, ())
    assert (again.bank_version, again.bank_size) == (1, records) == (1, first.bank_size)
    assert (stats["accepted"], stats["replayed"]) == (1, 1)


@pytest.mark.parametrize(
    ("traj", "field"),
    [
        (trajectory("t", step("")), "steps[0].action"),
        (trajectory("t", step("ls"), step("   ")), "steps[1].action"),
        (trajectory("t", step("ls"), domain="Shell"), "domain"),
        (trajectory("t"), "steps"),
        (trajectory("", step("ls")), "id"),
    ],
)
async def test_finish_refuses_what_serve_refuses_with_one_line_naming_the_field(
    tmp_path: Path, traj: Trajectory, field: str
) -> None:
    with pytest.raises(DataError) as served:
        parse_trajectory_request({"stream": "s", "trajectory": trajectory_object(traj)})
    assert served.value.problem.field == f"trajectory.{field}"
    async with Gate(state_dir=tmp_path) as gate:
        with pytest.raises(DataError) as info:
            await gate.finish("s", traj)
        assert gate.streams == []  # nothing opened, nothing accepted
    assert info.value.problem.field == field and "\n" not in str(info.value) and field in str(info.value)


_SCORE = {"stream": "s", "trajectory_id": "run-1", "task": "list the files", "domain": "shell", "action": "ls"}


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"action": ""}, "action"),
        ({"domain": "Shell"}, "domain"),
        ({"trajectory_id": " "}, "trajectory_id"),
        ({"history": [{"state": "", "action": "", "observation": ""}]}, "history[0].action"),
    ],
)
async def test_score_refuses_what_serve_refuses_with_one_line_naming_the_field(over: dict, field: str) -> None:
    with pytest.raises(DataError) as served:
        parse_score_request(_SCORE | over)
    assert served.value.problem.field == field
    history = tuple(Step(**h) for h in over.get("history", ()))
    context = StepContext(
        over.get("trajectory_id", "run-1"), "list the files", over.get("domain", "shell"),
        Step("", over.get("action", "ls"), ""), history,
    )  # fmt: skip
    async with Gate() as gate:
        with pytest.raises(DataError) as info:
            await gate.score("s", context)
    shown = "proposal.action" if field == "action" else field
    assert info.value.problem.field == shown and "\n" not in str(info.value)


async def test_an_error_leaving_the_gate_block_is_itself_not_an_exception_group() -> None:
    with pytest.raises(DuplicateTrajectoryError, match="seq 1"):
        async with Gate() as gate:
            await gate.finish("s", trajectory("t", step("ls")))
            await gate.finish("s", trajectory("t", step("pwd")))
    with pytest.raises(DataError, match="domain"), SyncGate() as sync:
        sync.finish("s", trajectory("t", step("ls"), domain="Shell"))
