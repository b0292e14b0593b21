"""A replay cache around any backend: every call is recorded, recorded answers are replayed.

Each prompt of a call is keyed by the SHA-256 of (model name, chat messages as sent, JSON
schema, sampling parameters with the prompt's own seed ``seed + index``). The cache file is
JSON lines: a first ``{"meta": ...}`` line (model name, whether the chat template kept a
system message), then one line per answered prompt with its key, the messages, the schema's
hash, the sampling parameters and the answer (text, token counts, finish reason). Failed
requests (``finish_reason == "error"``) are not recorded.

Modes (``LLMConfig.replay_mode``):

- ``"auto"``: replay the recorded prompts, send the others to the model and record them;
- ``"record"``: send everything to the model and record (a fresh recording of a run);
- ``"replay"``: never call the model (none is loaded): a prompt that is not in the cache
  raises :class:`LLMBackendError`. A run replayed this way is identical bit for bit on any
  machine and thread count, without a GPU.

Reading a cache checks every line before using it: UTF-8 JSON objects, a ``meta`` line first,
answer lines with the fields above and their types (a ValueError naming the file, the line and
the field otherwise). A last line cut short without its newline, as a killed recording leaves
it, is skipped (and cut from the file before anything is appended). A replayed entry must have
been recorded for the prompt's messages, schema and sampling parameters, the things its key
hashes (a tampered entry is an error, not an answer).

``hits`` / ``misses`` count prompts over the backend's life; every :class:`Generation`
says how many of its answers were replayed (``replayed``), which the brain reports per round
in ``info["brain"]`` (``replay_hits``, ``replay_hit_rate``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from agent_models.llm.backends.base import (
    Backend,
    BatchBackend,
    Generation,
    LLMBackendError,
    Messages,
    Sampling,
)

REPLAY_MODES = ("auto", "record", "replay")
#: Answer-line fields and their JSON types.
_ANSWER_FIELDS: dict[str, tuple[type, ...]] = {
    "key": (str,),
    "messages": (list,),
    "schema_sha256": (str, type(None)),
    "sampling": (dict,),
    "text": (str,),
    "prompt_tokens": (int,),
    "completion_tokens": (int,),
    "finish_reason": (str,),
}


#: Largest replay cache read (the whole file is held in memory) and largest line (one recorded
#: answer: its text is bounded by the model's ``max_new_tokens``).
MAX_CACHE_BYTES = 1024**3
MAX_LINE_BYTES = 1024**2


def _digest(value: Any) -> str:
    return hashlib.sha256(
        json.dumps(value, sort_keys=True, ensure_ascii=False).encode()
    ).hexdigest()


def prompt_sampling(sampling: Sampling, index: int) -> dict[str, Any]:
    """The sampling parameters of prompt ``index`` of a call (its own seed)."""
    params = asdict(sampling)
    params["seed"] = None if sampling.seed is None else int(sampling.seed) + index
    return params


def replay_key(
    model: str, messages: Messages, schema: dict[str, Any] | None, sampling: Sampling, index: int
) -> str:
    """The cache key of prompt ``index`` of a call."""
    return _digest(
        {
            "model": model,
            "messages": list(messages),
            "schema": schema,
            "sampling": prompt_sampling(sampling, index),
        }
    )


class ReplayBackend(BatchBackend):
    """Records and replays the answers of ``inner`` (see the module docstring).

    Args:
        path: the cache file (JSON lines; created with its folder when missing).
        mode: ``"auto"``, ``"record"`` or ``"replay"``.
        model: the model's name in the keys (a file or folder name, not a full path, so a
            cache recorded on one machine replays on another).
        inner: the real backend; None only in ``"replay"`` mode.
    """

    def __init__(
        self, path: str | Path, mode: str, model: str, inner: Backend | None = None
    ) -> None:
        if mode not in REPLAY_MODES:
            raise ValueError(f"replay_mode: {mode!r} not allowed; use one of {list(REPLAY_MODES)}")
        if inner is None and mode != "replay":
            raise ValueError(f"replay_mode={mode!r} needs a backend to call on a miss")
        self.path = Path(path)
        self.mode = mode
        self.model = model
        self.inner = inner
        self.name = f"replay({inner.name if inner is not None else 'recorded'})"
        self.hits = 0
        self.misses = 0
        self.answers: dict[str, dict[str, Any]] = {}
        meta: dict[str, Any] = {}
        if self.path.exists():
            meta = self._load()
        elif mode == "replay":
            raise FileNotFoundError(f"replay: no recorded cache at {self.path}")
        if meta.get("model", model) != model:
            raise ValueError(
                f"replay: {self.path} was recorded with model {meta['model']!r}, not {model!r}"
            )
        if inner is not None:
            self.system_role = inner.system_role
        else:
            self.system_role = bool(meta.get("system_role", True))
        if not meta:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(
                    json.dumps({"meta": {"model": model, "system_role": self.system_role}}) + "\n"
                )

    def _load(self) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        size = self.path.stat().st_size
        if size > MAX_CACHE_BYTES:
            raise ValueError(
                f"replay cache {self.path}: {size} bytes is not allowed: at most "
                f"{MAX_CACHE_BYTES} (agent_models.llm.backends.replay.MAX_CACHE_BYTES); "
                "split the recording"
            )
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        torn = b""
        if lines and lines[-1].strip():  # no newline after the last line: cut short if not JSON
            try:
                json.loads(lines[-1].decode("utf-8"))
            except (ValueError, RecursionError):
                torn = lines.pop()
        for lineno, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            where = f"replay cache {self.path}: line {lineno}"
            if len(raw) > MAX_LINE_BYTES:
                raise ValueError(
                    f"{where}: {len(raw)} bytes is not allowed: at most {MAX_LINE_BYTES} "
                    "per recorded answer"
                )
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as err:
                raise ValueError(f"{where}: not UTF-8 text ({err})") from None
            except (ValueError, RecursionError) as err:
                raise ValueError(f"{where}: not JSON ({err})") from None
            if not isinstance(record, dict):
                raise ValueError(
                    f"{where}: a {type(record).__name__} is not allowed: a JSON object"
                )
            if "meta" in record:
                if (
                    lineno != 1
                    or set(record) != {"meta"}
                    or not isinstance(record["meta"], dict)
                    or not isinstance(record["meta"].get("model"), str)
                    or not isinstance(record["meta"].get("system_role", True), bool)
                ):
                    raise ValueError(
                        f"{where}: meta is not allowed here or in this form: only line 1 "
                        'holds {"meta": {"model": str, "system_role": bool}}'
                    )
                meta = record["meta"]
                continue
            for name, types in _ANSWER_FIELDS.items():
                value = record.get(name)
                if (
                    not isinstance(value, types)
                    or isinstance(value, bool)
                    or (name.endswith("_tokens") and value < 0)
                ):
                    allowed = " or ".join("null" if t is type(None) else t.__name__ for t in types)
                    raise ValueError(
                        f"{where}: {name}={value!r} is not allowed: {allowed}"
                        + (" >= 0" if name.endswith("_tokens") else "")
                    )
            if set(record) - set(_ANSWER_FIELDS):
                raise ValueError(
                    f"{where}: unknown field(s) {sorted(set(record) - set(_ANSWER_FIELDS))}"
                )
            self.answers[record["key"]] = {**record, "line": lineno}
        if self.mode != "replay" and torn:
            with self.path.open("r+b") as f:  # appending after a torn line would spoil the next one
                f.truncate(len(data) - len(torn))
        elif self.mode != "replay" and data and not data.endswith(b"\n"):
            with self.path.open("ab") as f:
                f.write(b"\n")
        return meta

    def _complete(
        self, prompts: Sequence[Messages], schemas: list[dict[str, Any] | None], sampling: Sampling
    ) -> Generation:
        n = len(prompts)
        keys = [
            replay_key(self.model, p, s, sampling, i)
            for i, (p, s) in enumerate(zip(prompts, schemas, strict=True))
        ]
        use_cache = self.mode != "record"
        missing = [i for i, k in enumerate(keys) if not (use_cache and k in self.answers)]
        if missing and self.inner is None:
            raise LLMBackendError(
                f"replay: {len(missing)} of {n} prompts of this call are not in {self.path} "
                f"(first key {keys[missing[0]][:16]}…); the run differs from the recorded one, "
                "or use replay_mode='auto' with a model to fill the gaps"
            )
        fresh: Generation | None = None
        if missing:
            assert self.inner is not None
            if len(missing) == n:
                fresh = self.inner.generate(prompts, schemas, sampling)
            else:
                fresh = self.inner.generate(
                    [prompts[i] for i in missing], [schemas[i] for i in missing], sampling
                )
            self._record(missing, keys, prompts, schemas, sampling, fresh)
        texts: list[str] = [""] * n
        prompt_tokens = np.zeros(n, np.int64)
        completion_tokens = np.zeros(n, np.int64)
        finish = ["stop"] * n
        errors: list[str | None] = [None] * n
        slot = {i: j for j, i in enumerate(missing)}
        for i, key in enumerate(keys):
            if i in slot:
                assert fresh is not None
                j = slot[i]
                texts[i], finish[i], errors[i] = (
                    fresh.texts[j],
                    fresh.finish_reasons[j],
                    fresh.errors[j],
                )
                prompt_tokens[i], completion_tokens[i] = (
                    fresh.prompt_tokens[j],
                    fresh.completion_tokens[j],
                )
            else:
                record = self.answers[key]
                self._check_entry(record, prompts[i], schemas[i], prompt_sampling(sampling, i))
                texts[i], finish[i] = record["text"], record["finish_reason"]
                prompt_tokens[i], completion_tokens[i] = (
                    record["prompt_tokens"],
                    record["completion_tokens"],
                )
        replayed = n - len(missing)
        self.hits += replayed
        self.misses += len(missing)
        return Generation(
            texts, prompt_tokens, completion_tokens, finish, errors, replayed=replayed
        )

    def _check_entry(
        self,
        record: dict[str, Any],
        messages: Messages,
        schema: dict[str, Any] | None,
        sampling: dict[str, Any],
    ) -> None:
        """A replayed entry must hold what its key hashes (else the file was edited)."""
        wanted = {
            "messages": json.loads(json.dumps(list(messages))),
            "schema_sha256": None if schema is None else _digest(schema),
            "sampling": json.loads(json.dumps(sampling)),
        }
        for name, value in wanted.items():
            if record[name] != value:
                raise ValueError(
                    f"replay cache {self.path}: line {record.get('line', '?')}: {name} does not "
                    f"match the entry's key {record['key'][:16]}… (the cache was edited); "
                    "remove the line or record again"
                )

    def _record(
        self,
        rows: list[int],
        keys: list[str],
        prompts: Sequence[Messages],
        schemas: list[dict[str, Any] | None],
        sampling: Sampling,
        gen: Generation,
    ) -> None:
        lines = []
        for j, i in enumerate(rows):
            if gen.finish_reasons[j] == "error":
                continue
            record = {
                "key": keys[i],
                "messages": list(prompts[i]),
                "schema_sha256": None if schemas[i] is None else _digest(schemas[i]),
                "sampling": prompt_sampling(sampling, i),
                "text": gen.texts[j],
                "prompt_tokens": int(gen.prompt_tokens[j]),
                "completion_tokens": int(gen.completion_tokens[j]),
                "finish_reason": gen.finish_reasons[j],
            }
            self.answers[keys[i]] = record
            lines.append(json.dumps(record, ensure_ascii=False))
        if lines:
            with self.path.open("a", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")

    def count_tokens(self, prompts: Sequence[Messages]) -> np.ndarray:
        if self.inner is None:
            raise TypeError("ReplayBackend in 'replay' mode has no local tokenizer")
        return self.inner.count_tokens(prompts)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
