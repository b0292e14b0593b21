"""The PettingZoo ParallelEnv view: API and seed tests, mixed populations, controlled users."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from pettingzoo.test import parallel_api_test, parallel_seed_test  # noqa: E402

import socialenv  # noqa: E402
from agent_models.types import Behaviour  # noqa: E402
from socialenv.pettingzoo_env import (  # noqa: E402
    PLATFORM,
    USER_BEHAVIOURS,
    ExternalActionBrain,
    encode_user_action,
)
from tests.support import small_env

SMALL = small_env()


def test_parallel_api_test_with_platform_agent() -> None:
    env = socialenv.parallel_env("PolicySim-Rec-v0", **SMALL)
    assert env.possible_agents[0] == PLATFORM and len(env.possible_agents) == 11
    parallel_api_test(env, num_cycles=10)


def test_parallel_api_test_exposure_env_abm_population_without_platform_agent() -> None:
    env = socialenv.parallel_env(
        "PolicySim-Exposure-v0",
        controlled_users=[3, 7, 11],
        platform_agent=False,
        platform_policy="suppress_flagged",
        users="lorenz",
        **SMALL,
    )
    assert env.possible_agents == ["user_3", "user_7", "user_11"]
    parallel_api_test(env, num_cycles=10)


def test_parallel_seed_test() -> None:
    parallel_seed_test(lambda: socialenv.parallel_env("PolicySim-Rec-v0", **SMALL))


def test_same_seed_same_trajectory_over_an_episode() -> None:
    def trajectory() -> list[float]:
        env = socialenv.parallel_env("PolicySim-Rec-v0", **SMALL)
        obs, _ = env.reset(seed=4)
        for i, agent in enumerate(env.agents):
            env.action_space(agent).seed(i)
        out = []
        while env.agents:
            obs, rewards, _, _, infos = env.step(
                {a: env.action_space(a).sample() for a in env.agents}
            )
            out += [rewards[a] for a in sorted(rewards)] + [
                infos[PLATFORM]["metrics"]["stance_mean"]
            ]
        return out

    assert trajectory() == trajectory()


def _like_and_reply_everything(obs: dict, feed_slots: int) -> np.ndarray:
    behaviours = np.zeros((feed_slots, len(USER_BEHAVIOURS)), bool)
    seen = obs["feed_mask"].astype(bool)
    behaviours[:, USER_BEHAVIOURS.index("like")] = seen
    behaviours[:, USER_BEHAVIOURS.index("reply")] = seen
    behaviours[:, USER_BEHAVIOURS.index("follow")] = seen
    return encode_user_action(behaviours, post=True)


def test_controlled_users_act_on_the_feed_they_observed() -> None:
    env = socialenv.parallel_env("PolicySim-Rec-v0", controlled_users=40, num_users=200, rounds=3)
    base, f = env.base, env.feed_slots
    assert env.action_space("user_0").n == f * len(USER_BEHAVIOURS) + 1
    obs, _ = env.reset(seed=1)
    checked = 0
    while env.agents:
        users = [a for a in env.agents if a != PLATFORM]
        observed = {a: env._user_feed[i].copy() for i, a in enumerate(users)}
        actions = {a: _like_and_reply_everything(obs[a], f) for a in users}
        obs, rewards, _, _, infos = env.step(actions)
        result = base._last_result
        out = result.output
        for a in users:
            u = int(a.split("_")[1])
            seen = set(observed[a][observed[a] >= 0].tolist())
            if not infos[a]["active"]:
                assert not seen and u not in out.react_user and u not in out.post_user
                continue
            row = int(np.searchsorted(result.active, u))
            delivered = set(result.feed[row][result.feed[row] >= 0].tolist())
            assert seen <= delivered  # the observed feed is what was served
            for kind in (Behaviour.LIKE, Behaviour.REPLY):
                done = set(
                    out.react_post[(out.react_user == u) & (out.react_kind == kind)].tolist()
                )
                assert done == seen  # exactly the external actions
            assert (out.react_user == u).sum() == infos[a]["reactions"] == 2 * len(seen)
            assert not ((out.react_user == u) & (out.react_kind == Behaviour.RETWEET)).any()
            assert infos[a]["posted"] and u in out.post_user and infos[a]["dropped_reactions"] == 0
            authors = set(base.sim.posts.author[list(seen)].tolist()) if seen else set()
            assert authors <= set(out.follow_dst[out.follow_src == u].tolist())
            checked += 1
        # users' rewards: weighted reactions their posts received this round
        author = base.sim.posts.author[out.react_post]
        for a in users:
            u = int(a.split("_")[1])
            kinds = out.react_kind[author == u]
            expected = (
                np.sum(kinds == Behaviour.LIKE)
                + np.sum(kinds == Behaviour.RETWEET)
                + np.sum(kinds == Behaviour.REPLY)
                - np.sum(kinds == Behaviour.DISLIKE)
            )
            assert rewards[a] == pytest.approx(float(expected))
    assert checked > 0


def test_doing_nothing_and_uncontrolled_users_keep_their_brain() -> None:
    env = socialenv.parallel_env("PolicySim-Rec-v0", controlled_users=20, num_users=200, rounds=2)
    obs, _ = env.reset(seed=2)
    actions = {a: np.zeros(env.action_space(a).n, np.int8) for a in env.agents if a != PLATFORM}
    env.step(actions)
    out = env.base._last_result.output
    assert not np.isin(out.react_user, env.controlled).any()
    assert not np.isin(out.post_user, env.controlled).any()
    assert len(out.react_user) > 0  # the surrogate users still act
    assert isinstance(env.base.brain, ExternalActionBrain)


def test_reactions_to_posts_hidden_by_exposure_control_are_dropped() -> None:
    env = socialenv.parallel_env(
        "PolicySim-Exposure-v0", controlled_users=60, num_users=200, rounds=2
    )
    obs, _ = env.reset(seed=0)
    users = [a for a in env.agents if a != PLATFORM]
    actions = {a: _like_and_reply_everything(obs[a], env.feed_slots) for a in users}
    env.base.sim.users.exposure[:] = 0.0  # the platform hides every post this round
    _, _, _, _, infos = env.step(actions)
    seen = sum(int(obs[a]["feed_mask"].sum()) for a in users)
    assert seen > 0
    assert sum(infos[a]["dropped_reactions"] for a in users) == 2 * seen
    assert sum(infos[a]["reactions"] for a in users) == 0


def test_platform_agent_reward_and_platform_policy() -> None:
    env = socialenv.parallel_env("PolicySim-Rec-v0", reward={"form": "paper"}, **SMALL)
    obs, _ = env.reset(seed=0)
    assert set(obs[PLATFORM]) == {"arms", "arm_mask"}
    mask = obs[PLATFORM]["arm_mask"].astype(bool)
    base = env.base
    assert env.action_space(PLATFORM).shape == (base.slate_size,)
    allowed = np.flatnonzero(mask)
    _, first_of_user = np.unique(base.arm_groups()[allowed], return_index=True)
    picks = allowed[first_of_user]  # one arm per sampled user
    slate = np.full(base.slate_size, base.no_op)
    slate[: len(picks)] = picks
    _, rewards, _, _, infos = env.step({PLATFORM: slate})
    info = infos[PLATFORM]
    assert info["arm_applied"][: len(picks)].all() and not info["arm_applied"][len(picks) :].any()
    assert info["empty_slots"] == base.slate_size - len(picks)
    assert rewards[PLATFORM] == pytest.approx(float(info["arm_rewards"].sum()) / base.slate_size)

    auto = socialenv.parallel_env(
        "PolicySim-Rec-v0", platform_agent=False, platform_policy="linucb", **SMALL
    )
    auto.reset(seed=0)
    auto.step({})
    assert PLATFORM not in auto.agents and auto.last_info["arm_applied"].any()
    assert auto.platform_policy.n_observations > 0
    assert auto.state().shape == auto.state_space.shape


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="controlled_users"):
        socialenv.parallel_env(controlled_users=10_000, **SMALL)
    with pytest.raises(ValueError, match="platform_policy"):
        socialenv.parallel_env(platform_policy="linucb", **SMALL)
    env = socialenv.parallel_env(**SMALL)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="user_0"):
        env.step({"user_0": np.zeros(3)})
    with pytest.raises(ValueError, match="unknown agent"):
        env.step({"user_99": np.zeros(3)})


def test_max_cycles_is_pettingzoos_name_for_rounds() -> None:
    from pettingzoo.test import max_cycles_test

    max_cycles_test(socialenv)  # parallel_env(max_cycles=4) and env(max_cycles=4), default sizes
    assert socialenv.parallel_env(max_cycles=3, **small_env()).base.config.rounds == 3
    with pytest.raises(ValueError, match="max_cycles=3 is not allowed"):
        socialenv.parallel_env(max_cycles=3, **small_env(rounds=5))
