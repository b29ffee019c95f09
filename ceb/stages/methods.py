"""The method catalogue: every scoring method by name, with all the pipeline and the report need to know of it.

A method is a :class:`MethodSpec`: switches over the CEB stages (bank, retrieval, votes, repetition flag) plus the
critic stage that scores its steps; nothing else keeps a list of methods. CEB and its component ablation (paper,
Table "Component ablation") register here, the baselines (section 4.1) in :mod:`ceb.stages.baselines`, and the
V / k sweep cells ``ceb-V<v>-k<k>`` are made by :func:`resolve_method`, the only place a name is parsed;
docs/methods.md lists them all. No two names differ by case only (``ceb-v1`` is read as ``ceb-single-vote``,
:data:`RENAMED`). Adding a method is one ``register_method(MethodSpec(...))`` (``tests/stages/test_catalogue.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from ceb.config import CEBConfig, RunConfig
from ceb.errors import ConfigError
from ceb.logs import get_logger
from ceb.registry import Registry, did_you_mean, import_path

if TYPE_CHECKING:
    from ceb.stages.base import Critic, Stages

log = get_logger(__name__)

__all__ = [
    "CAPABILITIES",
    "GROUPS",
    "LLM_CRITIC",
    "METHODS",
    "RENAMED",
    "CriticFactory",
    "Group",
    "MethodSpec",
    "ResolvedMethod",
    "all_methods",
    "method_names",
    "register_method",
    "resolve_method",
    "sweep_methods",
]

LLM_CRITIC = "llm"
"""The critic of CEB, its ablations and Static: the frozen LLM critic with the paper's critic prompt."""

Group = Literal["ceb", "ablation", "oracle", "sweep", "baseline"]
"""Where a method sits in the paper's tables."""

GROUPS: tuple[Group, ...] = ("baseline", "ceb", "ablation", "oracle", "sweep")
"""Groups in table order."""

CAPABILITIES: dict[str, str] = {
    "chat": "an LLM chat endpoint (the offline backend has none)",
    "structured_output": "replies constrained to a JSON schema (helps; free text is parsed otherwise)",
    "schema_bounds": "the schema's minimum / maximum and string length pattern enforced, so a reply cannot run away",
    "logprobs": "logprobs / top_logprobs of the generated tokens",
    "prompt_logprobs": "vLLM's prompt_logprobs (teacher forcing)",
    "continue_final_message": "vLLM's continue_final_message / add_generation_prompt",
    "n": "several choices per request (n > 1)",
}
"""Endpoint capabilities a method may need (``MethodSpec.needs``), with what each means."""

CriticFactory = Callable[[RunConfig, "Stages"], "Critic"]
"""``(config, stages) -> Critic``: builds a method's critic stage over the stages of one critic endpoint."""


