"""PolicySim-Exposure-v0: the env (``env.py``), its lever (``lever.py``) and lever config
(``config.py``)."""

from socialenv.envs.exposure.config import ExposureLeverConfig
from socialenv.envs.exposure.env import EXPOSURE_ARM_FEATURES, ExposureEnv
from socialenv.envs.exposure.lever import ExposureLever

__all__ = ["EXPOSURE_ARM_FEATURES", "ExposureEnv", "ExposureLever", "ExposureLeverConfig"]
