"""Registers the PolicySim env ids with Gymnasium."""

from __future__ import annotations

import gymnasium as gym

ENV_IDS = {
    "PolicySim-Rec-v0": "socialenv.envs.rec:RecEnv",
    "PolicySim-Exposure-v0": "socialenv.envs.exposure:ExposureEnv",
    "PolicySim-Moderation-v0": "socialenv.envs.moderation:ModerationEnv",
}


#: ``gym.make_vec(env_id, num_envs=N, vectorization_mode="vector_entry_point")``: the native
#: vector env (:mod:`socialenv.envs.vector`).
VECTOR_ENTRY_POINTS = {
    "PolicySim-Rec-v0": "socialenv.envs.vector:rec_vector_env",
    "PolicySim-Exposure-v0": "socialenv.envs.vector:exposure_vector_env",
    "PolicySim-Moderation-v0": "socialenv.envs.vector:moderation_vector_env",
}


def register_envs() -> None:
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            # No max_episode_steps here: Gymnasium would build a TimeLimit from it whatever
            # ``rounds=`` says. The env truncates after ``rounds`` itself and reports
            # ``env.spec.max_episode_steps == rounds`` (PolicySimEnv.spec).
            gym.register(
                id=env_id,
                entry_point=entry_point,
                vector_entry_point=VECTOR_ENTRY_POINTS[env_id],
                disable_env_checker=False,
            )