@dataclass(frozen=True, slots=True)
class ResolvedMethod:
    """A method's effective ``V``, ``k`` (precedents per class) and retriever over the run's ``ceb`` section."""

    spec: MethodSpec
    votes: int
    k: int
    retriever: str

    @property
    def method(self) -> str:
        """The method's name."""
        return self.spec.name

    @property
    def uses_llm_critic(self) -> bool:
        """Scored by the LLM critic (see :attr:`MethodSpec.uses_llm_critic`)."""
        return self.spec.uses_llm_critic

    @property
    def switches(self) -> tuple[object, ...]:
        """Every switch but ``V`` and ``k``: equal for the cells of one V / k sweep."""
        return (*self.spec.behaviour, self.retriever)


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One scoring method; ``label``, ``group`` and ``order`` (lower first, ties by name) place its table row.

    ``critic`` is :data:`LLM_CRITIC` or a :data:`CriticFactory` (an object or a lazy ``"module:attr"`` path).
    ``needs`` are the :data:`CAPABILITIES` without which it cannot score; ``uses`` those it does without, scoring
    ``fallback`` instead. ``votes``, ``k`` and ``retriever`` left ``None`` take the run's ``ceb`` section;
    ``oracle_labels`` fills the bank with held-out labels; ``ablation`` is its row in the component-ablation table.
    """

    name: str
    label: str = ""
    group: Group = "ceb"
    order: int = 1000
    description: str = ""
    use_bank: bool = True
    use_repetition_flag: bool = True
    critic: str | CriticFactory = LLM_CRITIC
    needs: tuple[str, ...] = ("chat",)
    uses: tuple[str, ...] = ()
    fallback: str = ""
    votes: int | None = None
    k: int | None = None
    retriever: str | None = None
    classes: Literal["both", "positives"] = "both"
    oracle_labels: bool = False
    ablation: str | None = None

    def __post_init__(self) -> None:
        unknown = [n for n in (*self.needs, *self.uses) if n not in CAPABILITIES]
        if unknown:
            raise ConfigError(f"method {self.name}: unknown capabilities {unknown}; known: {sorted(CAPABILITIES)}")
        if self.group not in GROUPS:
            raise ConfigError(f"method {self.name}: unknown group {self.group!r}; known: {GROUPS}")

    @property
    def display(self) -> str:
        """:attr:`label`, or the name when it has none."""
        return self.label or self.name

    @property
    def uses_llm_critic(self) -> bool:
        """Scored by the LLM critic with the paper's critic prompt (CEB, its ablations, Static)."""
        return self.critic == LLM_CRITIC

    @property
    def order_free(self) -> bool:
        """Its step prompts depend neither on the stream order nor on other trajectories: it has no bank.

        The bank is the only state carried between trajectories; such a method is scored in the step pool
        (:mod:`ceb.pipeline.pool`), each trajectory once for every order.
        """
        return not self.use_bank

    @property
    def reads_own_scores(self) -> bool:
        """Its prompt for step ``t`` holds its own earlier scores (the LLM critic's), so its steps wait in turn."""
        return self.uses_llm_critic

    @property
    def behaviour(self) -> tuple[object, ...]:
        """Every switch but ``V``, ``k``, the retriever and the presentation fields."""
        return (self.use_bank, self.use_repetition_flag, self.critic, self.classes, self.oracle_labels)

    def critic_factory(self) -> CriticFactory:
        """The factory of :attr:`critic` (imported on first use when it is a path).

        Raises:
            ConfigError: The method uses the LLM critic (it has no factory), or the path cannot be imported.
        """
        if not isinstance(self.critic, str):
            return self.critic
        if self.critic == LLM_CRITIC:
            raise ConfigError(f"method {self.name} uses the stages' own LLM critic, not a factory")
        factory: CriticFactory = import_path(self.critic, what=f"method {self.name}: its critic {self.critic!r}")
        return factory

    def verdict(self, capabilities: set[str]) -> tuple[bool, str]:
        """``(runs, note)`` on an endpoint with ``capabilities``: ``note`` names a missing need, or the fallback."""
        missing = [n for n in self.needs if n not in capabilities]
        if missing:
            return False, "needs " + ", ".join(missing)
        lacking = [n for n in self.uses if n not in capabilities]
        if lacking:
            return True, f"without {', '.join(lacking)}: {self.fallback}"
        return True, ""

    def resolve(self, ceb: CEBConfig) -> ResolvedMethod:
        """Its effective ``V``, ``k`` and retriever over a run's ``ceb`` section."""
        return ResolvedMethod(
            spec=self,
            votes=self.votes if self.votes is not None else ceb.votes,
            k=self.k if self.k is not None else ceb.k,
            retriever=self.retriever if self.retriever is not None else ceb.retriever,
        )

    def sort_key(self) -> tuple[int, int, str]:
        """Table row order: group, then :attr:`order`, then name."""
        return (GROUPS.index(self.group), self.order, self.name)


METHODS: Registry[MethodSpec] = Registry("method", plugins=("ceb.stages.baselines",))
"""Every registered method by name; the baselines' modules (:mod:`ceb.stages.baselines`) register theirs when
the registry is first read."""


def register_method(spec: MethodSpec) -> MethodSpec:
    """Add ``spec`` to the catalogue under its name (a later one of the same name replaces it); returns ``spec``.

    Raises:
        ConfigError: The name is a V / k sweep cell's (``ceb-V<v>-k<k>``, in any case), which
            :func:`resolve_method` makes.
    """
    if _SWEEP_ANY_CASE.match(spec.name) and spec.name != "ceb":
        raise ConfigError(f"method name {spec.name!r} is reserved for V / k sweep cells (in any case)")
    METHODS.register(spec.name, spec)
    return spec


def all_methods() -> Iterator[MethodSpec]:
    """Every registered method, in table order."""
    return iter(sorted((spec for _, spec in METHODS.items()), key=MethodSpec.sort_key))


def method_names() -> list[str]:
    """Registered method names in table order (sweep cells are made on demand and not listed)."""
    return [m.name for m in all_methods()]


