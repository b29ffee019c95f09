"""Typed run configuration, layered: command-line flags > config file (TOML or JSON) > these defaults.

Every section is a frozen pydantic model whose attribute docstrings are its field descriptions
(``docs/configuration.md`` is generated from them, :mod:`ceb.configdoc`); the effective configuration is
written as ``config.json`` next to every run's results.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ceb.errors import ConfigError
from ceb.registry import did_you_mean

__all__ = [
    "BackendConfig",
    "BankConfig",
    "BaselineConfig",
    "CEBConfig",
    "CacheConfig",
    "CriticConfig",
    "CriticEndpointConfig",
    "EngineConfig",
    "GateConfig",
    "HindsightConfig",
    "PromptConfig",
    "RepetitionReading",
    "RunConfig",
    "ServeConfig",
    "load_config",
    "merge_settings",
    "read_settings_file",
]

_MAX_TOKENS = 1_048_576
"""Upper bound of every output budget in tokens: more than any model's context, so a larger value is a typo."""
_MAX_CHARS = 10_000_000
"""Upper bound of every text budget in characters (about 2.5 M tokens: more than any model's context)."""
_MAX_CONTEXT = 100_000_000
"""Upper bound of an engine's context and batch in tokens: ten times the longest context of any model (10 M)."""
_MAX_TEMPERATURE = 10.0
"""Upper bound of every sampling temperature: OpenAI refuses more than 2, and past 10 sampling is noise."""
_MAX_RECORDS = 1_000_000_000
"""Upper bound of a bank's capacity in records: a billion records do not fit one process's memory."""


RepetitionReading = Literal["prefix", "exact", "chars", "relative"]
"""How the repetition flag ``rho_t`` reads "matches the prefix" (section 3.3); ``ceb.repetition_reading``."""


class _Section(BaseModel):
    """A settings section: frozen, unknown keys refused, no ``inf`` or ``nan``."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)


def _deprecated(old: str, new: str) -> None:
    """Warn that ``old`` is read as ``new``."""
    from ceb.logs import get_logger  # here: importing structlog (and the rich it loads) costs ``ceb --help`` 0.1 s

    get_logger(__name__).warning("config.deprecated_key", key=old, use=new, note=f"{old} is read as {new}; rename it")


class EngineConfig(_Section):
    """The in-process vLLM engine of backend ``vllm`` (:mod:`ceb.backends.vllm_engine`), as ``vllm serve`` flags.

    ``None`` leaves vLLM's default, so the engine matches a ``vllm serve`` given the same flags.
    """

    served_model_name: str | None = None
    """The model name requests and replies carry; ``None``: ``backend.model`` (the path), as in ``vllm serve``."""
    tensor_parallel_size: int | None = Field(None, ge=1, le=4096)
    """GPUs the model is split over (at most 4096, more than any one engine spans)."""
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    """Fraction of each GPU's memory vLLM may take."""
    max_num_seqs: int | None = Field(None, ge=1, le=1_000_000)
    """Sequences the engine runs at once (at most a million: each holds KV-cache blocks).
    ``backend.max_concurrency``, when not given, takes this value, so no request waits in a queue ceb cannot order."""
    max_num_batched_tokens: int | None = Field(None, ge=1, le=_MAX_CONTEXT)
    """Tokens per engine step."""
    enable_prefix_caching: bool | None = None
    """Reuse the KV cache of shared prompt prefixes (ceb's prompts share long prefixes)."""
    dtype: str | None = None
    """Weight and activation type: ``auto``, ``bfloat16``, ``float16``..."""
    max_model_len: int | None = Field(None, ge=1, le=_MAX_CONTEXT)
    """Context length in tokens (prompt and reply)."""
    load_format: str | None = None
    """How weights are loaded: ``auto``; ``dummy`` gives random weights (tests)."""
    seed: int | None = None
    """The engine's random seed."""
    max_logprobs: int | None = Field(None, ge=0, le=_MAX_TOKENS)
    """Most log-probabilities one request may ask for (the baselines ask ``prompt_logprobs=20``)."""
    scheduling_policy: Literal["fcfs", "priority"] | None = None
    """``priority`` lets ceb's stream priorities order vLLM's queue (lower vLLM priority first)."""
    args: tuple[str, ...] | dict[str, Any] = ()
    """Any further ``vllm serve`` flags: command-line words (``["--block-size", "16"]``) or a table
    (``{structured_outputs_config = {backend = "xgrammar"}}``; ``true`` is a bare flag, tables go as JSON)."""


