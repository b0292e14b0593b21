"""Stable-Baselines3 baselines: PPO on the PolicySim envs as they are.

``PolicySim-Rec-v0`` passes SB3's env checker: a ``Dict`` observation (``arms`` (K, D),
``action_mask`` (K,)) for ``MultiInputPolicy`` and a ``MultiDiscrete([K + 1] * slate_size)``
action (value K = empty slot, slate_size = candidate_users × budget). PPO sees the K arm
contexts flattened (K·D inputs) and has one categorical head of K + 1 logits per slate slot;
it has no action masking (a masked, repeated or over-cap arm just scores 0), which is part of
what makes this a hard, honest baseline for the bandits.

The policy head has slate_size · (K + 1) logits: at the env defaults at 1,000 users (room for
57 users × 5 slots, K = 456) that is 130,245: it fits 4 GiB over a 2,048-step rollout
(:mod:`socialenv.envs.sizing`) but is slow to train on a CPU. Train on a smaller lever
(:data:`PPO_ENV_KWARGS`: 20 users × 2 slots, K = 160, 6,440 logits); :func:`train_ppo` refuses
heads above ``max_action_logits``.

    from baselines.sb3 import PPO_ENV_KWARGS, train_ppo, SB3Actor
    result = train_ppo(env_kwargs={"num_users": 1000, **PPO_ENV_KWARGS}, total_timesteps=20_000)
    actor = SB3Actor(result.model)            # actor.act(obs) -> slate

stable-baselines3 is imported inside the functions (optional extra ``rl``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policysim_infra.extras import require

#: PPO settings used by the example and the benchmark (SB3 defaults except where noted):
#: short rollouts because an episode is only ``rounds`` (10) steps, a small discount because
#: a slate mostly pays off in the same round (the env is close to a contextual bandit).
DEFAULT_PPO_KWARGS: dict[str, Any] = {
    "n_steps": 128,
    "batch_size": 128,
    "n_epochs": 10,
    "learning_rate": 3e-4,
    "gamma": 0.5,
    "gae_lambda": 0.9,
    "ent_coef": 0.0,
    "policy_kwargs": {"net_arch": [64, 64]},
}


#: A PolicySim-Rec-v0 lever PPO can train on: the policy recommends to 20 sampled users per
#: round, 2 slots each (slate of 40 arms out of K = 160).
PPO_ENV_KWARGS: dict[str, Any] = {"candidate_users": 20, "budget": 2}
#: The largest policy head (sum of the MultiDiscrete sizes) :func:`train_ppo` accepts.
MAX_ACTION_LOGITS = 200_000


@dataclass
class TrainResult:
    """A trained model and its learning curve.

    Attributes:
        model: the SB3 PPO model.
        curve: (timesteps, mean step reward of the episode) for every finished training
            episode, in order.
        seconds: wall-clock training time.
    """

    model: Any
    curve: list[tuple[int, float]] = field(default_factory=list)
    seconds: float = 0.0


def _episode_curve_callback(curve: list[tuple[int, float]]) -> Any:
    require("stable_baselines3", "rl", "baselines.sb3")
    from stable_baselines3.common.callbacks import BaseCallback

    class EpisodeCurve(BaseCallback):
        """Records (timesteps, episode return / length) from the Monitor wrapper."""

        def _on_step(self) -> bool:
            for info in self.locals.get("infos", ()):
                episode = info.get("episode")
                if episode is not None:
                    curve.append(
                        (int(self.num_timesteps), float(episode["r"]) / max(int(episode["l"]), 1))
                    )
            return True

    return EpisodeCurve()


def train_ppo(
    env_id: str = "PolicySim-Rec-v0",
    env_kwargs: dict[str, Any] | None = None,
    total_timesteps: int = 20_000,
    seed: int = 0,
    n_envs: int = 4,
    vec_env: str = "dummy",
    ppo_kwargs: dict[str, Any] | None = None,
    verbose: int = 0,
    max_action_logits: int | None = MAX_ACTION_LOGITS,
) -> TrainResult:
    """Train PPO (``MultiInputPolicy``) on ``env_id``.

    Args:
        env_id, env_kwargs: the env (``gym.make`` arguments); size the lever for PPO, e.g.
            with :data:`PPO_ENV_KWARGS`.
        total_timesteps: env steps (= platform rounds) of training, over all ``n_envs``.
        seed: seeds PPO and the training envs (env i starts from seed ``seed + i``; keep
            evaluation seeds disjoint).
        n_envs: parallel envs per rollout.
        vec_env: "dummy" (one process) or "subproc" (one process per env).
        ppo_kwargs: overrides of :data:`DEFAULT_PPO_KWARGS`.
        max_action_logits: refuse (ValueError) a ``MultiDiscrete`` action whose policy head
            would have more logits than this (None = no limit).
    """
    require("stable_baselines3", "rl", "train_ppo")
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    import socialenv  # noqa: F401 - registers the env ids

    if vec_env not in ("dummy", "subproc"):
        raise ValueError(f"vec_env={vec_env!r} is not allowed: 'dummy' or 'subproc'")
    # SB3 asks for render_mode="rgb_array" unless told otherwise; PolicySim renders ansi only
    import gymnasium as gym

    probe = gym.make(env_id, **{"render_mode": None, **(env_kwargs or {})})
    space = probe.action_space
    probe.close()
    if (
        max_action_logits is not None
        and isinstance(space, gym.spaces.MultiDiscrete)
        and int(space.nvec.sum()) > max_action_logits
    ):
        raise ValueError(
            f"env_kwargs give a MultiDiscrete action of {len(space.nvec)} slots x {int(space.nvec[0])} "
            f"values = {int(space.nvec.sum())} policy logits, above max_action_logits={max_action_logits}: "
            "shrink candidate_users / budget / candidates (e.g. baselines.sb3.PPO_ENV_KWARGS) "
            "or pass max_action_logits=None"
        )
    envs = make_vec_env(
        env_id,
        n_envs=n_envs,
        seed=seed,
        env_kwargs={"render_mode": None, **(env_kwargs or {})},
        vec_env_cls=DummyVecEnv if vec_env == "dummy" else SubprocVecEnv,
    )
    kwargs = {**DEFAULT_PPO_KWARGS, **(ppo_kwargs or {})}
    model = PPO("MultiInputPolicy", envs, seed=seed, verbose=verbose, device="cpu", **kwargs)
    curve: list[tuple[int, float]] = []
    start = time.perf_counter()
    model.learn(total_timesteps=total_timesteps, callback=_episode_curve_callback(curve))
    seconds = time.perf_counter() - start
    envs.close()
    return TrainResult(model=model, curve=curve, seconds=seconds)


class SB3Actor:
    """Wraps a trained SB3 model as an actor: ``act(obs) -> (slate_size,) int64`` slate."""

    def __init__(self, model: Any, deterministic: bool = True) -> None:
        self.model = model
        self.deterministic = deterministic

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        action, _ = self.model.predict(obs, deterministic=self.deterministic)
        return np.asarray(action, np.int64)


def smooth_curve(curve: list[tuple[int, float]], window: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """(timesteps (E,), moving average over ``window`` episodes (E,)) of a learning curve."""
    if not curve:
        return np.zeros(0), np.zeros(0)
    steps = np.asarray([c[0] for c in curve], np.float64)
    values = np.asarray([c[1] for c in curve], np.float64)
    w = max(1, min(window, len(values)))
    cumulative = np.concatenate([[0.0], np.cumsum(values)])
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - w, 0)
    return steps, (cumulative[idx] - cumulative[lo]) / (idx - lo)
