"""Eq. 9 and the exposure reward, checked against hand-computed values with a scripted brain."""

from __future__ import annotations

import numpy as np
import pytest

from agent_models.base import Brain
from agent_models.types import Behaviour, RoundInput, RoundOutput
from socialenv.envs.exposure import ExposureEnv
from socialenv.envs.rec import RecEnv


class ScriptedBrain(Brain):
    """Every user shown a post in its INJECTED slot reacts with ``kind`` (toxicity ``tox``)."""

    def __init__(self, kind: Behaviour | None, tox: float = 0.0) -> None:
        self.kind, self.tox = kind, tox
        self.seen: RoundInput | None = None

    def reset(self, users, posts, seed):
        return None

    def act(self, round_input: RoundInput) -> RoundOutput:
        self.seen = round_input
        if self.kind is None:
            return RoundOutput()
        rows, cols = np.nonzero(round_input.feed_channel == 3)
        posts = round_input.feed[rows, cols]
        keep = posts >= 0
        m = int(keep.sum())
        return RoundOutput(
            react_user=round_input.active[rows[keep]], react_post=posts[keep],
            react_kind=np.full(m, int(self.kind), np.int8),
            react_stance=np.zeros(m, np.float32), react_toxicity=np.full(m, self.tox, np.float32),
        )


@pytest.mark.parametrize(
    ("kind", "tox", "weight"),
    [(Behaviour.REPLY, 0.4, 1.0), (Behaviour.LIKE, 0.0, 0.6), (Behaviour.DISLIKE, 0.0, 0.2), (None, 0.0, 0.0)],
)
def test_cross_viewpoint_reward_is_eq9(kind: Behaviour | None, tox: float, weight: float) -> None:
    env = RecEnv(num_users=100, users=ScriptedBrain(kind, tox), budget=1)
    obs, _ = env.reset(seed=0)
    arm = int(np.flatnonzero(obs["action_mask"])[0])
    v, p = env._arms["user"][arm], env._arms["post"][arm]
    u = env.sim.posts.author[p]
    divergence = abs(float(env.sim.users.stance[u]) - float(env.sim.users.stance[v])) / 2
    _, reward, _, _, info = env.step(np.array([arm]))
    reacted = kind is not None
    expected = np.clip(0.5 * divergence * reacted - 0.5 * tox + 0.5 * weight, 0, 1)
    assert info["arm_rewards"][0] == pytest.approx(expected, abs=1e-6)
    assert reward == pytest.approx(expected, abs=1e-6)


def test_exposure_effect_reward_rewards_removing_misinformation() -> None:
    env = ExposureEnv(num_users=300, budget=1, users=ScriptedBrain(None), exposure_levels=(0.0, 1.0))
    obs, _ = env.reset(seed=0)
    spreaders = np.flatnonzero(env.sim.recent_misinfo[env._arms["user"]] >= 0.5)
    clean = np.flatnonzero(env.sim.recent_misinfo[env._arms["user"]] == 0)
    mute_spreader = spreaders[env._arms["level"][spreaders] == 0.0][0]
    mute_clean = clean[env._arms["level"][clean] == 0.0][0]
    keep_clean = clean[env._arms["level"][clean] == 1.0][0]
    rewards = {}
    for name, arm in (("mute_spreader", mute_spreader), ("mute_clean", mute_clean), ("keep_clean", keep_clean)):
        fresh = ExposureEnv(num_users=300, budget=1, users=ScriptedBrain(None), exposure_levels=(0.0, 1.0))
        fresh.reset(seed=0)
        _, reward, _, _, info = fresh.step(np.array([arm]))
        rewards[name] = reward
        assert fresh.sim.users.exposure[env._arms["user"][arm]] == (0.0 if name.startswith("mute") else 1.0)
    assert rewards["keep_clean"] == pytest.approx(0.5)
    assert rewards["mute_clean"] <= 0.5
    assert rewards["mute_spreader"] > 0.5
