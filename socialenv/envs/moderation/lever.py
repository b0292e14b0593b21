"""PolicySim-Moderation-v0's lever: delete, suspend, label or downrank."""

from __future__ import annotations

from typing import Any

import numpy as np

from agent_models.types import PostKind, RoundOutput
from socialenv.core.lever import Lever, PolicyEffects
from socialenv.envs.moderation.config import ModerationLeverConfig
from socialenv.mechanisms.governance import MODERATION_ACTIONS, ModerationState


class ModerationLever(Lever):
    """The platform's governance decisions (:class:`socialenv.mechanisms.governance.ModerationState`,
    in ``state``): suspended users are barred from acting, the decisions in force filter
    the feeds, and labels lower belief uptake.

    :meth:`apply` takes ``choice["post"]``, ``choice["user"]`` (the author) and
    ``choice["action"]`` (index into ``moderation.actions``); a second action on a post is
    not applied. :meth:`effects` reports per applied choice its "post", "author", "name"
    (index into :data:`~socialenv.mechanisms.governance.MODERATION_ACTIONS`), "wrongful" (a delete or
    suspend of a harmless post) and "cost"; and every impression the decisions filtered
    ("user", "post", "author", "removed", "labelled", and "post_choice" /
    "author_choice": the applied choice on the post, or its original, / on its author,
    -1 for none). Governance state is indexed by post id, so the lever keeps every post
    (``supports_post_compaction = False``)."""

    config_class = ModerationLeverConfig
    supports_post_compaction = False

    def __init__(self, config: ModerationLeverConfig) -> None:
        super().__init__(config)
        self.moderation = config.moderation
        self.state: ModerationState | None = None
        self._action_index = np.array(
            [MODERATION_ACTIONS.index(a) for a in self.moderation.actions], np.int64
        )
        self._choices: dict[str, np.ndarray] = {}

    def reset(self, num_users: int) -> None:
        if self.state is None:
            self.state = ModerationState(self.moderation, num_users)
        else:
            self.state.reset(num_users)
        self._choices = {}

    def apply(self, choice: dict[str, np.ndarray]) -> np.ndarray:
        sim, mod, cfg = self.sim, self.state, self.moderation
        _, first = np.unique(choice["post"], return_index=True)
        taken = np.sort(first)
        post, author = choice["post"][taken], choice["user"][taken]
        name = self._action_index[choice["action"][taken]]
        t = sim.round
        mod.deleted[post[name == 0]] = True
        mod.suspended_until[author[name == 1]] = t + cfg.suspend_rounds
        mod.labelled[post[name == 2]] = True
        mod.downranked_until[post[name == 3]] = t + cfg.downrank_rounds
        harmful = mod.harmful(sim.posts, post)
        self._choices = {
            "post": post,
            "author": author,
            "name": name,
            "wrongful": ((name == 0) | (name == 1)) & ~harmful,
            "cost": np.array([cfg.cost[MODERATION_ACTIONS[i]] for i in name], np.float64),
        }
        return taken

    def barred(self, round_: int) -> np.ndarray:
        return self.state.suspended(round_)

    def filter_feeds(
        self, feed: np.ndarray, owner: np.ndarray, round_: int, rng: np.random.Generator
    ) -> np.ndarray:
        return self.state.filter_feeds(feed, owner, self.sim.posts, round_, rng)

    def adjust_output(
        self, output: RoundOutput, misinformed_before: np.ndarray, rng: np.random.Generator
    ) -> None:
        self.state.adjust_output(output, misinformed_before, self.sim.posts, rng)

    def effects(self, round_: Any) -> PolicyEffects:
        p, mod = self.sim.posts, self.state
        acts = self._choices or {
            "post": np.zeros(0, np.int64),
            "author": np.zeros(0, np.int64),
            "name": np.zeros(0, np.int64),
            "wrongful": np.zeros(0, bool),
            "cost": np.zeros(0),
        }
        imp_post = mod.last_post
        k = len(acts["post"])
        post_choice = np.full(len(imp_post), -1, np.int64)
        author_choice = np.full(len(imp_post), -1, np.int64)
        if k:
            name = acts["name"]
            position = np.full(len(p), -1, np.int64)
            on_post = name != 1
            position[acts["post"][on_post]] = np.flatnonzero(on_post)
            parent = p.parent[imp_post]
            original = np.where(
                (p.kind[imp_post] == int(PostKind.RETWEET)) & (parent >= 0), parent, imp_post
            )
            post_choice = np.where(position[imp_post] >= 0, position[imp_post], position[original])
            by_author = np.full(len(mod.suspended_until), -1, np.int64)
            by_author[acts["author"][~on_post]] = np.flatnonzero(~on_post)
            author_choice = by_author[p.author[imp_post]]
        self._choices = {}
        mod.wrongful_total += int(acts["wrongful"].sum())
        return PolicyEffects(
            choice=acts,
            impression={
                "user": mod.last_user,
                "post": imp_post,
                "author": p.author[imp_post],
                "removed": mod.last_removed,
                "labelled": mod.last_labelled,
                "post_choice": post_choice,
                "author_choice": author_choice,
            },
            reaction_choice=np.full(len(round_.output.react_user), -1, np.int64),
        )

    def state_dict(self) -> dict[str, Any]:
        return self.state.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is not None:
            self.state.load_state_dict(state)
