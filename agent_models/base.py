"""The interface every user brain implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from agent_models.types import PostColumns, RoundInput, RoundOutput, UserColumns


class Brain(ABC):
    """Decides, for all active users of a round in one batch, what they do.

    Lifecycle: ``reset`` once per episode (before round 0), then ``act`` once per round.
    A brain keeps per-user state of its own (memories, say) in ``state_dict`` so a saved
    env resumes exactly.
    """

    #: Dimension of the post/user embeddings the brain produces, or None to use the
    #: scenario's latent dimension.
    embedding_dim: int | None = None
    #: Whether the brain reads post texts (the env then generates texts for synthetic posts).
    needs_text: bool = False
    #: Whether the brain reads only the posts of the current round's feeds, keeps no post ids
    #: across rounds, and so lets the env drop posts older than the feeds' horizon (ids of the
    #: kept posts shift down; see ``Simulation.compact_posts``).
    supports_post_compaction: bool = False
    #: Whether the simulation may skip ``RoundOutput.validate`` on this brain's output (only
    #: for built-in, tested brains; model-driven brains keep the check).
    trusted_output: bool = False

    @abstractmethod
    def reset(self, users: UserColumns, posts: PostColumns, seed: int) -> np.ndarray | None:
        """Start an episode. May return (N, embedding_dim) float32 user embeddings that replace
        ``users.latent`` (an LLM brain embeds profile texts); None keeps the scenario's."""

    @abstractmethod
    def act(self, round_input: RoundInput) -> RoundOutput:
        """Decide the behaviours of ``round_input.active`` (all of them, in one batch)."""

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        """(n, embedding_dim) float32 embeddings of ``texts``; used by the env to embed
        history posts when the brain has its own ``embedding_dim``."""
        raise TypeError(f"{type(self).__name__} has no text embedder (embedding_dim is None)")

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state

    def close(self) -> None:  # noqa: B027 - optional hook, most brains hold nothing to release
        """Release models, engines, connections."""