class BackendConfig(_Section):
    """Which backend scores and how to reach it: the one section every backend (:mod:`ceb.backends`) reads.

    Validated with the whole configuration, before any backend is imported.
    """

    name: str = "offline"
    """Backend: ``offline`` (no model; the default), ``openai`` (OpenAI-compatible endpoint), ``vllm`` (a vLLM
    engine inside ceb's process; ``model`` is the model directory), or another registered one. Not given, a
    ``base_url`` selects ``openai``; ``offline`` with an endpoint or a model is refused."""
    base_url: str | tuple[str, ...] | None = None
    """Endpoint root for ``openai``, e.g. ``http://127.0.0.1:8000/v1`` for ``vllm serve``. Several replicas of
    the same model: a list, or one string with comma-separated roots; ``routing`` picks the replica."""
    model: str | None = None
    """Model name as the endpoint knows it (``openai`` backend; ``None``: the one model its ``GET /models`` lists,
    recorded in the run's provenance); the model directory or hub name for ``vllm``."""
    engine: EngineConfig = EngineConfig()
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable that holds the API key; the key itself is never stored."""
    timeout_s: float = Field(120.0, gt=0, le=86_400)
    """Seconds before one request attempt is abandoned (at most a day: a longer wait is a typo, not a request)."""
    max_concurrency: int = Field(64, ge=1, le=100_000)
    """Requests in flight to each endpoint at most (critic and hindsight share it); size it to the server's
    ``max_num_seqs`` so requests wait in ceb's priority queue, not the server's FIFO. At most 100,000 connections."""
    structured_output: Literal["json_schema", "vllm", "json_object", "json_object_schema", "none"] = "json_schema"
    """How reply JSON is enforced: ``json_schema`` (OpenAI, vLLM), ``vllm``, ``json_object``, ``json_object_schema``
    (llama.cpp: JSON mode carrying the schema; taken by itself where a server refuses ``json_schema``) or ``none``."""
    token_limit_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"
    """Wire name of the output token budget (newer OpenAI models refuse ``max_tokens``; vLLM takes both)."""
    server_priority: Literal["auto", "on", "off"] = "auto"
    """Send each request's critical-path priority as vLLM's ``priority`` (negated: vLLM serves lower first), so a
    server started with ``--scheduling-policy priority`` orders its queue like ceb's. ``auto``: sent until a server
    refuses the field; ``on``: always; ``off``: never."""
    routing: Literal["affinity", "least_outstanding"] = "affinity"
    """How requests pick among replicas: ``affinity``, each lane to its home replica (rendezvous hashing), another
    only when home has no free slot; or ``least_outstanding``, the replica with the fewest outstanding requests."""
    session_header: str | None = "X-Session-Id"
    """Header carrying the lane key on every request, for a router in front of the replicas to keep a lane on
    one (vLLM production-stack: ``--routing-logic session --session-key x-session-id``); ``None`` sends none."""
    preflight: bool = True
    """Check every endpoint before a run (model list, one one-token request) and stop at once naming one that
    cannot serve."""
    max_attempts: int = Field(6, ge=1, le=100)
    """Attempts per request on timeouts, dropped connections, 429 and 5xx, the first included (at most 100)."""
    backoff_s: float = Field(0.5, ge=0, le=3600)
    """Multiplier of the jittered exponential backoff between attempts, in seconds (at most an hour)."""
    max_backoff_s: float = Field(30.0, ge=0, le=3600)
    """Cap on one backoff wait, in seconds, at most an hour (a longer ``Retry-After`` is still honoured)."""
    timeout_attempts: int = Field(2, ge=1, le=100)
    """Attempts per request when the last one timed out (at most ``max_attempts``): a retry regenerates from
    scratch and a reply that outran the timeout likely will again."""

    @model_validator(mode="after")
    def _endpoint_selects_backend(self) -> BackendConfig:
        """A ``base_url`` without a named backend selects ``openai``, not the offline stand-in."""
        if self.name == "offline" and "name" not in self.model_fields_set and self.base_urls:
            object.__setattr__(self, "name", "openai")
        return self

    @model_validator(mode="after")
    def _engine_slots(self) -> BackendConfig:
        """For ``vllm``, an unset ``max_concurrency`` is ``engine.max_num_seqs`` (a resume derives nothing new)."""
        if (
            self.name == "vllm"
            and self.engine.max_num_seqs is not None
            and "max_concurrency" not in self.model_fields_set
        ):
            object.__setattr__(self, "max_concurrency", self.engine.max_num_seqs)
        return self

    @property
    def base_urls(self) -> tuple[str, ...]:
        """``base_url`` as a tuple of roots (a string split at commas); empty when unset."""
        if self.base_url is None:
            return ()
        if isinstance(self.base_url, str):
            return tuple(u.strip() for u in self.base_url.split(",") if u.strip())
        return self.base_url

    @property
    def served_model(self) -> str:
        """The model name requests and replies carry: ``engine.served_model_name``, else ``model``."""
        return self.engine.served_model_name or self.model or ""


class CEBConfig(_Section):
    """The method's constants (paper appendix "Experimental Details")."""

    votes: int = Field(5, ge=1, le=1000)
    """``V``: hindsight votes per trajectory. The paper uses 5; at most 1000 (held in memory together)."""
    k: int = Field(2, ge=0, le=1000)
    """Retrieved precedents per class. The paper uses 2; at most 1000 (each is rendered into every critic prompt)."""
    min_valid_votes: int | None = Field(None, ge=1, le=1000)
    """Valid votes a trajectory needs to enter the bank; ``None`` means a majority of ``votes``: ceil(V / 2)."""
    retriever: str = "tfidf"
    """Retrieval backend: ``tfidf`` (exact incremental kernel), ``tfidf-reference`` (scikit-learn refit), ``random``
    (seeded draws) or ``dense`` (sentence embeddings + faiss; ``pip install -e '.[dense]'``)."""
    repetition_window: int = Field(3, ge=0, le=100_000)
    """How many previous actions the repetition flag compares with."""
    repetition_reading: RepetitionReading = "prefix"
    """How ``rho_t`` reads "``a_t`` matches the prefix of" an earlier action, both folded (white space collapsed,
    case folded): ``prefix`` (one is a prefix of the other, the shorter not empty), ``exact`` (equal), ``chars``
    (their first ``repetition_prefix_chars`` characters are equal) or ``relative`` (their common prefix covers at
    least ``repetition_prefix_fraction`` of the longer). ``prefix`` fires only on repeats on every InterCode-Bash
    stream (docs/design.md has the table)."""
    repetition_prefix_chars: int = Field(40, ge=1, le=1_000_000)
    """Length of the compared action prefix under ``repetition_reading = "chars"``, in characters."""
    repetition_prefix_fraction: float = Field(0.9, gt=0, le=1)
    """Share of the longer action the common prefix must cover under ``repetition_reading = "relative"``, in
    (0, 1]; 1 is ``exact``."""


