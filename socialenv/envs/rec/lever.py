"""PolicySim-Rec-v0's lever: the policy's picks fill its users' recommended slots."""

from __future__ import annotations

from typing import Any

import numpy as np

from socialenv.core import kernels
from socialenv.core.lever import Lever, PolicyEffects
from socialenv.envs.rec.config import RecLeverConfig


class RecLever(Lever):
    """The recommender of the users the policy governs.

    :meth:`apply` takes the chosen (user, post) arms (``choice["user"]``,
    ``choice["post"]``), marks the posts recommended, and
    :meth:`place_recommendations` puts them into their users' personalized slots
    (:meth:`socialenv.core.platform.Recommender.place_recommendations`; inactive users are
    skipped). :meth:`effects` reports per choice its "user", "post", "author", the discrete
    stances of both at the start of the round ("user_stance", "author_stance") and
    "followed" (the user followed the author this round), and for each reaction the
    choice of the same (user, post) it answers."""

    config_class = RecLeverConfig

    def __init__(self, config: RecLeverConfig) -> None:
        super().__init__(config)
        self.reset(0)

    def reset(self, num_users: int) -> None:
        self._user = np.zeros(0, np.int64)
        self._post = np.zeros(0, np.int64)

    def apply(self, choice: dict[str, np.ndarray]) -> np.ndarray:
        self._user = np.asarray(choice["user"], np.int64)
        self._post = np.asarray(choice["post"], np.int64)
        self.sim.posts.recommended[self._post] = True
        return np.arange(len(self._user), dtype=np.int64)

    def place_recommendations(
        self, feed: np.ndarray, channel: np.ndarray, active: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        if not len(self._user):
            return feed, channel
        recommender = self.sim.recommender
        if not callable(getattr(recommender, "place_recommendations", None)):
            raise TypeError(
                f"feed_recommender {type(recommender).__name__} has no "
                "place_recommendations(feed, channel, row, post): subclass "
                "socialenv.core.platform.Recommender to receive the policy's recommendations"
            )
        row = kernels.index_of(active, self._user)
        row_ok = row >= 0
        return recommender.place_recommendations(feed, channel, row[row_ok], self._post[row_ok])

    def effects(self, round_: Any) -> PolicyEffects:
        sim, out = self.sim, round_.output
        user, post = self._user, self._post
        n_posts = len(sim.posts)
        arm_key = user * n_posts + post
        react_key = out.react_user * n_posts + out.react_post
        # the arms' (user, post) pairs are distinct (one row of distinct candidates per user)
        reaction_choice = kernels.reaction_choices(arm_key, react_key)
        author = sim.posts.author[post]
        n = sim.graph.n
        followed = (
            kernels.isin(user * n + author, out.follow_src * n + out.follow_dst)
            if len(out.follow_src)
            else np.zeros(len(user), bool)
        )
        discrete = round_.discrete_before
        self.reset(0)
        return PolicyEffects(
            choice={
                "user": user,
                "post": post,
                "author": author,
                "user_stance": discrete[user],
                "author_stance": discrete[author],
                "followed": followed,
            },
            reaction_choice=reaction_choice,
        )

    def remap_posts(self, cut: int) -> None:
        self._post = np.where(self._post >= cut, self._post - cut, -1)
