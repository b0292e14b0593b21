"""Non-LLM signals of the LLM brain: sentence embeddings, toxicity, misinformation state.

Misinformation rule (our operationalisation of m_v^{t+1} in Eq. 10, documented here):
an active user becomes misinformed in round t when, in that round, they

1. retweet or like a post that carries the misinformation (``posts.misinfo``), or
2. reply to such a post with a reply that agrees with its claim (judged by the LLM in the
   brain's stance call: ``{"agrees": true}``), or
3. write a text (post or reply) whose sentence embedding has cosine similarity at least
   ``misinfo_similarity`` (default 0.6) with the scenario's ``misinformation_message``
   (restating the claim).

Disliking such a post, or replying to reject it, does not spread it.
The state is monotone within an episode (no recovery), as in the paper's reach metric.
A new original post carries the misinformation by rule 3.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agent_models.types import Behaviour
from policysim_infra.extras import require


class TextEncoder:
    """A sentence-transformers model loaded offline on first use; unit-norm float32 output."""

    def __init__(self, path: str, device: str = "cpu", batch_size: int = 64) -> None:
        self.path = path
        self.device = device
        self.batch_size = batch_size
        self._model: Any = None

    @property
    def model(self) -> Any:
        if self._model is None:
            st = require("sentence_transformers", "llm", "the LLM brain's encoder")
            self._model = st.SentenceTransformer(
                self.path, device=self.device, local_files_only=True
            )
        return self._model

    @property
    def dim(self) -> int:
        model = self.model
        getter = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        return int(getter())

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dim) float32 unit-norm embeddings of ``texts``."""
        if len(texts) == 0:
            return np.zeros((0, self.dim), np.float32)
        emb = self.model.encode(
            [t or "" for t in texts],
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(emb, np.float32)


def make_toxicity(spec: str | Callable[[list[str]], Any]) -> Callable[[Sequence[str]], np.ndarray]:
    """A toxicity scorer ``texts -> (n,) float32 in [0, 1]``.

    ``spec``: ``"profanity_check"`` (alt-profanity-check's ``predict_prob``, a local linear
    model), ``"package.module:function"``, or any callable taking a list of texts.
    """
    fn: Callable[[list[str]], Any] | None = spec if callable(spec) else None

    def resolve() -> Callable[[list[str]], Any]:
        nonlocal fn
        if fn is None:
            if spec == "profanity_check":
                fn = require("profanity_check", "llm", "toxicity='profanity_check'").predict_prob
            else:
                module, _, attr = str(spec).partition(":")
                fn = getattr(importlib.import_module(module), attr)
        return fn

    def score(texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros(0, np.float32)
        values = np.asarray(resolve()(list(texts)), np.float32).reshape(-1)
        if len(values) != len(texts):
            raise ValueError(
                f"toxicity: the classifier returned {len(values)} scores for {len(texts)} texts"
            )
        return np.clip(np.nan_to_num(values, nan=0.0), 0.0, 1.0)

    return score


def misinformation_update(
    react_user: np.ndarray,
    react_post: np.ndarray,
    react_kind: np.ndarray,
    post_misinfo: np.ndarray,
    text_user: np.ndarray,
    text_similarity: np.ndarray,
    threshold: float,
    misinformed: np.ndarray,
    agreed_user: np.ndarray | None = None,
) -> np.ndarray:
    """Users newly misinformed this round (sorted unique ids), by the module's rule.

    Args:
        react_user, react_post, react_kind: (M,) this round's reactions.
        post_misinfo: (P,) bool, whether each existing post carries the misinformation.
        text_user: (W,) authors of this round's written texts (posts and replies).
        text_similarity: (W,) cosine similarity of each text to the misinformation message.
        threshold: similarity threshold (``LLMConfig.misinfo_similarity``).
        misinformed: (N,) bool current state m^t.
        agreed_user: users whose reply agreed with a misinformation post (rule 2).
    """
    spreads = (react_kind == int(Behaviour.RETWEET)) | (react_kind == int(Behaviour.LIKE))
    adopted = react_user[spreads & post_misinfo[react_post]] if len(react_user) else react_user
    wrote = text_user[text_similarity >= threshold] if len(text_user) else text_user
    agreed = np.zeros(0, np.int64) if agreed_user is None else np.asarray(agreed_user, np.int64)
    users = np.unique(np.concatenate([adopted, wrote, agreed]).astype(np.int64))
    return users[~misinformed[users]]
