"""Registers the PolicySim env ids with Gymnasium: one line per env (its folder under
``socialenv/envs/`` declares its lever and the lever's config)."""

from __future__ import annotations

import importlib
from typing import Any

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


def env_class(env_id: str) -> Any:
    """The env class of a registered PolicySim env id."""
    module, qualname = ENV_IDS[env_id].split(":")
    return getattr(importlib.import_module(module), qualname)


def lever_config_class(env_id: str) -> Any:
    """The lever config class of a registered env id (its fields are the env's own
    keywords; ``users_field`` the one that fixes how many users it governs)."""
    return env_class(env_id).lever_class.config_class


def lever_config_classes() -> tuple[type, ...]:
    """The lever config class of every registered env (checkpointable data classes)."""
    return tuple(lever_config_class(env_id) for env_id in ENV_IDS)


def env_keywords(env_id: str) -> list[str]:
    """The keyword arguments ``gym.make(env_id, ...)`` accepts besides ``render_mode`` and
    ``seed``: the shared :class:`~socialenv.core.config.EnvConfig` fields (``lever`` among them)
    and the fields of the env's lever config."""
    from dataclasses import fields

    from socialenv.core.config import EnvConfig

    own = lever_config_class(env_id).field_names()
    return sorted({f.name for f in fields(EnvConfig)} | set(own))


def lever_owner(keyword: str) -> str | None:
    """The env id whose lever takes ``keyword`` (None if no registered env's does)."""
    for env_id in ENV_IDS:
        if keyword in lever_config_class(env_id).field_names():
            return env_id
    return None
