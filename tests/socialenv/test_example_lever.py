"""A new lever is one folder: ``tests/socialenv/example_lever/`` (config, lever, env) and
one registry line. The env passes Gymnasium's checker, takes its own keywords (and only
those), and its action changes what happens on the platform."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import socialenv  # noqa: F401 - registers the env ids
from policysim_infra.validation import UnknownKeywordError
from socialenv.envs.sizing import BASE_BYTES, flat_ppo_memory, sizing_advice
from tests.socialenv.example_lever import FeedCapConfig, FeedCapEnv
from tests.support import small_env

ENV_ID = "PolicySimTest-FeedCap-v0"
if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=FeedCapEnv)  # the one registry line


def _episode(cap_everyone: bool, seed: int = 3) -> tuple[list[float], list[float], list[int]]:
    env = gym.make(ENV_ID, **small_env(num_users=150, rounds=4), lever_share=0.5)
    base = env.unwrapped
    obs, _ = env.reset(seed=seed)
    reactions, capped_reactions, removed = [], [], []
    truncated = False
    while not truncated:
        action = np.full(env.action_space.shape, base.no_op)
        if cap_everyone:  # each sampled user's first arm: cap 0, an empty feed
            first = np.flatnonzero(obs["action_mask"])[:: len(base.lever_config.caps)]
            action[: len(first)] = first
        obs, _, _, truncated, info = env.step(action)
        reactions.append(info["metrics"]["reactions"])
        capped_reactions.append(info["metrics"]["capped_reactions"])
        removed.append(int(base._last_result.policy.choice["removed"].sum()))
    return reactions, capped_reactions, removed


def test_the_example_lever_passes_the_env_checker() -> None:
    env = gym.make(ENV_ID, **small_env(num_users=60, rounds=3))
    check_env(env.unwrapped, skip_render_check=True)
    assert isinstance(env.unwrapped.lever_config, FeedCapConfig)


def test_the_example_lever_takes_its_own_keywords_only() -> None:
    env = gym.make(ENV_ID, **small_env(num_users=60), lever={"caps": (0, 2)})
    assert env.unwrapped.lever_config.caps == (0, 2) and env.unwrapped.num_arms % 2 == 0
    with pytest.raises(UnknownKeywordError, match="belongs to PolicySim-Rec-v0"):
        gym.make(ENV_ID, **small_env(num_users=60), candidate_users=5)


def test_capping_the_feeds_changes_the_outcome() -> None:
    free, free_capped, free_removed = _episode(cap_everyone=False)
    capped, capped_capped, capped_removed = _episode(cap_everyone=True)
    assert sum(free_removed) == 0 and sum(free_capped) == 0  # no-op: nothing capped
    assert min(capped_removed) > 0  # every round the lever emptied some feeds
    assert sum(capped_capped) == 0  # users with an empty feed react to nothing
    assert sum(capped) < sum(free)  # and the platform sees fewer reactions


def test_the_sizing_advice_names_the_example_levers_own_size_arguments() -> None:
    env = gym.make(ENV_ID, **small_env(num_users=150), lever_share=0.5).unwrapped
    needed = max(flat_ppo_memory(env.observation_space, env.action_space).values())
    advice = sizing_advice(env, budget=BASE_BYTES + (needed - BASE_BYTES) // 2)
    assert advice is not None and "shrink the lever (lever_share, caps)" in advice
    advised = float(re.search(r"e\.g\. lever_share=([0-9.]+)", advice)[1])
    assert 0 < advised < 0.5
    assert sizing_advice(env, budget=needed) is None  # within the budget: no advice


def test_the_sizing_advice_never_rounds_a_small_share_to_zero() -> None:
    """At a million users the fitting share is about 0.1% of the lever: the advice gives it
    with two significant digits, not as 0% and lever_share=0.0."""
    env = gym.make(ENV_ID, **small_env(num_users=150), lever_share=0.5).unwrapped
    needed = max(flat_ppo_memory(env.observation_space, env.action_space).values())
    advice = sizing_advice(env, budget=BASE_BYTES + (needed - BASE_BYTES) // 20_000)
    assert advice is not None
    percent = float(re.search(r"to about ([0-9.e-]+)%", advice)[1])
    advised = float(re.search(r"e\.g\. lever_share=([0-9.e-]+)", advice)[1])
    assert 0 < percent < 1 and 0 < advised < 0.005
    near_budget = sizing_advice(env, budget=needed - 1)  # a share just below 100%
    assert near_budget is not None and "e+" not in near_budget
