"""Oracle policies that read the hidden state: upper bounds on what any policy can achieve.

They are actors (``act(obs) -> action``, see :mod:`socialenv.envs.episodes`) bound to one env,
because they look past the observation into the simulation: the surrogate users' reaction
model and true misinformation beliefs, which no deployable policy sees. They exist to size
the lever (``benchmarks/headroom.py``): if even an oracle cannot move a platform metric, the
env is broken, whatever its tests say.

- :class:`CrossStanceOracle` (Rec): fills each sampled user's slots with the candidates most
  likely to draw a *civil* reaction across stances (exact surrogate probabilities), and
  otherwise with the posts least likely to draw any reaction at all.
- :class:`CivilCrossOracle` (Rec): the same, charging each arm its expected reply toxicity.
- :class:`RewardOracle` (Rec): the candidates with the highest expected Eq. 9 reward.
- :class:`ObjectiveOracle` (Rec): the candidates with the highest expected contribution to
  the Rec objective (civil cross-stance reactions less hostility and reply toxicity).
- :class:`MuteSpreadersOracle` (Exposure): the lowest level for every sampled author who
  truly believes or spreads the misinformation, full exposure for everyone else.
- :class:`HarmfulPostsOracle` (Moderation): one action (delete by default) on the candidate
  posts that are truly harmful, most engaged first: the flag-following rule with a perfect
  classifier.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from agent_models.surrogate import SurrogateBrain


def civil_reaction_probabilities(env: Any) -> dict[str, np.ndarray]:
    """Per arm of the current observation: P(civil reaction), P(hostile reaction), P(any),
    and whether the arm pairs opposite discrete stances."""
    base = env.unwrapped
    brain = base.brain
    if not isinstance(brain, SurrogateBrain):
        raise ValueError("the oracles read the surrogate's reaction model: use users='surrogate'")
    arms = base._arms
    user, post = np.maximum(arms["user"], 0), np.maximum(arms["post"], 0)
    sim = base.sim
    prob = brain.reaction_probabilities(sim.users.view(), sim.posts.view(), user, post)
    threshold = base.config.reward.hostile_toxicity
    expected = np.maximum(prob["reply_toxicity"], 1e-9)
    civil_reply = prob["reply"] * np.clip(threshold / expected - 0.5, 0.0, 1.0)
    hostile_reply = prob["reply"] - civil_reply
    no_civil = (1 - prob["like"]) * (1 - prob["retweet"]) * (1 - civil_reply)
    no_hostile = (1 - prob["dislike"]) * (1 - hostile_reply)
    author = sim.posts.author[post]
    stance = sim.users.discrete_stance
    return {
        "civil": 1 - no_civil,
        "hostile": 1 - no_hostile,
        "any": 1 - no_civil * no_hostile,
        "cross": (stance[user].astype(np.int16) * stance[author]) == -1,
        "divergence": np.abs(stance[author].astype(np.float64) - stance[user]) / 2,
        "engagement": (prob["like"] * 0.6 + prob["retweet"] * 0.8 + civil_reply * 1.0),
        "toxicity": prob["reply"] * prob["reply_toxicity"],
        "reply_toxicity_expected": prob["reply_toxicity"],
    }


class _RecOracle(ABC):
    def __init__(self, env: Any) -> None:
        self.env = env

    @abstractmethod
    def scores(self, p: dict[str, np.ndarray]) -> np.ndarray:
        """(K,) scores from the per-arm probabilities of :func:`civil_reaction_probabilities`."""

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        base = self.env.unwrapped
        scores = np.where(
            obs["action_mask"].astype(bool),
            self.scores(civil_reaction_probabilities(self.env)),
            -np.inf,
        )
        scores = np.nan_to_num(scores, neginf=-1e9)
        return base.slate_from_scores(scores)


class CrossStanceOracle(_RecOracle):
    """Maximises the platform's cross-stance interaction ratio without hostility: score =
    P(civil reaction) − P(hostile reaction) for cross-stance arms, −P(any reaction) − 1 for
    the others (a slot that cannot add a cross-stance reaction should add no reaction)."""

    def scores(self, p: dict[str, np.ndarray]) -> np.ndarray:
        return np.where(p["cross"], p["civil"] - p["hostile"], -p["any"] - 1.0)


class CivilCrossOracle(_RecOracle):
    """More dialogue *and* less toxicity: like :class:`CrossStanceOracle`, with every arm
    also charged ``toxicity_penalty`` × its expected reply toxicity, so hostile-prone
    receivers are shown what they will not answer with hostility."""

    toxicity_penalty = 50.0

    def scores(self, p: dict[str, np.ndarray]) -> np.ndarray:
        cost = self.toxicity_penalty * p["toxicity"]
        return np.where(p["cross"], p["civil"] - p["hostile"] - cost, -p["any"] - 1.0 - cost)


class RewardOracle(_RecOracle):
    """Ranks arms by their expected Eq. 9 reward under the true reaction model."""

    def scores(self, p: dict[str, np.ndarray]) -> np.ndarray:
        cfg = self.env.unwrapped.config.reward
        return (
            cfg.stance_weight * p["divergence"] * p["civil"]
            + cfg.engagement_weight * p["engagement"]
            - cfg.toxicity_weight * p["toxicity"]
        )


class ObjectiveOracle(_RecOracle):
    """Ranks arms by their expected contribution to the Rec objective under the true
    reaction model: [cross-stance]·(P(civil reaction) − ``hostile_weight``·P(hostile) −
    ``reply_toxicity_weight``·E[reply toxicity])."""

    def scores(self, p: dict[str, np.ndarray]) -> np.ndarray:
        cfg = self.env.unwrapped.config.reward
        return p["cross"] * (
            p["civil"]
            - cfg.hostile_weight * p["hostile"]
            - cfg.reply_toxicity_weight * p["toxicity"]
        )


class MuteSpreadersOracle:
    """Exposure: level ``min(levels)`` for sampled authors who truly believe the
    misinformation or truly spread it (a true misinformation post, retweets included, in the
    recent window), ``max(levels)`` for the others."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        base = self.env.unwrapped
        arms = base._arms
        user = np.maximum(arms["user"], 0)
        sim = base.sim
        lo, hi = sim.recent_post_range(base.config.recommender.window)
        spread = np.zeros(len(sim.users.stance), bool)
        spread[sim.posts.author[lo:hi][sim.posts.misinfo[lo:hi]]] = True
        believer = sim.users.misinformed[user] | spread[user]
        level = arms["level"]
        target = np.where(believer, level.min(), level.max())
        scores = -np.abs(level - target)
        scores[~obs["action_mask"].astype(bool)] = -1e9
        return base.slate_from_scores(scores)


