"""The Critic Experience Bank: records, contrastive retrieval, bounding, persistence (paper sections 3.2-3.3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ceb.registry import Registry, lazy_exports

if TYPE_CHECKING:
    from ceb.bank.bank import BANK_FORMAT, BOUNDED_BANK_FORMAT, Bank, Hit, Retrieval
    from ceb.bank.journal import JOURNAL_FORMAT, BankJournal
    from ceb.bank.kernel import IncrementalTfidf
    from ceb.bank.record import BankRecord, agreement_flag, composite_key
    from ceb.bank.retrieval import TFIDF_PARAMS, Retriever, TfidfReference, class_split_topk, top_k

__all__ = [
    "BANK_FORMAT",
    "BOUNDED_BANK_FORMAT",
    "JOURNAL_FORMAT",
    "RETRIEVERS",
    "TFIDF_PARAMS",
    "Bank",
    "BankJournal",
    "BankRecord",
    "Hit",
    "IncrementalTfidf",
    "Retrieval",
    "Retriever",
    "TfidfReference",
    "agreement_flag",
    "class_split_topk",
    "composite_key",
    "top_k",
]

RETRIEVERS: Registry[Callable[[], Retriever]] = Registry("retriever")
"""Retrievers by name, chosen by ``ceb.retriever`` (:attr:`~ceb.config.CEBConfig.retriever` describes each)."""
RETRIEVERS.register("tfidf", "ceb.bank.kernel:IncrementalTfidf")
RETRIEVERS.register("tfidf-reference", "ceb.bank.retrieval:TfidfReference")
RETRIEVERS.register("random", "ceb.bank.random_retriever:RandomRetriever")
RETRIEVERS.register(
    "dense", "ceb.bank.dense:DenseRetriever", extra="dense", requires=("faiss", "sentence_transformers")
)

# Loaded on first use (PEP 562): importing a record or the journal need not load the kernel and scikit-learn.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(("BANK_FORMAT", "BOUNDED_BANK_FORMAT", "Bank", "Hit", "Retrieval"), "ceb.bank.bank"),
        **dict.fromkeys(("JOURNAL_FORMAT", "BankJournal"), "ceb.bank.journal"),
        "IncrementalTfidf": "ceb.bank.kernel",
        **dict.fromkeys(("BankRecord", "agreement_flag", "composite_key"), "ceb.bank.record"),
        **dict.fromkeys(
            ("TFIDF_PARAMS", "Retriever", "TfidfReference", "class_split_topk", "top_k"), "ceb.bank.retrieval"
        ),
    },
    __all__,
)
