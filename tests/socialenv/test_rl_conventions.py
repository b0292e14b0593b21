"""Ecosystem conventions, each checked with the real library: rgb_array frames, SB3's
make_vec_env, the spec's max_episode_steps, finite bounds under the checkers, sb3-contrib's
MaskablePPO, the response observation, and PettingZoo's AEC api_test."""

from __future__ import annotations

import copy
import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces.utils import flatten_space
from gymnasium.utils.env_checker import check_env
from gymnasium.vector.utils import batch_space

import socialenv
from socialenv.envs.base import response_spaces, row_bounds_box
from socialenv.envs.sizing import LargeActionSpaceWarning
from tests.support import LEVER_ENV_IDS, small_env

ENV_IDS = LEVER_ENV_IDS
SMALL = small_env(rounds=4)
#: SB3's checker asks for 1-D vectors; the (K, D) arm matrix is kept on purpose (per-arm
#: networks read it row by row; FlattenObservation gives the 1-D form). See README.
SB3_ARMS_SHAPE_WARNING = ".*observation arms has an unconventional shape.*"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_checkers_pass_without_warnings(env_id: str) -> None:
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    kwargs = {**SMALL, "observe_response": True, "render_mode": "rgb_array"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the lever's size advice for flat deep-RL policies is not a checker's warning
        warnings.filterwarnings("ignore", category=LargeActionSpaceWarning)
        check_env(gym.make(env_id, **kwargs).unwrapped)
        warnings.filterwarnings("ignore", message=SB3_ARMS_SHAPE_WARNING)
        sb3_check_env(gym.make(env_id, **kwargs).unwrapped, warn=True)


@pytest.mark.parametrize("env_id", socialenv.ENV_IDS)
def test_observations_stay_inside_the_finite_bounds(env_id: str) -> None:
    env = gym.make(env_id, **SMALL, observe_users=True, observe_response=True)
    space = env.observation_space
    for name, box in space.items():
        if isinstance(box, gym.spaces.Box):
            assert np.all(np.isfinite(box.low)) and np.all(np.isfinite(box.high)), name
    obs, _ = env.reset(seed=3)
    env.action_space.seed(3)
    done = False
    while not done:
        assert space.contains(obs), {k: space[k].contains(v) for k, v in obs.items()}
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        done = terminated or truncated
    assert space.contains(obs)


def test_rgb_array_frame() -> None:
    env = gym.make("PolicySim-Rec-v0", render_mode="rgb_array", **SMALL)
    env.reset(seed=0)
    before = env.render()
    env.step(env.action_space.sample())
    after = env.render()
    for frame in (before, after):
        assert frame.shape == (480, 640, 3) and frame.dtype == np.uint8
        assert frame.std() > 10  # a drawn figure, not a blank canvas
    assert not np.array_equal(before, after)  # the metrics text appears after a step
    ansi = gym.make("PolicySim-Rec-v0", render_mode="ansi", **SMALL)
    ansi.reset(seed=0)
    assert isinstance(ansi.render(), str)


def test_rgb_array_list_collects_a_frame_per_step() -> None:
    # Gymnasium builds this mode from "rgb_array" with its RenderCollection wrapper
    env = gym.make("PolicySim-Rec-v0", render_mode="rgb_array_list", **SMALL)
    env.reset(seed=0)
    for _ in range(2):
        env.step(env.action_space.sample())
    frames = env.render()
    assert len(frames) == 3 and all(f.shape == (480, 640, 3) for f in frames)


def test_sb3_make_vec_env_as_written() -> None:
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env("PolicySim-Rec-v0", n_envs=4)
    assert venv.render_mode == "rgb_array"
    obs = venv.reset()
    assert obs["arms"].shape == (4, *venv.observation_space["arms"].shape)
    obs, rewards, dones, infos = venv.step(np.stack([venv.action_space.sample() for _ in range(4)]))
    assert rewards.shape == (4,) and not dones.any()
    venv.close()


@pytest.mark.parametrize("rounds", [4, 10, 13])
def test_spec_max_episode_steps_follows_rounds(rounds: int) -> None:
    env = gym.make("PolicySim-Rec-v0", num_users=150, rounds=rounds)
    assert env.spec.max_episode_steps == rounds
    env.reset(seed=0)
    steps, truncated = 0, False
    while not truncated:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        assert not terminated
    assert steps == rounds


def test_default_spec_and_explicit_time_limit() -> None:
    assert gym.make("PolicySim-Exposure-v0", num_users=150).spec.max_episode_steps == 10
    env = gym.make("PolicySim-Rec-v0", num_users=150, rounds=6, max_episode_steps=2)
    assert env.spec.max_episode_steps == 2
    env.reset(seed=0)
    _, _, _, truncated, _ = env.step(env.action_space.sample())
    assert not truncated
    _, _, _, truncated, _ = env.step(env.action_space.sample())
    assert truncated


def test_action_masks_layout() -> None:
    env = gym.make("PolicySim-Exposure-v0", num_users=10, exposure_users=12, budget=1, rounds=2)
    obs, _ = env.reset(seed=0)
    masks = env.unwrapped.action_masks()
    k, slots = env.unwrapped.num_arms, env.unwrapped.slate_size
    assert masks.shape == (slots * (k + 1),) and masks.dtype == bool
    per_slot = masks.reshape(slots, k + 1)
    np.testing.assert_array_equal(
        per_slot[:, :k], np.broadcast_to(obs["action_mask"].astype(bool), (slots, k))
    )
    assert per_slot[:, k].all()  # the no-op slot value is always allowed
    assert not per_slot.all()  # 2 of the 12 candidate users are padding


def test_maskable_ppo_trains_and_respects_the_mask() -> None:
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks
    from stable_baselines3.common.env_util import make_vec_env

    kwargs = {
        "num_users": 10,
        "exposure_users": 12,
        "exposure_levels": (0.0, 1.0),
        "budget": 1,
        "rounds": 4,
    }
    venv = make_vec_env("PolicySim-Exposure-v0", n_envs=2, env_kwargs=kwargs, seed=0)
    model = MaskablePPO("MultiInputPolicy", venv, n_steps=32, batch_size=32, n_epochs=2, seed=0)
    model.learn(256)
    assert model.num_timesteps == 256
    obs = venv.reset()
    for _ in range(8):
        masks = get_action_masks(venv)
        actions, _ = model.predict(obs, action_masks=masks)
        per_slot = masks.reshape(2, 3, -1)
        assert all(per_slot[e, j, actions[e, j]] for e in range(2) for j in range(3))
        obs, _, _, _ = venv.step(actions)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_response_observation(env_id: str) -> None:
    env = gym.make(env_id, observe_response=True, **SMALL)
    budget = env.unwrapped.slate_size
    for key, space in response_spaces(budget).items():
        assert env.observation_space[key] == space
    obs, _ = env.reset(seed=2)
    assert not obs["response_applied"].any() and not obs["response_reward"].any()
    action = env.action_space.sample()
    action[0] = action[1] = np.flatnonzero(obs["action_mask"])[0]  # slot 1 repeats slot 0
    obs, _, _, _, info = env.step(action)
    np.testing.assert_array_equal(obs["response_applied"], info["arm_applied"])
    np.testing.assert_allclose(obs["response_reward"], info["arm_rewards"])
    assert obs["response_applied"][0] == 1 and obs["response_applied"][1] == 0
    assert not (obs["response_reacted"] & ~obs["response_applied"].astype(bool)).any()
    without = gym.make(env_id, **SMALL)
    assert "response_reward" not in without.observation_space.spaces


def test_rec_response_reacted_matches_the_reactions() -> None:
    env = gym.make("PolicySim-Rec-v0", observe_response=True, **SMALL)
    env.reset(seed=5)
    base = env.unwrapped
    reacted_total = 0
    for _ in range(3):
        arms = {k: v.copy() for k, v in base._arms.items()}
        obs, _, _, _, info = env.step(env.action_space.sample())
        out = base._last_result.output
        reactions = set(zip(out.react_user.tolist(), out.react_post.tolist(), strict=True))
        for slot, arm in enumerate(info["arm_indices"]):
            if info["arm_applied"][slot]:
                expected = (int(arms["user"][arm]), int(arms["post"][arm])) in reactions
                assert bool(obs["response_reacted"][slot]) == expected
                reacted_total += expected
    assert reacted_total > 0


def test_pettingzoo_aec_api_test() -> None:
    from pettingzoo.test import api_test

    env = socialenv.env("PolicySim-Rec-v0", num_users=150, rounds=3, controlled_users=4)
    assert env.possible_agents[0] == "platform"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Observation is not a NumPy array")
        api_test(env, num_cycles=10)


def test_response_observation_survives_save_and_load(tmp_path) -> None:
    env = gym.make("PolicySim-Rec-v0", observe_response=True, **SMALL)
    env.reset(seed=7)
    env.action_space.seed(7)
    env.step(env.action_space.sample())
    path = env.unwrapped.save(tmp_path / "env.pkl")
    saved_response = {k: v.copy() for k, v in env.unwrapped._response.items()}
    assert saved_response["response_applied"].any()
    action = env.action_space.sample()
    obs, reward, *_ = env.step(action)
    loaded = socialenv.load_env(path)
    for key, value in saved_response.items():
        np.testing.assert_array_equal(loaded._response[key], value)
    obs_loaded, reward_loaded, *_ = loaded.step(action)
    assert reward_loaded == reward
    for key in response_spaces(env.unwrapped.slate_size):
        np.testing.assert_array_equal(obs_loaded[key], obs[key])
    assert loaded.spec is None or loaded.spec.max_episode_steps == 4


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_arm_space_from_row_bounds_equals_the_full_box(env_id: str) -> None:
    """The arms Box built from its (D,) bounds holds the values, answers and samples of a
    Box built from full (K, D) bounds."""
    env = gym.make(env_id, **SMALL).unwrapped
    low, high = env._context_bounds()
    shape = (env.num_arms, env.context_dim)
    full = gym.spaces.Box(
        np.broadcast_to(low, shape), np.broadcast_to(high, shape), dtype=np.float32
    )
    light = env.observation_space["arms"]
    assert light == full and full == light and repr(light) == repr(full)
    assert light.shape == full.shape and light.is_bounded() == full.is_bounded()
    for name in ("low", "high", "bounded_below", "bounded_above"):
        got, expected = getattr(light, name), getattr(full, name)
        assert got.shape == expected.shape and got.dtype == expected.dtype, name
        np.testing.assert_array_equal(got, expected)
    light.seed(5)
    full.seed(5)
    sample = light.sample()
    np.testing.assert_array_equal(sample, full.sample())
    obs, _ = env.reset(seed=1)
    assert light.contains(obs["arms"]) and light.contains(sample)
    outside = sample.copy()
    outside[0, 0] = 2.0  # embeddings lie in [-1, 1]
    assert not light.contains(outside) and not full.contains(outside)
    assert pickle.loads(pickle.dumps(light)) == full and copy.deepcopy(light) == full
    assert batch_space(light, 3) == batch_space(full, 3)
    assert flatten_space(light) == flatten_space(full)
    with pytest.raises(ValueError):  # read-only views: one row stands for all
        light.low[0, 0] = 0.0
    assert row_bounds_box(low, high, 1) == gym.spaces.Box(low[None], high[None], dtype=np.float32)