class BankConfig(_Section):
    """Bounding the bank by eviction and near-duplicate compression; the default, none, is the paper's unbounded bank.

    Each policy decides from the sequence of bank updates alone, so a resumed run rebuilds the same bank
    (:mod:`ceb.bank.policy`).
    """

    policy: Literal["none", "window", "reservoir", "usefulness"] = "none"
    """Eviction: ``none`` (keep everything); ``window`` (the last ``max_records`` records); ``reservoir`` (at most
    ``max_per_class`` records per pseudo-label class, a uniform sample of the class by Vitter's Algorithm R);
    ``usefulness`` (at most ``max_records`` records; those that most often misled retrievals go first, with
    ExpeL-style agree/disagree counters)."""
    max_records: int | None = Field(None, ge=1, le=_MAX_RECORDS)
    """Records the bank keeps under ``window`` and ``usefulness`` (required by them, refused by the others)."""
    max_per_class: int | None = Field(None, ge=1, le=_MAX_RECORDS)
    """Records kept per class (``B+`` and ``B-`` each) under ``reservoir`` (required by it, refused otherwise)."""
    seed: int = 0
    """Seed of the reservoir's draws (each draw is a hash of the seed, the class and the class's record count)."""
    usefulness_k: int | None = Field(None, ge=1, le=1000)
    """Precedents per class whose counters each new step updates under ``usefulness``; ``None``: the lane's ``k``
    (at least 1), so the counters judge the precedents the critic was shown (:meth:`for_k`)."""
    compress_threshold: float | None = Field(None, gt=0, le=1)
    """Near-duplicate compression: a new record whose key has cosine >= this (under the bank's retriever) to a
    kept record of the same class merges into it, adding its count; ``None`` turns compression off."""

    @model_validator(mode="after")
    def _capacity_matches_policy(self) -> BankConfig:
        wants = {"window": "max_records", "usefulness": "max_records", "reservoir": "max_per_class"}.get(self.policy)
        for name in ("max_records", "max_per_class"):
            given = getattr(self, name) is not None
            if name == wants and not given:
                raise ValueError(f"policy {self.policy!r} needs {name}")
            if name != wants and given:
                raise ValueError(f"{name} has no effect under policy {self.policy!r}")
        return self

    def for_k(self, k: int) -> BankConfig:
        """These settings with ``usefulness_k`` derived from a lane's ``k`` unless set (lanes and gate streams)."""
        if self.usefulness_k is not None:
            return self
        return self.model_copy(update={"usefulness_k": max(k, 1)})

    @property
    def bounded(self) -> bool:
        """Whether any eviction or compression is on (``False``: the paper's append-only bank)."""
        return self.policy != "none" or self.compress_threshold is not None


