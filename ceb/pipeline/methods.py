"""Scoring methods selectable by name. A method is a set of switches over the same CEB stages, never a copy.

CEB and its component ablation (paper, Table "Component ablation"; appendix sweeps):

``ceb``: the full method (Algorithm 1): critic with retrieved precedents, hindsight votes fill the bank.
``static``: the same critic with no bank: no precedent block, no hindsight calls.
``ceb-positives-only``: retrieval shows only productive precedents (no contrastive negatives).
``ceb-random-retrieval``: ``k`` records of each class drawn at random (seeded) instead of by similarity.
``ceb-dense-retrieval``: similarity by sentence embeddings (all-MiniLM-L6-v2, faiss) instead of TF-IDF (the
appendix's retrieval-mechanism table; needs ``pip install 'ceb[dense]'``).
``ceb-v1``: one hindsight vote per trajectory (V = 1) instead of a majority of V.
``ceb-no-repetition``: the repetition flag ``rho_t`` is always 0.
``ceb-gt-oracle``: the bank's pseudo-labels are the held-out labels (no hindsight calls). An ORACLE: it reads
labels no deployed system has, and reports mark it so.
``ceb-V<v>-k<k>`` (either part optional, e.g. ``ceb-V3``, ``ceb-k1``): the V / k sweep cells.

Baselines (paper section 4.1) are methods whose critic is another stage (:mod:`ceb.stages.baselines`):
``ppl``, ``me``, ``ptrue``, ``cot``, ``verbalized``, ``pro``. They use no bank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from ceb.errors import ConfigError
from ceb.registry import Registry

__all__ = ["BASELINE_NAMES", "LLM_CRITIC", "METHODS", "MethodSpec", "resolve_method"]

LLM_CRITIC = "llm"
"""The critic of CEB and its ablations: the frozen LLM critic with the paper's critic prompt."""


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """Switches of one scoring method.

    Attributes:
        name: The name users select it by.
        use_bank: Retrieve precedents into the critic prompt, and fill the bank from hindsight votes.
        use_repetition_flag: Compute ``rho_t``; when ``False`` it is always 0.
        critic: Which critic stage scores: :data:`LLM_CRITIC`, or a baseline name.
        votes: Hindsight votes ``V`` for this method; ``None`` takes ``ceb.votes``.
        k: Precedents per class; ``None`` takes ``ceb.k``.
        retriever: Retriever name; ``None`` takes ``ceb.retriever``.
        classes: ``both`` (contrastive precedents) or ``positives`` (productive ones only).
        oracle_labels: Fill the bank with the held-out labels instead of hindsight votes (an oracle).
        description: One line for ``--help`` and reports.
    """

    name: str
    use_bank: bool = True
    use_repetition_flag: bool = True
    critic: str = LLM_CRITIC
    votes: int | None = None
    k: int | None = None
    retriever: str | None = None
    classes: Literal["both", "positives"] = "both"
    oracle_labels: bool = False
    description: str = ""


METHODS: Registry[MethodSpec] = Registry("method")
for _spec in (
    MethodSpec("ceb", description="critic + contrastive bank of hindsight-labelled steps"),
    MethodSpec("static", use_bank=False, description="the same critic with no bank"),
    MethodSpec("ceb-positives-only", classes="positives", description="CEB retrieving productive precedents only"),
    MethodSpec("ceb-random-retrieval", retriever="random", description="CEB with k random records per class"),
    MethodSpec(
        "ceb-dense-retrieval", retriever="dense", description="CEB retrieving by dense sentence-embedding cosine"
    ),
    MethodSpec("ceb-v1", votes=1, description="CEB with a single hindsight vote (V = 1)"),
    MethodSpec("ceb-no-repetition", use_repetition_flag=False, description="CEB without the repetition flag"),
    MethodSpec(
        "ceb-gt-oracle",
        oracle_labels=True,
        description="ORACLE: CEB whose bank holds the held-out labels (unavailable in deployment)",
    ),
):
    METHODS.register(_spec.name, _spec)

BASELINE_NAMES: dict[str, str] = {
    "ppl": "1 / perplexity of the action's tokens",
    "me": "exp(-mean token entropy) over the action's tokens",
    "ptrue": "P(True) of the critic asked whether the action is correct",
    "cot": "chain of thought, then a verbalised confidence in [0, 100]",
    "verbalized": "the actor's own verbalised confidence after the frozen action",
    "pro": "softmax weight of the frozen action among N sampled actor actions",
}
"""The paper's baselines (section 4.1): name -> one line."""
for _name, _desc in BASELINE_NAMES.items():
    METHODS.register(
        _name, MethodSpec(_name, use_bank=False, use_repetition_flag=False, critic=_name, description=_desc)
    )

_SWEEP = re.compile(r"^ceb(?:-V(?P<v>\d+))?(?:-k(?P<k>\d+))?$")


def resolve_method(name: str) -> MethodSpec:
    """The method called ``name``: a registered one, or a sweep cell ``ceb-V<v>-k<k>``.

    Raises:
        ConfigError: Unknown name (lists the known ones), or a sweep cell with V < 1.
    """
    if name in METHODS.names():
        return METHODS.get(name)
    m = _SWEEP.match(name)
    if m is None or (m.group("v") is None and m.group("k") is None):
        return METHODS.get(name)  # raises ConfigError naming the known methods
    v = int(m.group("v")) if m.group("v") is not None else None
    if v is not None and v < 1:
        raise ConfigError(f"method {name}: V must be >= 1")
    k = int(m.group("k")) if m.group("k") is not None else None
    return replace(METHODS.get("ceb"), name=name, votes=v, k=k, description=f"CEB sweep cell V={v}, k={k}")
