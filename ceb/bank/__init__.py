"""The Critic Experience Bank: records, contrastive retrieval, persistence (paper sections 3.2-3.3)."""

from ceb.bank.bank import BANK_FORMAT, Bank, Hit, Retrieval
from ceb.bank.record import BankRecord, agreement_flag, composite_key
from ceb.bank.retrieval import TFIDF_PARAMS, Retriever, TfidfReference, class_split_topk

__all__ = [
    "BANK_FORMAT",
    "TFIDF_PARAMS",
    "Bank",
    "BankRecord",
    "Hit",
    "Retrieval",
    "Retriever",
    "TfidfReference",
    "agreement_flag",
    "class_split_topk",
    "composite_key",
]
