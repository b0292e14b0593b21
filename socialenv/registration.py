"""Registers the PolicySim env ids with Gymnasium."""

from __future__ import annotations

import gymnasium as gym

ENV_IDS = {
    "PolicySim-Rec-v0": "socialenv.envs.rec.env:RecEnv",
    "PolicySim-Exposure-v0": "socialenv.envs.exposure.env:ExposureEnv",
    "PolicySim-Moderation-v0": "socialenv.envs.moderation.env:ModerationEnv",
}


def register_envs() -> None:
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            # No max_episode_steps here: Gymnasium would build a TimeLimit from it whatever
            # ``rounds=`` says. The env truncates after ``rounds`` itself and reports
            # ``env.spec.max_episode_steps == rounds`` (PolicySimEnv.spec).
            gym.register(id=env_id, entry_point=entry_point, disable_env_checker=False)
