"""Stable-Baselines3 on the native PolicySim vector env (:mod:`socialenv.envs.vector`).

SB3 takes its own ``VecEnv`` type, not a Gymnasium ``VectorEnv``; :class:`SB3VecEnv` adapts a
:class:`~socialenv.envs.vector.PolicySimVectorEnv` to it. The native env runs in
``SAME_STEP`` autoreset mode, which is SB3's own convention: an episode that ends resets in the
same step, its last observation in ``info["terminal_observation"]`` and
``info["TimeLimit.truncated"]`` set as ``DummyVecEnv`` sets it. Sub-env i is the single env of
seed ``seed + i`` bit for bit, as in ``DummyVecEnv`` after ``envs.seed(seed)``.

    from baselines.sb3_vector import make_sb3_vec_env
    from stable_baselines3 import PPO
    envs = make_sb3_vec_env("PolicySim-Rec-v0", 8, {"num_users": 1000, **PPO_ENV_KWARGS})
    envs.seed(0)
    PPO("MultiInputPolicy", envs, n_steps=128).learn(10_000)

``action_map`` turns each sub-env's action of the adapter's ``action_space`` into the env's own
(the per-arm PPO's per-user choices: :func:`baselines.per_arm.make_per_user_vec_env`).

stable-baselines3 is imported inside the functions (optional extra ``rl``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from policysim_infra.extras import require
from socialenv.envs.vector import AutoresetMode, PolicySimVectorEnv


def _vec_env_class() -> type:
    require("stable_baselines3", "rl", "SB3VecEnv")
    from stable_baselines3.common.vec_env import VecEnv

    class SB3VecEnv(VecEnv):
        """A :class:`PolicySimVectorEnv` as an SB3 ``VecEnv`` (see the module docstring).

        Args:
            envs: the native vector env; its ``autoreset_mode`` must be ``SAME_STEP``.
            action_space: the single-env action space SB3 sees (default: the env's own).
            action_map: each sub-env's action -> the env's action (default: unchanged).
        """

        def __init__(
            self,
            envs: PolicySimVectorEnv,
            action_space: gym.Space | None = None,
            action_map: Callable[[np.ndarray], np.ndarray] | None = None,
        ) -> None:
            if envs.autoreset_mode is not AutoresetMode.SAME_STEP:
                raise ValueError(
                    f"envs.autoreset_mode={envs.autoreset_mode} is not allowed: SB3 resets in "
                    "the same step (autoreset_mode='SameStep')"
                )
            self.vector_env = envs
            self.action_map = action_map
            self._actions: np.ndarray | None = None
            super().__init__(
                envs.num_envs,
                envs.single_observation_space,
                action_space or envs.single_action_space,
            )

        def reset(self) -> dict[str, np.ndarray]:
            seeds = self._seeds if any(s is not None for s in self._seeds) else None
            options = self._options[0] if self._options[0] else None
            obs, infos = self.vector_env.reset(seed=seeds, options=options)
            self.reset_infos = [
                {key: infos[key][i] for key in infos if not key.startswith("_")}
                for i in range(self.num_envs)
            ]
            self._reset_seeds()
            self._reset_options()
            return obs

        def step_async(self, actions: np.ndarray) -> None:
            self._actions = actions

        def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
            actions = self._actions
            if self.action_map is not None:
                actions = np.stack([self.action_map(action) for action in actions])
            obs, rewards, terminated, truncated, infos = self.vector_env.step_each(actions)
            for i, info in enumerate(infos):
                if "final_obs" in info:
                    final_obs, final_info = info.pop("final_obs"), info.pop("final_info")
                    self.reset_infos[i] = info
                    info = infos[i] = final_info
                    info["terminal_observation"] = final_obs
                info["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            return obs, rewards.astype(np.float32), terminated | truncated, infos

        def close(self) -> None:
            self.vector_env.close()

        def _indices(self, indices: Any) -> Sequence[int]:
            if indices is None:
                return range(self.num_envs)
            if isinstance(indices, int):
                return [indices]
            return list(indices)

        def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
            return list(self.vector_env.get_attr(attr_name, self._indices(indices)))

        def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
            indices = self._indices(indices)
            self.vector_env.set_attr(attr_name, [value] * len(indices), indices)

        def env_method(
            self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any
        ) -> list[Any]:
            return self.vector_env.call_at(
                self._indices(indices), method_name, *method_args, **method_kwargs
            )

        def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
            return [False for _ in self._indices(indices)]  # the sub-envs carry no wrappers

        def get_images(self) -> Sequence[np.ndarray | None]:
            return self.vector_env.call_at(range(self.num_envs), "render")

    return SB3VecEnv


def __getattr__(name: str) -> type:
    if name == "SB3VecEnv":
        return _vec_env_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_sb3_vec_env(
    env_id: str,
    num_envs: int,
    env_kwargs: dict[str, Any] | None = None,
    action_space: gym.Space | None = None,
    action_map: Callable[[np.ndarray], np.ndarray] | None = None,
    workers: int = 1,
) -> Any:
    """An SB3 ``VecEnv`` of ``num_envs`` sub-envs of ``env_id`` (native vector env,
    ``SAME_STEP`` autoreset, its sub-envs on ``workers`` processes); seed it with
    ``.seed(seed)`` before the first reset."""
    envs = PolicySimVectorEnv(
        env_id, num_envs, autoreset_mode="SameStep", workers=workers, **(env_kwargs or {})
    )
    return _vec_env_class()(envs, action_space, action_map)