class CriticConfig(_Section):
    """Decoding of the critic (read by :class:`ceb.stages.critic.LLMCritic`)."""

    temperature: float = Field(0.0, ge=0, le=_MAX_TEMPERATURE)
    """Sampling temperature of the critic; 0 makes the frozen critic deterministic where the server allows."""
    max_tokens: int = Field(160, ge=1, le=_MAX_TOKENS)
    """Output budget per critic reply, in tokens. In the ``json_schema`` and ``vllm`` modes the schema bounds
    ``reason`` to :data:`~ceb.stages.critic.REASON_MAX_CHARS` characters, which this budget holds at one character
    per token; under ``json_object`` and ``none`` only this budget bounds the reply."""
    format_retries: int = Field(2, ge=0, le=100)
    """Re-asks after a reply with no readable score before the step fails; the CoT critic reads it too (old key
    ``baselines.format_retries`` is read too)."""
    early_score: bool = False
    """Stream the critic's reply and take the score once its value is complete (``score`` comes first), so the
    lane's next step starts while ``reason`` is still generated; only the stored ``raw`` may be shorter. Needs a
    streaming endpoint; other backends read the whole reply."""
    reason_tokens_after_score: int | None = Field(0, ge=0, le=_MAX_TOKENS)
    """With ``early_score``: reply events (about a token each) read after the score before the stream is closed
    (vLLM then aborts and frees the slot); 0 cuts at once. ``None`` lets the reply finish in the lane's task group
    (the row holds the reply as far as it was); without a lane (the gate) it is read to the end first."""
    readout: Literal["text", "expected"] = "text"
    """How a verbal score is read: ``text``, the number written (the paper's); ``expected``, its expectation under
    the top log-probs at the positions deciding its digits (G-Eval, :mod:`ceb.stages.readout`). One field for every
    verbal method (CEB and ablations, ``static``, ``verbalized``, ``cot``), so they compare alike. ``expected``
    asks for ``logprobs``/``top_logprobs``; a reply without them or with too little mass on numbers keeps its text
    score, marked ``text_fallback``."""
    top_logprobs: int = Field(20, ge=1, le=100_000)
    """Alternatives per token asked under ``readout = "expected"`` (OpenAI and vLLM's default ``--max-logprobs``
    allow 20)."""
    readout_min_mass: float = Field(0.5, ge=0, le=1)
    """Under ``readout = "expected"``: least probability the number-continuing alternatives must carry at every
    position read; below it the step keeps its text score (``text_fallback``)."""
    count_tokens: bool = False
    """Count each LLM-critic prompt's input and bank tokens (``cl100k_base``) into the rows, for the report's token
    cost table. Off by default: about 0.6 ms CPU per step (:mod:`ceb.stages.tokens`)."""

    @model_validator(mode="after")
    def _readout_reads_whole_replies(self) -> CriticConfig:
        if self.readout == "expected" and self.early_score:
            raise ValueError(
                'readout = "expected" reads the log-probs of a whole reply, and early_score streams text only: '
                "turn one of them off"
            )
        return self


class HindsightConfig(_Section):
    """Decoding of the hindsight labeler (:class:`ceb.stages.hindsight.LLMHindsight`)."""

    temperature: float = Field(0.7, gt=0, le=_MAX_TEMPERATURE)
    """Sampling temperature of the votes, the paper's ``tau`` (> 0 so votes can differ; OpenAI refuses more than
    2). Old key ``ceb.tau`` is read too."""

    max_tokens: int = Field(512, ge=1, le=_MAX_TOKENS)
    """Output budget per vote, in tokens."""
    format_retries: int = Field(2, ge=0, le=100)
    """Re-asks of a vote whose reply is not one 0/1 per step. Apart from ``critic.format_retries``: a re-ask
    repeats a whole trajectory's prompt, and a lost vote only drops a vote (``ceb.min_valid_votes``)."""
    seed: int | None = None
    """Base seed of the votes (vote ``v`` uses ``seed + v``); ``None`` leaves it to the server."""
    sampling: Literal["requests", "n"] = "requests"
    """How the ``V`` votes are drawn: ``requests``, ``V`` requests spread over the endpoints; ``n``, one request with
    ``n = V`` choices, so a server sharing prefill across choices (vLLM) reads the trajectory once."""
    base_url: str | tuple[str, ...] | None = None
    """Endpoint root(s) of an independent labeller ``g_phi`` (an ``openai`` backend); ``None``: the critic's
    endpoint, as in the paper. Its backend is ``backend`` with this, ``model`` and ``api_key_env``
    (:meth:`RunConfig.hindsight_backend`), for ``ceb score``, ``ceb grid`` and the gate."""
    model: str | None = None
    """Model name of the labeller at its endpoint; ``None``: the critic's ``backend.model``."""
    api_key_env: str | None = None
    """Environment variable holding the labeller's API key; ``None``: the critic's ``backend.api_key_env``."""
    gui_observations: bool = False
    """Show each step's observation in the web and mobile hindsight prompt (and to the offline labeller).
    ``False``: the paper's template (``Step i: [op] element | reason``). Streams converted with ``--observation
    reference`` hold the human's action there, from which the labels are computed: turning this on shows the
    labeller the answer. Shell and SQL prompts always show observations."""


