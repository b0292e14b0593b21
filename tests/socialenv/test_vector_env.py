"""The native vector env (socialenv.envs.vector): Gymnasium's VectorEnv API, each sub-env bit
for bit the single env of its seed, the same batched obs / rewards / infos as SyncVectorEnv,
and SB3 through its VecEnv adapter."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import socialenv
from socialenv.envs.vector import PolicySimVectorEnv, batch_infos
from tests.support import REC, assert_same, small_env, small_rec

SMALL = {
    "PolicySim-Rec-v0": small_rec(num_users=120, rounds=2),
    "PolicySim-Exposure-v0": small_env(num_users=120, rounds=2, exposure_users=10),
    "PolicySim-Moderation-v0": small_env(num_users=120, rounds=2),
}
NUM_ENVS, STEPS, SEED = 3, 5, 11  # 5 steps over 2-round episodes: autoresets included


def _native(env_id: str, **kwargs: Any) -> gym.vector.VectorEnv:
    return gym.make_vec(
        env_id,
        num_envs=NUM_ENVS,
        vectorization_mode="vector_entry_point",
        **SMALL[env_id],
        **kwargs,
    )


def _plain(value: Any) -> Any:
    """``value`` with object arrays (Gymnasium's ``final_obs``) as lists, for ``assert_same``."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, np.ndarray) and value.dtype == object:
        return [_plain(item) for item in value]
    return value


def _actions(space: gym.Space, seed: int, steps: int) -> list[Any]:
    space.seed(seed)
    return [space.sample() for _ in range(steps)]


@pytest.mark.parametrize("env_id", socialenv.ENV_IDS)
def test_make_vec_builds_the_native_env_with_batched_spaces(env_id: str) -> None:
    envs = _native(env_id)
    assert isinstance(envs.unwrapped, PolicySimVectorEnv)
    assert envs.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    single = gym.make(env_id, **SMALL[env_id])
    assert envs.single_observation_space == single.observation_space
    assert envs.single_action_space == single.action_space
    assert envs.observation_space == gym.vector.utils.batch_space(
        single.observation_space, NUM_ENVS
    )
    obs, info = envs.reset(seed=SEED)
    assert obs in envs.observation_space
    assert info["_seed"].all()
    envs.close()


@pytest.mark.parametrize("env_id", socialenv.ENV_IDS)
def test_each_sub_env_is_the_single_env_of_its_seed_bit_for_bit(env_id: str) -> None:
    envs = _native(env_id)
    actions = _actions(envs.action_space, 5, STEPS)
    obs, info = envs.reset(seed=SEED)
    batched = [(obs, info)]
    for action in actions:
        batched.append(envs.step(action))
    for i in range(NUM_ENVS):
        env = gym.make(env_id, **SMALL[env_id])
        single_obs, single_info = env.reset(seed=SEED + i)
        assert_same({k: v[i] for k, v in batched[0][0].items()}, single_obs)
        assert batched[0][1]["seed"][i] == single_info["seed"]
        done = False
        for step, action in enumerate(actions, start=1):
            vec_obs, reward, terminated, truncated, vec_info = batched[step]
            if done:  # next-step autoreset: this step resets the sub-env
                single_obs, single_info = env.reset()
                assert reward[i] == 0.0 and vec_info["seed"][i] == single_info["seed"]
                done = False
            else:
                single_obs, r, term, trunc, single_info = env.step(action[i])
                assert (reward[i], terminated[i], truncated[i]) == (r, term, trunc)
                np.testing.assert_array_equal(
                    vec_info["arm_rewards"][i], single_info["arm_rewards"]
                )
                for key, value in single_info["metrics"].items():
                    assert vec_info["metrics"][key][i] == value, key
                done = term or trunc
            assert_same({k: v[i] for k, v in vec_obs.items()}, single_obs, f"step {step}")
    envs.close()


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("env_id", socialenv.ENV_IDS)
def test_native_returns_what_sync_vector_env_returns(env_id: str, mode: AutoresetMode) -> None:
    native = _native(env_id, autoreset_mode=mode)
    sync = gym.make_vec(
        env_id,
        num_envs=NUM_ENVS,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode},
        **SMALL[env_id],
    )
    assert_same(native.reset(seed=SEED), sync.reset(seed=SEED), "reset")
    for step, action in enumerate(_actions(native.action_space, 3, STEPS)):
        assert_same(_plain(native.step(action)), _plain(sync.step(action)), f"step {step}")
    native.close()
    sync.close()


