"""PolicySim-Moderation-v0: the env (``env.py``), its lever (``lever.py``) and lever config
(``config.py``)."""

from socialenv.envs.moderation.config import ModerationLeverConfig
from socialenv.envs.moderation.env import MODERATION_FEATURES, ModerationEnv
from socialenv.envs.moderation.lever import ModerationLever

__all__ = ["MODERATION_FEATURES", "ModerationEnv", "ModerationLever", "ModerationLeverConfig"]