class BaselineConfig(_Section):
    """Settings of the paper's baselines (section 4.1); each critic of :mod:`ceb.stages.baselines` reads its own."""

    prompt_logprobs: int = Field(20, ge=1, le=100_000)
    """``K`` of teacher forcing (PPL, ME, PRO): vLLM's ``prompt_logprobs=K`` returns each prompt token's log-prob
    and the ``K`` most likely; ME's entropy is truncated to them. vLLM refuses more than ``--max-logprobs`` (20)."""
    share_statistics: bool = True
    """Fetch a statistic several methods read once per step and share it (:mod:`ceb.stages.statistics`): PPL, ME
    and PRO send one teacher-forcing request per step. ``False`` sends each its own (same numbers); ``ceb batch``
    does, as each Batch request belongs to one lane."""
    me_surprisal: bool = False
    """ME on a step that carries only ``actor_logprobs`` and no actor endpoint: ``True`` takes each token's
    surprisal ``-log p(x_t)`` as a one-sample estimate of its entropy (so the score equals PPL's); ``False``
    reports the step as not available."""
    ptrue_forced: bool = True
    """P(True) from the teacher-forced log-probs of both whole answers (vLLM's ``prompt_logprobs``); ``False``
    reads the first answer token's ``top_logprobs`` (servers without ``prompt_logprobs``, e.g. OpenAI)."""
    ptrue_top_logprobs: int = Field(20, ge=1, le=100_000)
    """Alternatives read for the P(True) answer token when not forced (OpenAI allows at most 20)."""
    ptrue_max_tokens: int = Field(1, ge=1, le=_MAX_TOKENS)
    """Output budget of P(True), in tokens; only the first token is read."""
    cot_temperature: float = Field(0.0, ge=0, le=_MAX_TEMPERATURE)
    """Sampling temperature of the CoT critic."""
    cot_max_tokens: int = Field(1300, ge=1, le=_MAX_TOKENS)
    """Output budget of the CoT critic, in tokens. In the ``json_schema`` and ``vllm`` modes the schema bounds the
    reasoning to :data:`~ceb.stages.baselines.cot.COT_REASONING_MAX_CHARS` characters (12 lines of 100), which this
    holds at one character per token plus the JSON; under ``json_object`` and ``none`` only this bounds the reply."""
    verbalized_max_tokens: int = Field(8, ge=1, le=_MAX_TOKENS)
    """Output budget of the actor's continuation with its confidence, in tokens."""
    pro_samples: int = Field(5, ge=1, le=1000)
    """``N`` actions PRO samples from the actor (paper: 5)."""
    pro_temperature: float = Field(1.0, ge=0, le=_MAX_TEMPERATURE)
    """Sampling temperature of PRO's samples (1 keeps their log-probs the model's own)."""
    pro_max_tokens: int = Field(256, ge=1, le=_MAX_TOKENS)
    """Cap on each sampled action's budget, in tokens; the budget sent is the frozen action's characters plus 16
    when smaller (:func:`~ceb.stages.baselines.pro.sample_budget`)."""
    actor_base_url: str | None = None
    """Endpoint of the ACTOR model for ``verbalized`` and ``pro`` (and teacher forcing); ``None``: the critic's."""
    actor_model: str | None = None
    """Actor model name at that endpoint; ``None``: the critic's model."""


class CacheConfig(_Section):
    """The persistent cache of model replies (:mod:`ceb.backends.cache`): a second identical run asks nothing.

    Keyed by the whole request, the endpoint (backend, model, base URLs, structured-output mode) and the served
    model as the server reports it once per run (id, weights root, version, weights digest where local), so
    another model under the same name is never served old replies. Only deterministic requests (temperature 0, or
    a seed) are cached unless ``nondeterministic``; failures never are.
    """

    mode: Literal["off", "read", "read-write"] = "off"
    """``off``; ``read``: use cached replies, write nothing (opened read-only; a missing cache is refused);
    ``read-write``: also store every new cacheable reply (file created when missing)."""
    path: Path = Path("ceb-cache.sqlite")
    """The cache file (SQLite, WAL: several processes may share it); relative to the working directory."""
    nondeterministic: bool = False
    """Also cache sampled requests (e.g. hindsight votes at ``tau``): a second run replays the first run's samples
    one for one (keyed by lane and rank), so its rows repeat."""


class PromptConfig(_Section):
    """Prompt templates and the character budgets of untrusted text in them."""

    prompt_dir: Path | None = None
    """A directory searched before the packaged templates (``<dir>/<domain>/critic_user.j2``)."""
    task_chars: int = Field(2000, ge=16, le=_MAX_CHARS)
    """Budget of the task ``q`` in every prompt, in characters."""
    state_chars: int = Field(2000, ge=16, le=_MAX_CHARS)
    """Budget of the current state in the critic prompt, in characters."""
    action_chars: int = Field(600, ge=16, le=_MAX_CHARS)
    """Budget of one action or reasoning string, in characters."""
    history_observation_chars: int = Field(600, ge=16, le=_MAX_CHARS)
    """Budget of each earlier observation in the critic's history, in characters."""
    history_steps: int = Field(100, ge=1, le=1_000_000)
    """Latest earlier steps shown in the critic's history, with a line counting those left out. The paper names no
    length; the bound keeps a very long trajectory's prompt and cost from growing."""
    bank_state_chars: int = Field(400, ge=16, le=_MAX_CHARS)
    """Budget of a bank record's state summary (also used in retrieval keys), in characters."""
    bank_observation_chars: int = Field(300, ge=16, le=_MAX_CHARS)
    """Budget of a bank record's observation summary, in characters."""
    hindsight_observation_chars: int = Field(600, ge=16, le=_MAX_CHARS)
    """Budget of each observation in the hindsight prompt, in characters."""


