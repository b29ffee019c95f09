"""Scoring methods selectable by name. A method is a set of switches over the same CEB stages, never a copy.

``ceb``: the full method (Algorithm 1): critic with retrieved precedents, hindsight votes fill the bank.
``static``: the same critic with no bank: no precedent block, no hindsight calls (paper, Table "Component
ablation", row "Static (no bank)").
"""

from __future__ import annotations

from dataclasses import dataclass

from ceb.registry import Registry

__all__ = ["METHODS", "MethodSpec"]


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """Switches of one scoring method.

    Attributes:
        name: The name users select it by.
        use_bank: Retrieve precedents into the critic prompt, and fill the bank from hindsight votes.
        use_repetition_flag: Compute ``rho_t``; when ``False`` it is always 0.
        description: One line for ``--help`` and reports.
    """

    name: str
    use_bank: bool = True
    use_repetition_flag: bool = True
    description: str = ""


METHODS: Registry[MethodSpec] = Registry("method")
METHODS.register("ceb", MethodSpec("ceb", description="critic + contrastive bank of hindsight-labelled steps"))
METHODS.register("static", MethodSpec("static", use_bank=False, description="the same critic with no bank"))
