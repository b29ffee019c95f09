"""cl100k_base token cost of the critic prompt: the encoding is cl100k_base, the counts are exact."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
import tiktoken
import tiktoken_ext.openai_public as openai_public
from hypothesis import given, settings

from ceb.bank import BankRecord, Hit, Retrieval
from ceb.config import load_config
from ceb.data import convert_intercode, read_stream
from ceb.pipeline import read_rows, run_scoring
from ceb.stages import CriticInput, HistoryItem, LLMCritic, PromptSet
from ceb.stages.tokens import PromptTokenCounter, cl100k_base
from tests.support.builders import step, trajectory
from tests.support.paths import INTERCODE

pytestmark = pytest.mark.anyio


def test_bundled_encoding_is_tiktokens_own_cl100k_base(monkeypatch):
    """tiktoken's cl100k_base definition, with its ranks read from the bundled file, is the encoding we use."""
    ours = cl100k_base()
    # tiktoken's constructor would download the ranks; hand it ours instead (load checks the official SHA-256).
    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *a, **kw: ours._mergeable_ranks)
    official = tiktoken.Encoding(**openai_public.cl100k_base())
    assert official._pat_str == ours._pat_str
    assert official._special_tokens == ours._special_tokens
    assert ours.n_vocab == 100277
    # Well-known cl100k_base ids.
    assert ours.encode_ordinary("hello world") == [15339, 1917]
    assert ours.encode("<|endoftext|>", allowed_special="all") == [100257]


def _counter() -> PromptTokenCounter:
    return PromptTokenCounter(PromptSet())


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab Z9\n\r\t .:'-_é中\u00a0")), max_size=200))
def test_line_group_sum_equals_one_encoding_of_random_text(text):
    counter = _counter()
    assert counter.text_tokens(text) == len(counter.encoding.encode_ordinary(text))


def _record(i: int, label: int) -> BankRecord:
    return BankRecord(
        task=f"task {i}",
        state=f"state {i} " * 20,
        action=f"grep -r pattern{i} .",
        observation=f"match {i}\n" * 5,
        pseudo_label=label,
        soft_vote=float(label),
        score=0.4,
        agreement=label == 0,
        trajectory_id=f"old{i}",
        step=0,
    )


def _input(k: int, *, use_bank: bool = True) -> CriticInput:
    pos = tuple(Hit(_record(i, 1), 0.5) for i in range(k))
    neg = tuple(Hit(_record(10 + i, 0), 0.4) for i in range(k))
    return CriticInput(
        domain="shell",
        task="find the files that mention pattern",
        step=1,
        state="a.txt b.txt",
        action="grep -rl pattern .",
        history=(HistoryItem("ls", "a.txt b.txt", 0.7),),
        retrieval=Retrieval(positives=pos, negatives=neg) if use_bank else Retrieval(),
        use_bank=use_bank,
    )


def _tokens(messages) -> int:
    return sum(len(cl100k_base().encode_ordinary(m["content"])) for m in messages)


def test_input_tokens_are_those_of_the_prompt_the_critic_sends():
    counter = _counter()
    critic = LLMCritic(chat=None, prompts=counter.prompts)  # type: ignore[arg-type]
    inp = _input(2)
    assert counter.count(inp).input == _tokens(critic.messages(inp))


def test_bank_tokens_are_the_precedent_sections_share():
    counter = _counter()
    critic = LLMCritic(chat=None, prompts=counter.prompts)  # type: ignore[arg-type]
    static = counter.count(_input(0, use_bank=False))
    assert static.bank == 0 and static.input == _tokens(critic.messages(_input(0, use_bank=False)))
    costs = [counter.count(_input(k)) for k in (0, 1, 2, 5)]
    # With the bank on, the input is a fixed overhead plus the section: the bank-free prompt, and the system
    # prompt's description of precedents (which the static critic's system prompt leaves out), not counted as bank.
    overhead = {c.input - c.bank for c in costs}
    assert len(overhead) == 1 and static.input < overhead.pop() < static.input + 200
    # An empty bank still shows the section's heading and its "no records yet" line.
    assert costs[0].bank > 0
    # Each extra pair of precedents costs about the same (the records differ only in their numbers).
    per_pair = [
        (b.bank - a.bank) / (kb - ka) for a, b, ka, kb in zip(costs[:-1], costs[1:], (0, 1, 2), (1, 2, 5), strict=True)
    ]
    assert per_pair[0] > 50 and max(per_pair) - min(per_pair) <= 0.05 * per_pair[0]


def test_counts_are_exact_on_real_prompts(tmp_path):
    """Real shell and SQL steps, with history and precedents: the line-group sum equals one encoding."""
    counter = _counter()
    critic = LLMCritic(chat=None, prompts=counter.prompts)  # type: ignore[arg-type]
    checked = 0
    for converted in convert_intercode(INTERCODE, tmp_path):
        for traj in read_stream([converted.path])[:8]:
            records = tuple(Hit(_record(i, i % 2), 0.5) for i in range(2))
            for t, s in enumerate(traj.steps):
                history = tuple(HistoryItem(p.action, p.observation, 0.5) for p in traj.steps[:t])
                inp = CriticInput(
                    domain=traj.domain,
                    task=traj.task,
                    step=t,
                    state=s.state,
                    action=s.action,
                    history=history,
                    retrieval=Retrieval(positives=records[:1], negatives=records[1:]),
                )
                assert counter.tokens(inp) == _tokens(critic.messages(inp))
                checked += 1
    assert checked > 500


def _stream():
    return [
        trajectory(f"t{i}", step("ls", "a b", label=1), step("cat a", "text", label=i % 2), task=f"read file {i}")
        for i in range(4)
    ]


async def test_rows_carry_token_counts_for_llm_critic_methods_only(tmp_path):
    config = load_config(overrides={"methods": ["ceb", "static", "ceb-k1", "ppl"], "critic": {"count_tokens": True}})
    await run_scoring({"s": _stream()}, config, tmp_path)
    rows = list(read_rows(tmp_path / "scores.jsonl"))
    by = {m: [r for r in rows if r["method"] == m] for m in ("ceb", "static", "ceb-k1", "ppl")}
    assert all(r["input_tokens"] > 0 and r["bank_tokens"] > 0 for r in by["ceb"])
    assert all(r["input_tokens"] > 0 and r["bank_tokens"] == 0 for r in by["static"])
    assert all(r["input_tokens"] is None and r["bank_tokens"] is None for r in by["ppl"])
    # Later trajectories see records: k=2 shows more of them than k=1, never fewer.
    last = {m: [r["bank_tokens"] for r in by[m] if r["position"] == 3] for m in ("ceb", "ceb-k1")}
    assert all(a > b for a, b in zip(last["ceb"], last["ceb-k1"], strict=True))


async def test_counting_is_off_by_default(tmp_path):
    await run_scoring({"s": _stream()}, load_config(overrides={"methods": ["ceb"]}), tmp_path)
    assert all(r["input_tokens"] is None for r in read_rows(tmp_path / "scores.jsonl"))
