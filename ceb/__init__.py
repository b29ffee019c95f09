"""Critic Experience Bank: calibrated step-level confidence for LLM agents (Zeng et al., ICLR 2026).

Subpackages: :mod:`ceb.data` (the trajectory contract and converters), :mod:`ceb.bank` (the experience bank
and its retrieval), :mod:`ceb.backends` (transports to LLM endpoints), :mod:`ceb.stages` (critic, hindsight,
baselines, offline stand-ins, the method catalogue), :mod:`ceb.pipeline` (the streaming scheduler),
:mod:`ceb.eval` (ECE, Brier, AUROC).
"""

from ceb.version import __version__

__all__ = ["__version__"]
