"""Hugging Face transformers backend: batched ``generate`` with left padding, on CPU or GPU,
optional LoRA adapter (peft), JSON-schema constrained decoding with ``llguidance``.

Constrained decoding: each prompt gets an ``llguidance.LLMatcher`` compiled from its JSON
schema (grammars are cached per distinct schema). A ``LogitsProcessor`` feeds every newly
sampled token to its row's matcher, computes the allowed-token bitmask of all rows in one
parallel call (``fill_next_token_bitmask_par``) and sets the logits of disallowed tokens to
``-inf``; once a row's grammar is complete only the end-of-turn token is allowed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from agent_models.llm.backends.base import (
    BatchBackend,
    Generation,
    LLMBackendError,
    Messages,
    Sampling,
    template_keeps_system,
)
from agent_models.llm.config import LLMConfig
from policysim_infra.extras import require


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise LLMBackendError(
            f"device={device!r}: CUDA is not available on this machine; use 'cpu'"
        )
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    import torch

    if dtype == "auto":
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def render_chat(tokenizer: Any, messages: Messages) -> str:
    """Apply the tokenizer's chat template (a plain ``role: content`` layout if it has none)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    body = "".join(f"{m['role']}: {m['content']}\n\n" for m in messages)
    return body + "assistant: "


class GuidanceLogitsProcessor:
    """Masks the logits of a batch with one ``llguidance`` matcher per row (None = free row).

    Rows: a finished row (it emitted an end token) is left alone (``generate`` pads it); a row
    whose grammar is complete or in error is forced to emit the end token.
    """

    def __init__(self, matchers: list[Any], vocab_size: int, eos_ids: Sequence[int]) -> None:
        import llguidance
        from llguidance.numpy import allocate_token_bitmask

        self.matchers = matchers
        self.vocab_size = vocab_size
        self.eos_ids = list(eos_ids)
        self.done = [m is None for m in matchers]
        self.bitmask = allocate_token_bitmask(len(matchers), vocab_size)
        self.executor = llguidance.LLExecutor()
        self.started = False

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch
        from llguidance.numpy import fill_next_token_bitmask_par

        if self.started:
            last = input_ids[:, -1].tolist()
            for i, matcher in enumerate(self.matchers):
                if self.done[i]:
                    continue
                if last[i] in self.eos_ids:
                    self.done[i] = True
                elif not matcher.is_stopped() and not matcher.is_error():
                    matcher.consume_token(last[i])
        self.started = True
        masked = [
            i
            for i, m in enumerate(self.matchers)
            if not self.done[i] and not m.is_stopped() and not m.is_error()
        ]
        forced = [
            i
            for i, m in enumerate(self.matchers)
            if not self.done[i] and (m.is_stopped() or m.is_error())
        ]
        width = scores.shape[1]
        if masked:
            fill_next_token_bitmask_par(
                self.executor, [(self.matchers[i], i) for i in masked], self.bitmask
            )
            bits = np.unpackbits(self.bitmask[masked].view(np.uint8), axis=1, bitorder="little")
            allowed = np.zeros((len(masked), width), dtype=bool)
            span = min(width, bits.shape[1])
            allowed[:, :span] = bits[:, :span].astype(bool)
            rows = torch.as_tensor(masked, device=scores.device)
            block = scores[rows]
            block[~torch.from_numpy(allowed).to(scores.device)] = float("-inf")
            scores[rows] = block
        if forced:
            rows = torch.as_tensor(forced, device=scores.device)
            block = torch.full(
                (len(forced), width), float("-inf"), dtype=scores.dtype, device=scores.device
            )
            block[:, self.eos_ids[0]] = 0.0
            scores[rows] = block
        return scores


