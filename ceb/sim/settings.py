"""Settings of the simulated server: its load model, its seed and its fault rates."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["FAULT_RATE_FIELDS", "SIMULATOR_ID", "SimConfig"]

SIMULATOR_ID = "ceb-simulator"
"""The label on everything the simulator serves: model id, ``owned_by``, ``system_fingerprint``."""


class SimConfig(BaseModel):
    """How the simulated server behaves (load model: :mod:`ceb.sim.server`); each field is a ``ceb sim-server`` option.

    Raises:
        ValueError: pydantic's ``ValidationError``: a value out of range, or rates summing above 1 (one fault per
            request at most).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)

    max_num_seqs: int = Field(256, ge=1)
    """Requests in service at once (vLLM's ``--max-num-seqs``); later ones wait in a FIFO queue. A request with
    ``n`` choices takes one place: its choices decode side by side."""
    prefill_tok_s: float = Field(20_000.0, gt=0)
    """Prompt tokens per second of one request's prefill, in the simulator's toy tokens (:mod:`ceb.sim.tokenizer`)."""
    decode_s_per_token: float = Field(0.02, ge=0)
    """Seconds to generate one token of one choice."""
    overhead_s: float = Field(0.0, ge=0)
    """Fixed seconds added to every request's service time."""
    time_scale: float = Field(1.0, ge=0)
    """Multiplies every simulated service time (dimensionless); ``0`` gives a zero-latency server for measuring
    client overhead. It does not scale ``stall_s`` or ``retry_after_s``."""
    seed: int = 0
    """Seeds the replies and the fault schedule; two servers with the same seed answer alike."""
    rate_429: float = Field(0.0, ge=0, le=1)
    """Probability that a request is refused with HTTP 429 and ``Retry-After: retry_after_s``."""
    rate_500: float = Field(0.0, ge=0, le=1)
    """Probability of an HTTP 500."""
    rate_stall: float = Field(0.0, ge=0, le=1)
    """Probability that a request hangs for ``stall_s`` seconds, then either gets its normal answer or has its
    connection closed (half the stalls each)."""
    rate_malformed_body: float = Field(0.0, ge=0, le=1)
    """Probability of an HTTP 200 whose body is a completion's JSON cut in half."""
    rate_malformed_content: float = Field(0.0, ge=0, le=1)
    """Probability of a valid completion whose message text is cut in half (so a JSON reply no longer parses)."""
    rate_wrong_label_count: float = Field(0.0, ge=0, le=1)
    """Probability that a hindsight reply has one label too many or too few. Drawn for every request, but only a
    hindsight request shows it (and is counted)."""
    rate_bad_score: float = Field(0.0, ge=0, le=1)
    """Probability that a critic reply's score is above 1, below 0, or ``NaN``. Drawn for every request, but only a
    critic request shows it (and is counted)."""
    retry_after_s: float = Field(1.0, ge=0)
    """Seconds sent in the ``Retry-After`` header of a 429."""
    stall_s: float = Field(600.0, ge=0)
    """Wall-clock seconds a stalled request hangs; make it longer than the client's timeout."""
    model: str = Field(SIMULATOR_ID, min_length=1)
    """The one model id served; requests naming another model get a 404, as from vLLM."""
    max_model_len: int = Field(32_768, ge=1)
    """Context length in toy tokens, reported by ``/tokenize`` and ``/v1/models``; a longer prompt gets a 400."""
    root: str | None = None
    """The weights the simulated model "loaded", reported as ``root`` by ``/v1/models`` as vLLM reports the model
    path behind a ``--served-model-name``; ``None``: the model id (vLLM's ``root`` without one)."""

    @model_validator(mode="after")
    def _one_fault_at_most(self) -> SimConfig:
        total = sum(self.fault_rates().values())
        if total > 1.0 + 1e-9:
            raise ValueError(f"fault rates sum to {total:.3f} > 1: at most one fault is drawn per request")
        return self

    def fault_rates(self) -> dict[str, float]:
        """``{field name: probability}`` in the order of :data:`FAULT_RATE_FIELDS`."""
        return {name: float(getattr(self, name)) for name in FAULT_RATE_FIELDS}

    def to_dict(self) -> dict[str, object]:
        """Every field by name (``GET /sim/stats``, benchmark records)."""
        return self.model_dump()


FAULT_RATE_FIELDS = tuple(name for name in SimConfig.model_fields if name.startswith("rate_"))
"""The fault-probability fields of :class:`SimConfig` in declaration order, the order the fault draw lays them out."""
