"""The paper's Fig. 3 shape at the defaults (1,000 users, 10 rounds, Origin, abortion news at
rounds 0, 4, 7): each seed is checked on its own; ``benchmarks/fig3.py`` reports the same
quantities with 95% CIs over seeds."""

from __future__ import annotations

import numpy as np
import pytest

from socialenv.core.world import discretize_stance
from socialenv.envs.rec import RecEnv
from socialenv.scenarios.builtin import abortion

SEEDS = (0, 1)


def origin_path(seed: int, **recommender: float) -> tuple[np.ndarray, np.ndarray]:
    """Stance mean and std per column (column 0 = reset, column t = after round t − 1)."""
    env = RecEnv(num_users=1000, rounds=10, recommender=recommender)
    env.reset(seed=seed)
    mean, std = [float(env.sim.users.stance.mean())], [float(env.sim.users.stance.std())]
    for _ in range(10):
        metrics = env.step(np.full(env.slate_size, env.no_op))[4]["metrics"]
        mean.append(metrics["stance_mean"])
        std.append(metrics["stance_std"])
    env.close()
    return np.array(mean), np.array(std)


@pytest.mark.parametrize("seed", SEEDS)
def test_initial_stances_are_mostly_neutral(seed: int) -> None:
    """About 62% neutral at reset (|opinion| < 1/3): most people are not absolutists (Pew,
    March 2022: 19% + 8% hold the two absolute positions on abortion)."""
    stance = discretize_stance(abortion(1000, seed=seed).opinion)
    assert 0.55 <= np.mean(stance == 0) <= 0.70
    assert abs(np.mean(stance == 1) - np.mean(stance == -1)) < 0.05


@pytest.mark.parametrize("seed", SEEDS)
def test_stance_mean_drops_at_each_news_round_and_recovers_between(seed: int) -> None:
    mean, _ = origin_path(seed)
    for news, next_news in ((0, 4), (4, 7), (7, 10)):
        assert mean[news + 1] < mean[news] - 0.02
        since = mean[news + 1 : next_news + 1]
        assert mean[next_news] > since.min() + 0.005, (news, mean.round(4))


@pytest.mark.parametrize("seed", SEEDS)
def test_stance_std_grows_and_stance_filtering_strengthens_it(seed: int) -> None:
    _, std = origin_path(seed)
    assert std[-1] > std[0] + 0.01
    _, unfiltered = origin_path(seed, personalized_stance_weight=0.0)
    assert std[-1] > unfiltered[-1] + 0.01


def test_a_round_in_a_world_without_posts() -> None:
    """No history posts: round 0's feeds are empty and the users only write (the surrogate
    used to index the empty post table)."""
    from socialenv.scenarios.builtin import PopulationConfig

    scenario = abortion(200, seed=0, config=PopulationConfig(history_posts=0))
    env = RecEnv(num_users=200, rounds=2, candidate_users=5, scenario=scenario)
    env.reset(seed=0)
    metrics = env.step(np.full(env.slate_size, env.no_op))[4]["metrics"]
    assert metrics["reactions"] == 0 and metrics["posts"] > 0
    assert env.step(np.full(env.slate_size, env.no_op))[4]["metrics"]["reactions"] > 0