class HarmfulPostsOracle:
    """Moderation: ``action`` on the candidate posts that truly carry misinformation or are
    toxic (``moderation.toxic_threshold``), most engaged first, up to the budget; the rule
    :class:`baselines.suppress_flagged.SuppressFlagged` with the hidden truth instead of the
    classifier's flags."""

    def __init__(self, env: Any, action: str = "delete") -> None:
        from baselines.suppress_flagged import SuppressFlagged

        self.env = env
        self._rule = SuppressFlagged(env, action=action)

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        base = self.env.unwrapped
        posts, cfg = base.sim.posts, base.moderation_config
        post = np.maximum(base._arms["post"], 0)
        harmful = posts.misinfo[post] | (posts.toxicity[post] >= cfg.toxic_threshold)
        arms = obs["arms"].copy()
        arms[:, self._rule._flag_col] = harmful  # the truth in place of the flag
        return self._rule.act({**obs, "arms": arms})


#: name -> oracle class, per env kind.
ORACLES: dict[str, type] = {
    "oracle_cross": CrossStanceOracle,
    "oracle_civil": CivilCrossOracle,
    "oracle_reward": RewardOracle,
    "oracle_objective": ObjectiveOracle,
    "oracle_mute": MuteSpreadersOracle,
    "oracle_harmful": HarmfulPostsOracle,
}
