"""PolicySim-Rec-v0 (``env.py``)."""

from socialenv.envs.rec.env import REC_ARM_FEATURES, RecEnv, reaction_values

__all__ = ["REC_ARM_FEATURES", "RecEnv", "reaction_values"]
