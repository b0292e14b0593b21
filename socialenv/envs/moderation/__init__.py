"""PolicySim-Moderation-v0 (``env.py``)."""

from socialenv.envs.moderation.env import MODERATION_FEATURES, ModerationEnv

__all__ = ["MODERATION_FEATURES", "ModerationEnv"]