def test_reset_mask_seed_list_and_bad_arguments() -> None:
    envs = _native(REC)
    first, _ = envs.reset(seed=[SEED, None, SEED])
    np.testing.assert_array_equal(first["arms"][0], first["arms"][2])
    envs.step(envs.action_space.sample())
    obs, info = envs.reset(seed=SEED, options={"reset_mask": np.array([True, False, False])})
    assert info["_seed"].tolist() == [True, False, False]
    np.testing.assert_array_equal(obs["arms"][0], first["arms"][0])
    with pytest.raises(ValueError, match="seed has 2 entries"):
        envs.reset(seed=[1, 2])
    with pytest.raises(ValueError, match="reset_mask"):
        envs.reset(options={"reset_mask": [True]})
    with pytest.raises(ValueError, match="num_envs=0 is not allowed"):
        PolicySimVectorEnv(REC, 0)
    with pytest.raises(ValueError, match="autoreset_mode='Later' is not allowed"):
        PolicySimVectorEnv(REC, 1, autoreset_mode="Later")
    with pytest.raises(ValueError, match="env_id='CartPole-v1' is not allowed"):
        PolicySimVectorEnv("CartPole-v1", 1)


@pytest.mark.parametrize(
    ("env_id", "mode"),
    [
        (REC, AutoresetMode.NEXT_STEP),
        (REC, AutoresetMode.SAME_STEP),
        ("PolicySim-Exposure-v0", AutoresetMode.SAME_STEP),
        ("PolicySim-Moderation-v0", AutoresetMode.NEXT_STEP),
    ],
)
def test_worker_processes_return_what_one_process_returns(env_id: str, mode: AutoresetMode) -> None:
    one = _native(env_id, autoreset_mode=mode)
    # 3 sub-envs on 2 workers: blocks of 2 and 1
    two = _native(env_id, autoreset_mode=mode, workers=2)
    assert two.unwrapped.envs == []
    assert two.single_observation_space == one.single_observation_space
    assert_same(one.reset(seed=SEED), two.reset(seed=SEED), "reset")
    for step, action in enumerate(_actions(one.action_space, 3, STEPS)):
        assert_same(_plain(one.step(action)), _plain(two.step(action)), f"step {step}")
    mask = np.array([False, True, True])
    assert_same(
        one.reset(seed=[None, 3, 4], options={"reset_mask": mask}),
        two.reset(seed=[None, 3, 4], options={"reset_mask": mask}),
        "masked reset",
    )
    action = one.action_space.sample()
    assert_same(_plain(one.step(action)), _plain(two.step(action)), "after the masked reset")
    one.close()
    two.close()


def test_worker_processes_attributes_errors_and_close() -> None:
    envs = PolicySimVectorEnv(REC, NUM_ENVS, workers=2, **SMALL[REC])
    envs.reset(seed=SEED)
    single = gym.make(REC, **SMALL[REC]).unwrapped
    assert envs.get_attr("slate_size") == (single.slate_size,) * NUM_ENVS
    assert envs.call("null_arm_reward") == (single.null_arm_reward(),) * NUM_ENVS
    envs.set_attr("marker", ["a", "b", "c"])
    assert envs.get_attr("marker", [2, 0]) == ("c", "a")
    envs.set_attr("marker", "z", indices=[1])
    assert envs.call_at([1, 2], "marker") == ["z", "c"]
    with pytest.raises(ValueError, match="indices"):
        envs.get_attr("marker", [3])
    # an error inside a worker is raised here with its own type and message
    bad = np.full(envs.action_space.shape, envs.single_action_space.nvec[0] + 5)
    with pytest.raises(ValueError, match="action"):
        envs.step(bad)
    envs.step(envs.action_space.sample())  # the workers still answer after an error
    only_second = envs.action_space.sample()
    only_second[2] = bad[2]  # sub-env 2 alone: the second worker's error travels back
    with pytest.raises(ValueError, match="action"):
        envs.step(only_second)
    envs.step(envs.action_space.sample())
    processes = list(envs._pool._processes)
    processes[1].kill()  # a worker that dies is named, not waited for
    with pytest.raises(RuntimeError, match=r"vector env worker 1 \(sub-envs 2–2\) exited"):
        envs.step(envs.action_space.sample())
    envs.close()
    assert all(not process.is_alive() for process in processes)
    with pytest.raises(ValueError, match="workers=4 is not allowed"):
        PolicySimVectorEnv(REC, 3, workers=4)
    with pytest.raises(ValueError, match="context='threads' is not allowed"):
        PolicySimVectorEnv(REC, 2, workers=2, context="threads", **SMALL[REC])


