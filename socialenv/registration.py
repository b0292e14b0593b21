"""Registers the PolicySim env ids with Gymnasium."""

from __future__ import annotations

import gymnasium as gym

ENV_IDS = {
    "PolicySim-Rec-v0": "socialenv.envs.rec:RecEnv",
    "PolicySim-Exposure-v0": "socialenv.envs.exposure:ExposureEnv",
    "PolicySim-Moderation-v0": "socialenv.envs.moderation:ModerationEnv",
}


def register_envs() -> None:
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            # rounds is enforced by the env itself (truncation), so no TimeLimit wrapper
            gym.register(id=env_id, entry_point=entry_point, disable_env_checker=False)