class CriticEndpointConfig(_Section):
    """One critic of a grid: a label and the endpoint / model that plays the frozen critic and labeler."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    """Label in result rows and file names (``critic`` column), e.g. ``qwen3-32b``."""
    base_url: str | tuple[str, ...] | None = None
    """Endpoint root(s); ``None`` keeps ``backend.base_url``."""
    model: str | None = None
    """Model name; ``None`` keeps ``backend.model``."""
    backend: str | None = None
    """Backend name; ``None`` keeps ``backend.name``. (Read from the old key ``name_backend`` too, with a note.)"""

    @model_validator(mode="before")
    @classmethod
    def _old_backend_key(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "name_backend" in data:
            data = dict(data)
            old = data.pop("name_backend")
            data.setdefault("backend", old)
            _deprecated("critics[].name_backend", "critics[].backend")
        return data


class GateConfig(_Section):
    """The live gate (:mod:`ceb.gate`, ``ceb serve``): its method and the decision a score maps to.

    A step's decision is ``allow`` when its score is ``>= allow``, ``block`` when it is ``< block``, and
    ``review`` in between (probabilities in [0, 1]); a step the critic could not score gets ``on_failure``.
    """

    method: str = "ceb"
    """``ceb`` (with the bank) or ``static`` (no bank); a method needing held-out labels is refused."""
    allow: float = Field(0.5, ge=0, le=1)
    """Scores at or above this are ``allow``."""
    block: float = Field(0.2, ge=0, le=1)
    """Scores below this are ``block``; must be ``<= allow``."""
    on_failure: Literal["allow", "review", "block"] = "review"
    """Decision for a step without a score (the critic failed or cannot score it)."""
    fsync: bool = True
    """``fsync`` every accepted trajectory and bank update with a state directory (durable against power loss)."""
    snapshot_every: int = Field(256, ge=1, le=1_000_000_000)
    """Bank updates of a stream between snapshots of its bank, with a state directory (and at least half the
    bank's records new). A restart loads the last snapshot and replays the journal after it. A snapshot rewrites
    the journal under the stream's bank lock, so scoring waits: 0.6 s at 10,000 records, 2.9 s at 100,000
    (``python benchmarks/gate_restart.py``)."""
    max_open_trajectories: int = Field(10_000, ge=1, le=100_000_000)
    """Trajectories per stream whose scores are kept between ``score`` and ``finish``; beyond it the oldest is
    forgotten (banked without a pre-execution score)."""
    max_pending: int = Field(1024, ge=1, le=10_000_000)
    """Accepted trajectories per stream waiting for hindsight; beyond it requests are refused
    (:class:`~ceb.errors.OverloadedError`, HTTP 503 with ``Retry-After``)."""
    max_streams: int = Field(1024, ge=1, le=1_000_000)
    """Streams the gate holds at most (each a bank, a task and, with a state directory, a folder). A new stream
    beyond it is refused (:class:`~ceb.errors.StreamLimitError`, HTTP 409: streams never close); restored streams
    count and are all restored."""
    degraded_after: int = Field(3, ge=1, le=1_000_000)
    """Consecutive critic failures after which the gate is degraded: ``GET /health`` answers 503 with the reason,
    endpoint and last error (:mod:`ceb.gate.health`), and the critic is not asked until a check passes."""
    probe_every_s: float = Field(5.0, gt=0, le=3600)
    """Seconds between checks of the critic endpoint while degraded (each within ``check_timeout_s``); meanwhile
    every score is ``on_failure`` at once."""
    check_timeout_s: float = Field(5.0, gt=0, le=600)
    """Seconds the start-up check of the critic (model list, one one-token request) may take; past it, or
    unreachable, the gate warns, starts degraded and serves anyway."""

    @model_validator(mode="after")
    def _ordered_thresholds(self) -> GateConfig:
        if self.block > self.allow:
            raise ValueError(f"block ({self.block}) must not exceed allow ({self.allow})")
        return self


class ServeConfig(_Section):
    """``ceb serve``'s HTTP front (:mod:`ceb.serve.app`): who may call it, and how long a client may hold it.

    What each setting protects against: ``docs/gate.md``, "What is protected".
    """

    allowed_hosts: tuple[str, ...] = ()
    """Names a request's ``Host`` may carry besides the bound address (and ``localhost`` on loopback):
    ``gate.example.com`` (any port) or ``gate.example.com:8377``. Others get 421 (DNS rebinding)."""
    allowed_origins: tuple[str, ...] = ()
    """Web origins (``https://app.example.com``) whose pages may call the gate; a request carrying any other
    ``Origin`` header gets 403. Empty: no web page may (clients outside a browser send no ``Origin``)."""
    header_timeout_s: float = Field(5.0, gt=0, le=3600)
    """Seconds a connection may take to send a request's headers, counted from its opening or from its previous
    answer; past it the connection is closed (an idle keep-alive connection too)."""
    body_timeout_s: float = Field(10.0, gt=0, le=3600)
    """Seconds a request may take to send its body; past it the request gets 408 and its connection is closed."""
    max_connections: int = Field(512, ge=1, le=1_000_000)
    """Open connections at most; a request on a connection beyond gets 503 saying so, and that connection is
    closed. Keep it below the open-file limit (``ulimit -n``) less the critic's connections."""
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    """Largest request body, in bytes (a long trajectory with page states fits); 413 beyond."""


_MOVED: dict[tuple[str, str], tuple[str, str]] = {
    ("ceb", "tau"): ("hindsight", "temperature"),
    ("baselines", "format_retries"): ("critic", "format_retries"),
}
"""Old ``(section, key)`` -> its new place; the new key wins when both are given."""


class RunConfig(_Section):
    """Everything a scoring run needs besides its input streams and output directory."""

    backend: BackendConfig = BackendConfig()
    ceb: CEBConfig = CEBConfig()
    bank: BankConfig = BankConfig()
    critic: CriticConfig = CriticConfig()
    hindsight: HindsightConfig = HindsightConfig()
    prompts: PromptConfig = PromptConfig()
    baselines: BaselineConfig = BaselineConfig()
    gate: GateConfig = GateConfig()
    serve: ServeConfig = ServeConfig()
    cache: CacheConfig = CacheConfig()
    methods: tuple[str, ...] = Field(("ceb", "static"), min_length=1)
    """Methods to run on every stream (``ceb``; ``static``, the same critic with no bank); at least one."""
    orders: int = Field(1, ge=1, le=1000)
    """Stream orders ``R`` (paper section 4.4): order 0 is the input order, order ``r >= 1`` the permutation
    seeded ``order_seed + r``, each a lane with its own bank (paper: 5; at most 1000)."""
    order_seed: int = 0
    """Base seed of the stream-order permutations."""
    max_trajectories: int | None = Field(None, ge=1, le=2**63 - 1)
    """Score only the first this many trajectories of each order (``None``: all), after the permutation, so a
    limited run is the start of the full one: a resume may raise the limit, never lower it."""
    critics: tuple[CriticEndpointConfig, ...] = ()
    """Several critics in one run (a grid's critic axis); empty: one critic, ``backend``, with label ``""``."""
    ece_bins: int = Field(10, ge=1, le=10_000)
    """Equal-width bins of the reported ECE (at most 10,000: finer bins hold one step each and say nothing)."""
    max_active_lanes: int = Field(256, ge=1, le=1_000_000)
    """Chains in progress at once, each sequential: a bank lane, a ``static`` trajectory, a baseline step
    (:mod:`ceb.pipeline.pool`)."""
    speculation: int = Field(1, ge=0, le=64)
    """Trajectories a bank lane (``ceb``, ablations, ``ceb-gt-oracle``) scores ahead of its bank: ``D`` > 0 starts
    ``j+1..j+D`` (and their votes) while ``j`` is scored, each on a copy of the bank grown with its predecessors'
    voted records, a step waiting only for the scores of the precedents it retrieves; a step ahead is kept when its
    critic request is the strict order's, and from the first that differs the trajectory is asked again
    (:mod:`ceb.pipeline.lane`). The rows are the strict order's on a deterministic server; ``summary.json`` counts
    ``discarded_requests``. 0: strict; the offline stand-in and ``bank.policy = "usefulness"`` always run strict.
    At most 64 (docs/performance.md)."""
    allow_unavailable: bool = False
    """Run methods that cannot score on this backend (an LLM-only baseline on ``offline``) as rows marked "not
    available" instead of refusing the run at start."""
    fail_on_error: float = Field(0.25, gt=0)
    """Stop the run when failed steps exceed this: a count if >= 1, else a fraction of steps (after 20 steps)."""

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, data: Any) -> Any:
        """Move settings from their old keys (an older run's ``config.json``) to their new ones."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        if data.pop("reuse_bank_free", True) is False:  # a switch that is gone: the pool asks once for every order
            _deprecated("reuse_bank_free = false", "true (bank-free methods are asked once for all orders)")
        for (old_section, old_key), (new_section, new_key) in _MOVED.items():
            section = data.get(old_section)
            if not isinstance(section, Mapping) or old_key not in section:
                continue
            section = dict(section)
            value = section.pop(old_key)
            data[old_section] = section
            target = dict(data.get(new_section) or {})
            target.setdefault(new_key, value)
            data[new_section] = target
            _deprecated(f"{old_section}.{old_key}", f"{new_section}.{new_key}")
        return data

    @model_validator(mode="after")
    def _unique_critics(self) -> RunConfig:
        names = [c.name for c in self.critics]
        if len(set(names)) != len(names):
            raise ValueError(f"critic names repeat: {names}")
        return self

    @model_validator(mode="after")
    def _critic_endpoints_select_a_backend(self) -> RunConfig:
        """A critic's ``base_url`` selects ``openai`` for it while the run's backend is the default ``offline``."""
        if self.backend.name != "offline" or "name" in self.backend.model_fields_set:
            return self
        for c in self.critics:
            if c.base_url and c.backend is None:
                object.__setattr__(c, "backend", "openai")
        return self

    def hindsight_backend(self) -> BackendConfig | None:
        """The labeller's own backend (``backend`` with the ``hindsight`` endpoint fields), or ``None``: the critic's.

        A ``hindsight.base_url`` makes it ``openai``.
        """
        h = self.hindsight
        if h.base_url is None and h.model is None and h.api_key_env is None:
            return None
        changes: dict[str, Any] = {"base_url": h.base_url, "model": h.model, "api_key_env": h.api_key_env}
        if h.base_url is not None:
            changes["name"] = "openai"
        return self.backend.model_copy(update={k: v for k, v in changes.items() if v is not None})

    def critic_configs(self) -> dict[str, RunConfig]:
        """Critic label -> the configuration its stages are built from (``{"": self}`` without ``critics``)."""
        if not self.critics:
            return {"": self}
        out: dict[str, RunConfig] = {}
        for c in self.critics:
            changes = {"base_url": c.base_url, "model": c.model, "name": c.backend}
            backend = self.backend.model_copy(update={k: v for k, v in changes.items() if v is not None})
            out[c.name] = self.model_copy(update={"backend": backend, "critics": ()})
        return out


def merge_settings(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge settings layers (defaults < file < flags); ``over`` wins, its ``None`` values ignored."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge_settings(out[k], v)
        elif isinstance(v, Mapping):
            out[k] = merge_settings({}, v)
        elif v is not None:
            out[k] = v
    return out


def _refuse_stand_in(config: RunConfig) -> None:
    """Raise :class:`ConfigError` for an endpoint beside the offline stand-in, which never asks it."""
    fix = "choose backend 'openai' for an endpoint, or leave the URL out"
    b = config.backend
    if b.name == "offline" and b.base_urls:
        raise ConfigError(
            f"bad configuration: backend 'offline' scores with no model, and base_url {','.join(b.base_urls)!r} "
            f"names an endpoint: {fix}"
        )
    for label, c in config.critic_configs().items():
        if label and c.backend.name == "offline" and c.backend.base_urls:
            raise ConfigError(
                f"bad configuration: critic {label!r}: backend 'offline' scores with no model, and base_url "
                f"{','.join(c.backend.base_urls)!r} names an endpoint: {fix}"
            )
    if b.name == "offline" and not config.critics:
        for where, url in (
            ("hindsight.base_url", config.hindsight.base_url),
            ("baselines.actor_base_url", config.baselines.actor_base_url),
        ):
            if url:
                raise ConfigError(
                    f"bad configuration: {where} {url!r} names an endpoint, but the critic's backend is 'offline' "
                    "(no model), so the run would score with the offline stand-in: give the critic's endpoint too "
                    "(backend.base_url), or leave it out"
                )


def read_settings_file(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """A TOML (``.toml``) or JSON (other suffix) settings file as a dict; ``what`` names it in errors.

    Raises:
        ConfigError: Unreadable, unparsable, or not a table at the top (names the file).
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
        data = tomllib.loads(raw.decode()) if p.suffix == ".toml" else orjson.loads(raw)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"{what} {p}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {p}: the top level must be a table / object")
    return data