RENAMED: dict[str, str] = {"ceb-v1": "ceb-single-vote"}
"""Old method name -> current name; an old name resolves keeping its name (its recorded rows stay its own)."""
_NOTED: set[str] = set()

_SWEEP = re.compile(r"^ceb(?:-V(?P<v>\d+))?(?:-k(?P<k>\d+))?$")
_SWEEP_ANY_CASE = re.compile(_SWEEP.pattern, re.IGNORECASE)


def sweep_methods(votes: Sequence[int], ks: Sequence[int]) -> list[str]:
    """The sweep cells ``ceb-V<v>-k<k>`` of every pair, in row-major order (appendix V / k tables)."""
    return [f"ceb-V{v}-k{k}" for v in votes for k in ks]


def resolve_method(name: str) -> MethodSpec:
    """The method called ``name``: a registered one, or a sweep cell ``ceb-V<v>-k<k>``.

    Raises:
        ConfigError: Unknown name (lists the known ones and the sweep-cell form), or a sweep cell with V < 1.
    """
    if name in METHODS:
        return METHODS.get(name)
    if name in RENAMED:
        if name not in _NOTED:
            _NOTED.add(name)
            log.warning("method.renamed", method=name, use=RENAMED[name], note=f"{name} is read as {RENAMED[name]}")
        return replace(METHODS.get(RENAMED[name]), name=name)
    m = _SWEEP.match(name)
    if m is None or (m.group("v") is None and m.group("k") is None):
        raise ConfigError(
            f"unknown method {name!r}{did_you_mean(name, method_names())}; choose one of: "
            f"{', '.join(method_names())}, or a sweep cell ceb-V<v>-k<k> (e.g. ceb-V3-k1; ceb-V3 or ceb-k1 keep the "
            f"other at its setting)"
        )
    v = int(m.group("v")) if m.group("v") is not None else None
    if v is not None and v < 1:
        raise ConfigError(f"method {name}: V must be >= 1")
    k = int(m.group("k")) if m.group("k") is not None else None
    return replace(
        METHODS.get("ceb"),
        name=name,
        label=name,
        group="sweep",
        order=0,
        votes=v,
        k=k,
        ablation=None,
        description=f"CEB sweep cell V={v}, k={k}",
    )


def _llm_method(name: str, **fields: Any) -> MethodSpec:
    """A method scored by the LLM critic, which uses structured output where the endpoint has it."""
    uses = ("structured_output", "schema_bounds")
    return MethodSpec(name, uses=uses, fallback="replies are read from free text, so expect re-asks", **fields)


for _spec in (
    _llm_method(
        "ceb",
        label="CEB",
        order=0,
        description="critic + contrastive bank of hindsight-labelled steps (Algorithm 1)",
        ablation="CEB (reference)",
    ),
    _llm_method(
        "static",
        label="Static",
        group="baseline",
        order=100,
        description="the same critic with no bank",
        use_bank=False,
        ablation="Static (no bank)",
    ),
    _llm_method(
        "ceb-positives-only",
        label="CEB - contrastive (positives only)",
        group="ablation",
        order=10,
        description="CEB retrieving productive precedents only",
        classes="positives",
        ablation="− contrastive (positives only)",
    ),
    _llm_method(
        "ceb-random-retrieval",
        label="CEB - TF-IDF retrieval (random)",
        group="ablation",
        order=11,
        description="CEB with k random records per class",
        retriever="random",
        ablation="− similarity retrieval (random from bank)",
    ),
    _llm_method(
        "ceb-single-vote",
        label="CEB - vote (V=1)",
        group="ablation",
        order=12,
        description="CEB with a single hindsight vote (V = 1)",
        votes=1,
        ablation="− majority vote (V=1)",
    ),
    _llm_method(
        "ceb-no-repetition",
        label="CEB - repetition signal",
        group="ablation",
        order=13,
        description="CEB without the repetition flag",
        use_repetition_flag=False,
        ablation="− repetition flag",
    ),
    _llm_method(
        "ceb-dense-retrieval",
        label="CEB - dense retrieval",
        group="ablation",
        order=20,
        description="CEB retrieving by dense sentence-embedding cosine (needs the dense extra)",
        retriever="dense",
    ),
    _llm_method(
        "ceb-gt-oracle",
        label="CEB, GT-oracle bank",
        group="oracle",
        description="ORACLE: CEB whose bank holds the held-out labels (unavailable in deployment)",
        oracle_labels=True,
    ),
):
    register_method(_spec)
