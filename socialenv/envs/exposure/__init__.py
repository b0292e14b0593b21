"""PolicySim-Exposure-v0 (``env.py``)."""

from socialenv.envs.exposure.env import EXPOSURE_ARM_FEATURES, ExposureEnv

__all__ = ["EXPOSURE_ARM_FEATURES", "ExposureEnv"]