class HFBackend(BatchBackend):
    """transformers ``AutoModelForCausalLM`` behind the :class:`Backend` interface.

    Args:
        config: uses ``model``, ``tokenizer``, ``device``, ``dtype``, ``cpu_threads``,
            ``lora_path``, ``lora_merge`` and ``batch_size`` (prompts per ``generate``, sorted by length so
            that padding stays small).
    """

    name = "hf"

    def __init__(self, config: LLMConfig) -> None:
        import torch

        transformers = require("transformers", "llm", "backend='hf'")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config = config
        self.device = resolve_device(config.device)
        if config.cpu_threads is not None and self.device == "cpu":
            torch.set_num_threads(config.cpu_threads)
        gguf = {"gguf_file": config.gguf_file} if config.gguf_file else {}
        self.tokenizer = AutoTokenizer.from_pretrained(
            config.tokenizer or config.model, **({} if config.tokenizer else gguf)
        )
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
        dtype_key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
        model = AutoModelForCausalLM.from_pretrained(
            config.model, **{dtype_key: resolve_dtype(config.dtype, self.device)}, **gguf
        )
        if config.lora_path:
            peft = require("peft", "llm", "lora_path with backend='hf'")
            model = peft.PeftModel.from_pretrained(model, config.lora_path)
            if config.lora_merge:
                model = model.merge_and_unload()
        self.model = model.to(self.device).eval()
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        eos: list[int] = []
        for value in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            for token in value if isinstance(value, list) else [value]:
                if token is not None and token not in eos:
                    eos.append(int(token))
        if not eos:
            raise LLMBackendError(f"model {config.model!r}: no end-of-sequence token is defined")
        self.eos_ids = eos
        self._lltokenizer: Any = None
        self._grammars: dict[str, str] = {}
        self._torch = torch
        self.system_role = config.system_role == "system" or (
            config.system_role == "auto"
            and template_keeps_system(lambda m: render_chat(self.tokenizer, m))
        )

    # ------------------------------------------------------------------ tokens
    def encode(self, prompts: Sequence[Messages]) -> list[list[int]]:
        texts = [render_chat(self.tokenizer, p) for p in prompts]
        # a chat template writes its own BOS; the plain layout needs the tokenizer's (Gemma)
        plain = not getattr(self.tokenizer, "chat_template", None)
        return self.tokenizer(texts, add_special_tokens=plain)["input_ids"]

    def count_tokens(self, prompts: Sequence[Messages]) -> np.ndarray:
        return np.array([len(ids) for ids in self.encode(prompts)], dtype=np.int64)

    # ------------------------------------------------------------------ grammar
    def _matcher(self, schema: dict[str, Any]) -> Any:
        import llguidance
        import llguidance.hf

        if self._lltokenizer is None:
            self._lltokenizer = llguidance.hf.from_tokenizer(
                self.tokenizer, n_vocab=self.vocab_size, eos_token=list(self.eos_ids)
            )
        key = json.dumps(schema, sort_keys=True)
        grammar = self._grammars.get(key)
        if grammar is None:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": False}
            )
            error = llguidance.LLMatcher.validate_grammar(grammar, self._lltokenizer)
            if error and not error.startswith("WARNING"):
                raise ValueError(f"JSON schema not supported by llguidance: {error}")
            self._grammars[key] = grammar
        return llguidance.LLMatcher(self._lltokenizer, grammar, log_level=0)

    # ------------------------------------------------------------------ generate
    def generation_config(self, sampling: Sampling) -> Any:
        """The ``GenerationConfig`` of a call. ``top_k`` off is ``0``: ``None`` would let
        transformers fill in its default of 50."""
        from transformers import GenerationConfig

        do_sample = sampling.temperature > 0
        return GenerationConfig(
            do_sample=do_sample,
            temperature=sampling.temperature if do_sample else None,
            top_p=sampling.top_p if do_sample else None,
            top_k=(sampling.top_k if sampling.top_k > 0 else 0) if do_sample else None,
            repetition_penalty=sampling.repetition_penalty,
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=self.eos_ids,
            pad_token_id=int(self.tokenizer.pad_token_id),
        )

    def _complete(
        self, prompts: Sequence[Messages], schemas: list[dict[str, Any] | None], sampling: Sampling
    ) -> Generation:
        torch = self._torch
        from transformers import LogitsProcessorList

        n = len(prompts)
        ids = self.encode(prompts)
        order = np.argsort([len(x) for x in ids], kind="stable")
        texts: list[str] = [""] * n
        prompt_tokens = np.zeros(n, np.int64)
        completion_tokens = np.zeros(n, np.int64)
        finish: list[str] = ["stop"] * n
        pad = int(self.tokenizer.pad_token_id)
        gen_config = self.generation_config(sampling)
        devices = [torch.device(self.device).index or 0] if self.device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            if sampling.seed is not None:
                torch.manual_seed(int(sampling.seed))
            for lo in range(0, n, self.config.batch_size):
                rows = order[lo : lo + self.config.batch_size]
                width = max(len(ids[i]) for i in rows)
                input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for r, i in enumerate(rows):
                    input_ids[r, width - len(ids[i]) :] = torch.tensor(ids[i])
                    mask[r, width - len(ids[i]) :] = 1
                processors = LogitsProcessorList()
                if any(schemas[i] is not None for i in rows):
                    matchers = [
                        None if schemas[i] is None else self._matcher(schemas[i]) for i in rows
                    ]
                    processors.append(
                        GuidanceLogitsProcessor(matchers, self.vocab_size, self.eos_ids)
                    )
                out = self.model.generate(
                    input_ids=input_ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    generation_config=gen_config,
                    logits_processor=processors,
                )
                new = out[:, width:].cpu().numpy()
                is_end = np.isin(new, self.eos_ids)
                has_end = is_end.any(axis=1)
                first_end = np.where(has_end, is_end.argmax(axis=1), new.shape[1])
                decoded = self.tokenizer.batch_decode(
                    [new[r, : first_end[r]].tolist() for r in range(len(rows))],
                    skip_special_tokens=True,
                )
                for r, i in enumerate(rows):
                    texts[i] = decoded[r]
                    prompt_tokens[i] = len(ids[i])
                    completion_tokens[i] = first_end[r] + int(has_end[r])
                    finish[i] = "stop" if has_end[r] else "length"
        return Generation(texts, prompt_tokens, completion_tokens, finish)

    def score_labels(self, prompts: Sequence[Messages], labels: Sequence[str]) -> np.ndarray:
        """(n, L) summed log-probabilities of each label's tokens as the start of the answer,
        computed directly: one forward pass per label over the batch, logits kept only at
        the label's positions."""
        torch = self._torch
        ids = self.encode(prompts)
        label_ids = [
            self.tokenizer(label, add_special_tokens=False)["input_ids"] for label in labels
        ]
        out = np.zeros((len(prompts), len(labels)), np.float64)
        pad = int(self.tokenizer.pad_token_id)
        order = np.argsort([len(x) for x in ids], kind="stable")
        with torch.inference_mode():
            for lo in range(0, len(prompts), self.config.batch_size):
                rows = order[lo : lo + self.config.batch_size]
                for j, tail in enumerate(label_ids):
                    seqs = [ids[i] + tail for i in rows]
                    width = max(len(s) for s in seqs)
                    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
                    mask = torch.zeros((len(rows), width), dtype=torch.long)
                    for r, seq in enumerate(seqs):
                        input_ids[r, width - len(seq) :] = torch.tensor(seq)
                        mask[r, width - len(seq) :] = 1
                    k = len(tail)
                    logits = (
                        self.model(
                            input_ids=input_ids.to(self.device),
                            attention_mask=mask.to(self.device),
                            logits_to_keep=k + 1,
                        )
                        .logits[:, :k]
                        .float()
                    )
                    logp = torch.log_softmax(logits, dim=-1)
                    target = torch.tensor(tail, device=logp.device).expand(len(rows), k)
                    picked = logp.gather(2, target.unsqueeze(-1)).squeeze(-1).sum(dim=1)
                    out[rows, j] = picked.cpu().numpy()
        return out

    def close(self) -> None:
        self.model = None
        if self.device.startswith("cuda"):
            self._torch.cuda.empty_cache()
