"""PolicySim-Rec-v0: the env (``env.py``), its lever (``lever.py``) and lever config
(``config.py``)."""

from socialenv.envs.rec.config import RecLeverConfig
from socialenv.envs.rec.env import REC_ARM_FEATURES, RecEnv, reaction_values
from socialenv.envs.rec.lever import RecLever

__all__ = ["REC_ARM_FEATURES", "RecEnv", "RecLever", "RecLeverConfig", "reaction_values"]
