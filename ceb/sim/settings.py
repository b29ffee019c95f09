"""Settings of the simulated server: its load model, its seed and its fault rates."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

__all__ = ["FAULT_RATE_FIELDS", "SIMULATOR_ID", "SimConfig"]

SIMULATOR_ID = "ceb-simulator"
"""The label the simulator puts on everything it serves: model id, ``owned_by``, ``system_fingerprint``."""

FAULT_RATE_FIELDS = (
    "rate_429",
    "rate_500",
    "rate_stall",
    "rate_malformed_body",
    "rate_malformed_content",
    "rate_wrong_label_count",
    "rate_bad_score",
)
"""The :class:`SimConfig` fields that are fault probabilities, in the order the fault draw tests them."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    """How the simulated OpenAI-compatible server behaves (see :mod:`ceb.sim.server` for the load model).

    Attributes:
        max_num_seqs: Requests in service at once (vLLM's ``--max-num-seqs``); later ones wait in a FIFO queue.
            A request with ``n`` choices takes one place: its choices decode side by side.
        prefill_tok_s: Prompt tokens per second of one request's prefill, in the simulator's toy tokens
            (:mod:`ceb.sim.tokenizer`).
        decode_s_per_token: Seconds to generate one token of one choice.
        overhead_s: Fixed seconds added to every request's service time.
        time_scale: Multiplies every simulated service time (dimensionless); ``0`` gives a zero-latency server
            for measuring client overhead. It does not scale ``stall_s`` or ``retry_after_s``.
        seed: Seeds the replies and the fault schedule; two servers with the same seed answer alike.
        rate_429: Probability that a request is refused with HTTP 429 and ``Retry-After: retry_after_s``.
        rate_500: Probability of an HTTP 500.
        rate_stall: Probability that a request hangs for ``stall_s`` seconds, then either gets its normal answer
            or has its connection closed (half the stalls each).
        rate_malformed_body: Probability of an HTTP 200 whose body is a completion's JSON cut in half.
        rate_malformed_content: Probability of a valid completion whose message text is cut in half (so a JSON
            reply no longer parses).
        rate_wrong_label_count: Probability that a hindsight reply has one label too many or too few. Drawn for
            every request, but only a hindsight request shows it (and is counted).
        rate_bad_score: Probability that a critic reply's score is above 1, below 0, or ``NaN``. Drawn for every
            request, but only a critic request shows it (and is counted).
        retry_after_s: Seconds sent in the ``Retry-After`` header of a 429.
        stall_s: Wall-clock seconds a stalled request hangs; make it longer than the client's timeout.
        model: The one model id served; requests naming another model get a 404, as from vLLM.
        max_model_len: Context length in toy tokens, reported by ``/tokenize`` and ``/v1/models``; a longer
            prompt gets a 400.
        root: The weights the simulated model "loaded", reported as ``root`` by ``/v1/models`` as vLLM reports the
            model path behind a ``--served-model-name``; ``None``: the model id (vLLM's ``root`` without one).

    Raises:
        ValueError: A count or duration out of range, a rate outside [0, 1], or rates summing above 1 (at most
            one fault is drawn per request).
    """

    max_num_seqs: int = 256
    prefill_tok_s: float = 20_000.0
    decode_s_per_token: float = 0.02
    overhead_s: float = 0.0
    time_scale: float = 1.0
    seed: int = 0
    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_stall: float = 0.0
    rate_malformed_body: float = 0.0
    rate_malformed_content: float = 0.0
    rate_wrong_label_count: float = 0.0
    rate_bad_score: float = 0.0
    retry_after_s: float = 1.0
    stall_s: float = 600.0
    model: str = SIMULATOR_ID
    max_model_len: int = 32_768
    root: str | None = None

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be at least 1, got {self.max_num_seqs}")
        if not (self.prefill_tok_s > 0 and math.isfinite(self.prefill_tok_s)):
            raise ValueError(f"prefill_tok_s must be a positive number of tokens per second, got {self.prefill_tok_s}")
        for name in ("decode_s_per_token", "overhead_s", "time_scale", "retry_after_s", "stall_s"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        for name in FAULT_RATE_FIELDS:
            rate = getattr(self, name)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} is a probability in [0, 1], got {rate}")
        total = sum(self.fault_rates().values())
        if total > 1.0 + 1e-9:
            raise ValueError(f"fault rates sum to {total:.3f} > 1: at most one fault is drawn per request")
        if not self.model:
            raise ValueError("model must be a non-empty id")
        if self.max_model_len < 1:
            raise ValueError(f"max_model_len must be at least 1, got {self.max_model_len}")

    def fault_rates(self) -> dict[str, float]:
        """``{field name: probability}`` of every fault rate, in the order of :data:`FAULT_RATE_FIELDS`."""
        return {name: float(getattr(self, name)) for name in FAULT_RATE_FIELDS}

    def to_dict(self) -> dict[str, object]:
        """Every field by name, for ``GET /sim/stats`` and for recording next to benchmark results."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
