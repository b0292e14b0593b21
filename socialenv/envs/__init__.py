"""The Gymnasium environments: one folder per env (`env.py`, `lever.py`, `config.py`)."""

from socialenv.envs.base import PolicySimEnv, load_env
from socialenv.envs.exposure import ExposureEnv
from socialenv.envs.moderation import ModerationEnv
from socialenv.envs.rec import RecEnv

__all__ = ["ExposureEnv", "ModerationEnv", "PolicySimEnv", "RecEnv", "load_env"]
