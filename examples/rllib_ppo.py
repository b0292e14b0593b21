"""RLlib's PPO on the PolicySim envs through RLlib's documented Gymnasium path.

RLlib builds a registered Gymnasium id with ``gym.make``; the ``"socialenv:<id>"`` form makes
Gymnasium import ``socialenv`` first, so the ids exist in every env-runner process. The
``Dict`` observation goes through RLlib's ``FlattenObservations`` connector to its default
MLP; the ``MultiDiscrete`` slate is PPO's multi-categorical head. Env kwargs go in
``env_config``.

Ray 2.60's ``rllib`` extra pins ``gymnasium==1.2.2``, so install it in an environment of its
own (``pip install torch==2.13.0 && pip install -e ".[rllib]"``); the ``all`` extra leaves it out.

    python examples/rllib_ppo.py --env PolicySim-Rec-v0 --kwargs '{"candidate_users": 20, "budget": 2}'
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from policysim_infra.extras import require

ENV_IDS = ("PolicySim-Rec-v0", "PolicySim-Exposure-v0", "PolicySim-Moderation-v0")


def train_ppo_iteration(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    iterations: int = 1,
    batch_size: int = 200,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Train RLlib PPO for ``iterations`` iterations of ``batch_size`` env steps (one local
    env runner, one thread); the learner results and episode returns of each iteration."""
    require("ray.rllib", "rllib", "RLlib training")
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import FlattenObservations

    ray.init(num_cpus=1, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    config = (
        PPOConfig()
        .environment(f"socialenv:{env_id}", env_config=dict(env_kwargs or {}))
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=1,
            env_to_module_connector=lambda env, spaces=None, device=None: FlattenObservations(),
        )
        .training(
            train_batch_size_per_learner=batch_size,
            minibatch_size=min(64, batch_size),
            num_epochs=1,
            lr=3e-4,
        )
        .rl_module(model_config={"fcnet_hiddens": [64, 64]})
        .debugging(seed=seed)
    )
    algo = config.build_algo()
    results = []
    try:
        for _ in range(iterations):
            start = time.perf_counter()
            result = algo.train()
            runners = result.get("env_runners", {})
            results.append(
                {
                    "env_steps": int(
                        result.get("num_env_steps_sampled_lifetime", 0)
                        or runners.get("num_env_steps_sampled_lifetime", 0)
                    ),
                    "episode_return_mean": runners.get("episode_return_mean"),
                    "seconds": time.perf_counter() - start,
                    "learner": {
                        key: float(value)
                        for key, value in result.get("learners", {})
                        .get("default_policy", {})
                        .items()
                        if key in ("policy_loss", "vf_loss", "entropy") and value is not None
                    },
                }
            )
    finally:
        algo.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=ENV_IDS, default=ENV_IDS[0])
    parser.add_argument("--kwargs", type=json.loads, default={}, help="env kwargs as JSON")
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=200)
    args = parser.parse_args()
    for row in train_ppo_iteration(args.env, args.kwargs, args.iterations, args.batch_size):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
