"""PolicySim: a Gymnasium sandbox for learning a social platform's intervention policy.

import gymnasium as gym, socialenv
env = gym.make("PolicySim-Rec-v0")        # 1,000 surrogate users, CPU
env = gym.make("PolicySim-Exposure-v0")
env = gym.make("PolicySim-Moderation-v0")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from policysim_infra.extras import require
from socialenv.core.config import ContextConfig, EnvConfig, RecommenderConfig, RewardConfig
from socialenv.envs import ExposureEnv, ModerationEnv, PolicySimEnv, RecEnv, load_env
from socialenv.envs.registration import ENV_IDS, register_envs
from socialenv.scenarios.builtin import make_scenario
from socialenv.scenarios.scenario import Scenario

if TYPE_CHECKING:
    from pettingzoo import AECEnv

    from socialenv.pettingzoo_env import PolicySimParallelEnv

register_envs()


def parallel_env(env_id: str = "PolicySim-Rec-v0", **kwargs: Any) -> PolicySimParallelEnv:
    """The PettingZoo ParallelEnv view (users and the platform as agents); needs the ``rl``
    extra (pettingzoo). See :class:`socialenv.pettingzoo_env.PolicySimParallelEnv`."""
    require("pettingzoo", "rl", "socialenv.parallel_env")
    from socialenv.pettingzoo_env import parallel_env as _parallel_env

    return _parallel_env(env_id, **kwargs)


def env(env_id: str = "PolicySim-Rec-v0", **kwargs: Any) -> AECEnv:
    """The PettingZoo AEC view of :func:`parallel_env` (PettingZoo's ``parallel_to_aec``);
    needs the ``rl`` extra (pettingzoo)."""
    require("pettingzoo", "rl", "socialenv.env")
    from socialenv.pettingzoo_env import env as _aec_env

    return _aec_env(env_id, **kwargs)


__version__ = "0.1.0"

__all__ = [
    "ENV_IDS",
    "ContextConfig",
    "EnvConfig",
    "ExposureEnv",
    "ModerationEnv",
    "PolicySimEnv",
    "RecEnv",
    "RecommenderConfig",
    "RewardConfig",
    "Scenario",
    "env",
    "load_env",
    "make_scenario",
    "parallel_env",
]
