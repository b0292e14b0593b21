"""The PettingZoo AEC view: the parallel game played one agent after another."""

from __future__ import annotations

from typing import Any

from pettingzoo import AECEnv

from socialenv.pettingzoo_env.parallel import PolicySimParallelEnv


def env(env_id: str = "PolicySim-Rec-v0", **kwargs: Any) -> AECEnv:
    """The same game as an AEC env (agents act one after another within a round; the round is
    played once the last agent has acted), by PettingZoo's own ``parallel_to_aec``
    conversion. Arguments as :class:`PolicySimParallelEnv`."""
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(PolicySimParallelEnv(env_id, **kwargs))
