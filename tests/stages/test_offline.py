"""The offline stand-ins: the critic's formula and the hindsight rules, on hand-made cases."""

import pytest

from ceb.bank import BankRecord, Hit, Retrieval
from ceb.stages import CriticInput
from ceb.stages.offline import OfflineCritic, OfflineHindsight
from tests.support.builders import step, trajectory

pytestmark = pytest.mark.anyio


def hit(label: int, sim: float) -> Hit:
    r = BankRecord("q", "s", "a", "o", label, float(label), 0.5, None, "t", 0)
    return Hit(r, sim)


def inp(**kw) -> CriticInput:
    base = dict(domain="shell", task="q", step=0, state="s", action="a")
    return CriticInput(**(base | kw))


async def test_offline_critic_formula():
    # p0 = (3 + 1) / (8 + 2) = 0.4; weights 0.8^2 = 0.64 (y=1), 0.5^2 = 0.25 (y=1), 0.6^2 = 0.36 (y=0), 0 (y=0)
    # z = (0.64 + 0.25 + 1.0 * 0.4) / (0.64 + 0.25 + 0.36 + 0.0 + 1.0) = 1.29 / 2.25
    r = Retrieval(positives=(hit(1, 0.8), hit(1, 0.5)), negatives=(hit(0, 0.6), hit(0, 0.0)))
    res = await OfflineCritic().score(inp(retrieval=r, bank_size=8, bank_positive=3))
    assert res.score == pytest.approx(1.29 / 2.25)
    assert res.error is None and '"precedents":4' in res.raw


async def test_offline_critic_without_bank_is_the_prior_and_repetition_scales_it():
    assert (await OfflineCritic().score(inp())).score == pytest.approx(0.5)  # empty bank: p0 = 1/2
    static = inp(use_bank=False, retrieval=Retrieval(positives=(hit(1, 1.0),)), bank_size=10, bank_positive=10)
    assert (await OfflineCritic().score(static)).score == pytest.approx(0.5)  # static ignores the bank
    rep = await OfflineCritic(repetition_factor=0.6).score(inp(repetition_flag=True))
    assert rep.score == pytest.approx(0.3)


async def test_offline_critic_follows_the_closer_class():
    near_bad = Retrieval(positives=(hit(1, 0.1),), negatives=(hit(0, 0.9),))
    near_good = Retrieval(positives=(hit(1, 0.9),), negatives=(hit(0, 0.1),))
    bad = (await OfflineCritic().score(inp(retrieval=near_bad, bank_size=2, bank_positive=1))).score
    good = (await OfflineCritic().score(inp(retrieval=near_good, bank_size=2, bank_positive=1))).score
    assert bad < 0.5 < good


def test_offline_hindsight_rules():
    t = trajectory(
        "x",
        step("ls /testbed", "a.py b.py"),  # productive
        step("cat /nope", "cat: /nope: No such file or directory"),  # error
        step("ls /testbed", "a.py b.py"),  # repeat of step 1 (also no change)
        step("wc -l a.py", "3 a.py"),  # retried: the next action repeats it
        step("wc -l a.py ", "3 a.py"),  # repeat
        step("grep foo a.py", "foo"),  # productive
    )
    assert OfflineHindsight.rules(t) == [(1, ""), (0, "error"), (0, "repeat"), (0, "retried"), (0, "repeat"), (1, "")]


async def test_offline_hindsight_votes_are_identical_copies():
    t = trajectory("x", step("ls", "a"), step("cat x", "cat: x: No such file or directory"))
    res = await OfflineHindsight().label(t, 5)
    assert len(res.votes) == 5 and res.soft_votes == (1.0, 0.0) and res.pseudo_labels == (1, 0)


def test_offline_stages_never_read_labels_or_rewards():
    a = trajectory("x", step("ls", "a", label=1, reward=1.0), step("pwd", "/", label=0, reward=0.0))
    b = trajectory("x", step("ls", "a", label=0, reward=0.0), step("pwd", "/", label=1, reward=0.9))
    assert OfflineHindsight.rules(a) == OfflineHindsight.rules(b)
