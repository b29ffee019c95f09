"""Critic Experience Bank: calibrated step-level confidence for LLM agents (Zeng et al., ICLR 2026).

Subpackages: :mod:`ceb.data` (the trajectory contract and converters), :mod:`ceb.bank` (the experience bank
and its retrieval), :mod:`ceb.stages` (critic and hindsight), :mod:`ceb.backends` (LLM endpoints and the
offline stand-in), :mod:`ceb.pipeline` (the streaming scheduler), :mod:`ceb.eval` (ECE, Brier, AUROC).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
