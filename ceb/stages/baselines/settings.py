"""Settings of the baseline critics (paper section 4.1): how many alternatives, samples and tokens they ask for."""

from __future__ import annotations

from dataclasses import dataclass

from ceb.errors import ConfigError

__all__ = ["BaselineSettings"]


@dataclass(frozen=True, slots=True)
class BaselineSettings:
    """Decoding settings shared by the baseline critics; each baseline reads only its own fields.

    Attributes:
        prompt_logprobs: ``K`` of teacher forcing (PPL, ME, PRO): vLLM's ``prompt_logprobs=K`` returns, per
            prompt token, its own log-prob and the ``K`` most likely tokens. ME's entropy is truncated to these
            ``K``. vLLM refuses more than its ``--max-logprobs`` (20 by default).
        me_surprisal: ME on a step that carries only ``actor_logprobs`` and no actor endpoint: ``True`` takes
            each token's surprisal ``-log p(x_t)`` as a one-sample estimate of its entropy (so the score equals
            PPL's); ``False`` (default) reports the step as not available.
        ptrue_forced: P(True) from the teacher-forced log-probabilities of both whole answers (vLLM's
            ``prompt_logprobs``; default), so it never depends on the answer tokens ranking among the top
            alternatives; ``False`` reads the first answer token's ``top_logprobs`` instead (OpenAI).
        ptrue_top_logprobs: Alternatives read for the answer token of P(True) when not forced (OpenAI allows at
            most 20).
        ptrue_max_tokens: Output budget of P(True), in tokens; only the first token is read.
        cot_temperature: Sampling temperature of the CoT critic.
        cot_max_tokens: Output budget of the CoT critic's reasoning and confidence line, in tokens.
        format_retries: Re-asks of the CoT critic after a reply without a readable confidence.
        verbalized_max_tokens: Output budget of the actor's continuation with its confidence, in tokens.
        pro_samples: ``N``, the actions sampled from the actor by PRO (paper: 5).
        pro_temperature: Sampling temperature of PRO's samples (1 keeps the reported log-probs those of the
            model's own distribution).
        pro_max_tokens: Output budget of each sampled action, in tokens.

    Raises:
        ConfigError: A count or budget is out of range.
    """

    prompt_logprobs: int = 20
    me_surprisal: bool = False
    ptrue_forced: bool = True
    ptrue_top_logprobs: int = 20
    ptrue_max_tokens: int = 1
    cot_temperature: float = 0.0
    cot_max_tokens: int = 768
    format_retries: int = 2
    verbalized_max_tokens: int = 8
    pro_samples: int = 5
    pro_temperature: float = 1.0
    pro_max_tokens: int = 256

    def __post_init__(self) -> None:
        positive = {
            "prompt_logprobs": self.prompt_logprobs,
            "ptrue_top_logprobs": self.ptrue_top_logprobs,
            "ptrue_max_tokens": self.ptrue_max_tokens,
            "cot_max_tokens": self.cot_max_tokens,
            "verbalized_max_tokens": self.verbalized_max_tokens,
            "pro_samples": self.pro_samples,
            "pro_max_tokens": self.pro_max_tokens,
        }
        bad = [f"{name}={value}" for name, value in positive.items() if value < 1]
        if self.format_retries < 0:
            bad.append(f"format_retries={self.format_retries}")
        for name, temperature in (("cot_temperature", self.cot_temperature), ("pro_temperature", self.pro_temperature)):
            if temperature < 0:
                bad.append(f"{name}={temperature}")
        if bad:
            raise ConfigError(f"baseline settings out of range: {', '.join(bad)}")