def test_disabled_autoreset_refuses_a_finished_sub_env() -> None:
    envs = _native(REC, autoreset_mode="Disabled")
    envs.reset(seed=SEED)
    for _ in range(SMALL[REC]["rounds"]):
        _, _, _, truncated, _ = envs.step(envs.action_space.sample())
    assert truncated.all()
    with pytest.raises(RuntimeError, match="autoreset_mode=DISABLED"):
        envs.step(envs.action_space.sample())
    envs.reset(options={"reset_mask": np.ones(NUM_ENVS, bool)})
    envs.step(envs.action_space.sample())


def test_batch_infos_matches_gymnasium_add_info() -> None:
    infos = [
        (0, {"a": 1, "b": np.arange(3), "c": {"x": 0.5}, "d": "text"}),
        (2, {"a": 4, "c": {"x": 1.5, "y": True}}),
    ]
    expected: dict[str, Any] = {}
    vector = gym.vector.VectorEnv()
    vector.num_envs = 3
    for i, info in infos:
        expected = vector._add_info(expected, info, i)
    assert_same(batch_infos(infos, 3), expected)


@pytest.mark.parametrize("workers", [1, 2])
def test_sb3_adapter_matches_dummy_vec_env_and_trains_ppo(workers: int) -> None:
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecCheckNan, VecEnv

    from baselines.sb3_vector import make_sb3_vec_env

    kwargs = SMALL[REC]
    native = make_sb3_vec_env(REC, NUM_ENVS, kwargs, workers=workers)
    dummy = DummyVecEnv([lambda: gym.make(REC, **kwargs) for _ in range(NUM_ENVS)])
    assert isinstance(native, VecEnv)
    native.seed(SEED)
    dummy.seed(SEED)
    assert_same(native.reset(), dummy.reset())
    assert_same(native.reset_infos, [{k: v for k, v in i.items()} for i in dummy.reset_infos])
    native.action_space.seed(1)
    for step in range(STEPS):
        actions = np.stack([native.action_space.sample() for _ in range(NUM_ENVS)])
        native_out, dummy_out = native.step(actions), dummy.step(actions)
        assert_same(native_out[:3], dummy_out[:3], f"step {step}")
        for a, b in zip(native_out[3], dummy_out[3], strict=True):
            assert a.keys() == b.keys()
            assert_same(a["arm_rewards"], b["arm_rewards"])
            if "terminal_observation" in b:
                assert_same(a["terminal_observation"], b["terminal_observation"])
    assert native.get_attr("num_arms") == dummy.get_attr("num_arms")
    native.set_attr("marker", [1], indices=[0, 2])  # SB3: one value, the same for each
    assert native.get_attr("marker", indices=[2, 0]) == [[1], [1]]
    null_reward = gym.make(REC, **kwargs).unwrapped.null_arm_reward()
    assert native.env_method("null_arm_reward", indices=1) == [null_reward]
    checked = VecCheckNan(native, raise_exception=True)  # SB3's check of every obs and reward
    model = PPO("MultiInputPolicy", checked, n_steps=8, batch_size=12, n_epochs=1, device="cpu")
    model.learn(total_timesteps=2 * 8 * NUM_ENVS)
    assert model.num_timesteps >= 2 * 8 * NUM_ENVS
    native.close()
    dummy.close()


def test_per_arm_ppo_trains_on_the_native_vector_env() -> None:
    pytest.importorskip("stable_baselines3")
    import torch

    from baselines.per_arm import train_per_arm_ppo

    torch.set_num_threads(1)
    kwargs = small_env(num_users=120, candidate_users=8, rounds=3)
    results = [
        train_per_arm_ppo(
            REC,
            kwargs,
            total_timesteps=64,
            n_envs=2,
            ppo_kwargs={"n_steps": 16, "batch_size": 32, "n_epochs": 1},
            native_vector=True,
            workers=workers,
        )
        for workers in (1, 2)
    ]
    for result in results:
        assert result.model.num_timesteps >= 64 and len(result.curve) >= 2
    # the same seeds give the same training, in one process or on two workers
    assert results[0].curve == results[1].curve
    for a, b in zip(
        results[0].model.policy.parameters(), results[1].model.policy.parameters(), strict=True
    ):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="workers=2 is not allowed without native_vector"):
        train_per_arm_ppo(REC, kwargs, total_timesteps=16, n_envs=2, workers=2)
