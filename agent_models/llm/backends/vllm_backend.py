"""vLLM backend: the in-process ``vllm.LLM`` engine (GPU), one ``chat`` call per batch.

- tensor parallelism: ``tensor_parallel_size``;
- LoRA: ``lora_path`` → ``enable_lora=True`` and a ``LoRARequest`` on every call;
- prefix caching on by default (the agent prompts share their system message);
- structured outputs: ``SamplingParams(structured_outputs=StructuredOutputsParams(json=...))``
  (API of vLLM ≥ 0.11; the ``vllm`` extra asks for ≥ 0.20, the first release that accepts
  transformers 5; engine option ``structured_outputs_config={"backend": "guidance"}``);
- chat templates without a system role (Gemma): the brain folds the system message into
  the first user message (``system_role``), checked on the engine's tokenizer.

``vllm`` is imported only when this backend is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agent_models.llm.backends.base import (
    BatchBackend,
    Generation,
    Messages,
    Sampling,
    template_keeps_system,
)
from agent_models.llm.config import LLMConfig
from policysim_infra.extras import require


def token_ids(encoded: Any) -> list[int]:
    """The token ids of ``apply_chat_template(..., tokenize=True)``: a list on transformers
    4, a ``BatchEncoding`` (dict-like, ``len()`` = its number of keys) on transformers 5."""
    if hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    return list(encoded)


def engine_kwargs(config: LLMConfig) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` from the config (pure; tested without vLLM)."""
    kwargs: dict[str, Any] = {
        "model": config.model,
        "tokenizer": config.tokenizer or config.model,
        "tensor_parallel_size": config.tensor_parallel_size,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "enable_prefix_caching": config.enable_prefix_caching,
        "dtype": config.dtype,
        "seed": 0,
    }
    if config.max_model_len is not None:
        kwargs["max_model_len"] = config.max_model_len
    if config.lora_path:
        kwargs["enable_lora"] = True
        kwargs["max_lora_rank"] = config.max_lora_rank
    kwargs["structured_outputs_config"] = {"backend": config.structured_outputs_backend}
    kwargs.update(config.vllm_engine_kwargs)
    return kwargs


def sampling_kwargs(sampling: Sampling, index: int) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams`` of prompt ``index`` of a call (pure)."""
    kwargs: dict[str, Any] = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p if sampling.temperature > 0 else 1.0,
        "top_k": sampling.top_k if sampling.top_k > 0 else -1,
        "max_tokens": sampling.max_new_tokens,
        "repetition_penalty": sampling.repetition_penalty,
    }
    if sampling.seed is not None:
        kwargs["seed"] = int(sampling.seed) + index
    return kwargs


class VLLMBackend(BatchBackend):
    """``vllm.LLM`` behind the :class:`Backend` interface (needs a CUDA GPU and ``vllm``)."""

    name = "vllm"

    def __init__(self, config: LLMConfig) -> None:
        vllm = require(
            "vllm",
            "vllm",
            "backend='vllm' (a CUDA GPU; or use backend='hf' on "
            "CPU, or backend='openai' against a vLLM server)",
        )
        from vllm import sampling_params as sp

        if not hasattr(sp, "StructuredOutputsParams"):
            raise ImportError(
                f"backend='vllm' needs vLLM >= 0.11 (structured outputs API); "
                f"found {getattr(vllm, '__version__', '?')}: "
                '`pip install -U "policysim[vllm]"` (vLLM >= 0.20)'
            )
        self.config = config
        self._structured = sp.StructuredOutputsParams
        self.llm = vllm.LLM(**engine_kwargs(config))
        self._lora: Any = None
        if config.lora_path:
            from vllm.lora.request import LoRARequest

            self._lora = LoRARequest("policysim-adapter", 1, config.lora_path)
        self._SamplingParams = vllm.SamplingParams
        tokenizer = self.llm.get_tokenizer()
        self.system_role = config.system_role == "system" or (
            config.system_role == "auto"
            and template_keeps_system(
                lambda m: tokenizer.apply_chat_template(
                    m, tokenize=False, add_generation_prompt=True
                )
            )
        )

    def _params(self, schema: dict[str, Any] | None, sampling: Sampling, index: int) -> Any:
        kwargs = sampling_kwargs(sampling, index)
        if schema is not None:
            kwargs["structured_outputs"] = self._structured(json=schema)
        return self._SamplingParams(**kwargs)

    def count_tokens(self, prompts: Sequence[Messages]) -> np.ndarray:
        tokenizer = self.llm.get_tokenizer()
        return np.array(
            [
                len(
                    token_ids(
                        tokenizer.apply_chat_template(p, tokenize=True, add_generation_prompt=True)
                    )
                )
                for p in prompts
            ],
            dtype=np.int64,
        )

    def _complete(
        self, prompts: Sequence[Messages], schemas: list[dict[str, Any] | None], sampling: Sampling
    ) -> Generation:
        params = [self._params(s, sampling, i) for i, s in enumerate(schemas)]
        outputs = self.llm.chat(
            [list(p) for p in prompts],
            sampling_params=params,
            use_tqdm=False,
            lora_request=self._lora,
        )
        texts = [o.outputs[0].text for o in outputs]
        prompt_tokens = np.array([len(o.prompt_token_ids or ()) for o in outputs], np.int64)
        completion_tokens = np.array([len(o.outputs[0].token_ids) for o in outputs], np.int64)
        finish = ["length" if o.outputs[0].finish_reason == "length" else "stop" for o in outputs]
        return Generation(texts, prompt_tokens, completion_tokens, finish)

    def close(self) -> None:
        self.llm = None
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover
            pass