def load_config(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    base: Mapping[str, Any] | None = None,
) -> RunConfig:
    """The effective :class:`RunConfig`: defaults < ``base`` (a resumed run's record) < file ``path`` < ``overrides``.

    ``path`` is a ``.toml`` or ``.json`` file of :class:`RunConfig`'s sections; ``overrides`` are nested
    command-line values (``{"ceb": {"k": 3}}``), their ``None`` entries ignored.

    Raises:
        ConfigError: The file is unreadable or unparsable, a value unknown or out of range (names it), or an
            endpoint is named beside the offline stand-in (only checked here, so old recorded runs read back).
    """
    data = read_settings_file(path) if path is not None else {}
    merged = merge_settings(merge_settings(base or {}, data), overrides or {})
    try:
        config = RunConfig.model_validate(merged)
    except ValidationError as exc:
        lines = [": ".join(filter(None, (".".join(map(str, e["loc"])), _message(e)))) for e in exc.errors()]
        src = f" (file {path})" if path else ""
        # One mistake reads as one line, as every other refusal does; several are listed one per line.
        shown = f" {lines[0]}" if len(lines) == 1 else "\n" + "\n".join(f"  {line}" for line in lines)
        raise ConfigError("bad configuration" + src + ":" + shown) from exc
    _refuse_stand_in(config)
    return config


def _section_at(loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The section a validation error's location points into (``("ceb", "votse")`` -> CEBConfig)."""
    model: type[BaseModel] = RunConfig
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None:
            return model if part == loc[-1] else None
        inner = field.annotation
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            model = inner
        else:
            return None
    return None


def _message(error: Any) -> str:
    """A validation error's message; an unknown key also names its section's closest key."""
    if error["type"] == "value_error":  # a validator's own sentence, without pydantic's "Value error, "
        return str(error["ctx"]["error"])
    if error["type"] != "extra_forbidden":
        return str(error["msg"])
    section = _section_at(error["loc"])
    known = list(section.model_fields) if section is not None else []
    key = str(error["loc"][-1])
    return f"unknown setting{did_you_mean(key, known)}" + (f"; this section has: {', '.join(known)}" if known else "")
