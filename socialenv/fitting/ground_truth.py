"""Known ground truth for `policysim fit`: random surrogate parameters and the traces they write.

:data:`DRAW_RANGES` documents the draws: each parameter is uniform on its range (around the
calibrated defaults, wide enough that a fit starting from the defaults must move);
:func:`random_surrogate` draws one, :func:`synthetic_trace` records a trace of it.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from agent_models.surrogate import SurrogateConfig
from socialenv.fitting.trace import Trace

#: parameter -> (low, high) of its uniform draw; the other fields keep their defaults.
DRAW_RANGES: dict[str, tuple[float, float]] = {
    "like_bias": (-3.2, -2.0),
    "dislike_bias": (-4.5, -3.5),
    "retweet_bias": (-4.5, -3.5),
    "reply_bias": (-4.8, -3.8),
    "interest_weight": (1.0, 2.0),
    "agreement_weight": (0.6, 1.8),
    "retweet_agreement_weight": (2.0, 4.0),
    "reply_gap_weight": (0.8, 2.2),
    "recommended_attention": (0.5, 1.5),
    "promoted_attention": (-0.5, 0.5),
    "post_rate": (0.2, 0.5),
    "stance_noise": (0.1, 0.25),
    "reply_toxicity_base": (0.1, 0.3),
    "reply_toxicity_gap": (2.0, 4.0),
    "civility_threshold": (0.1, 0.3),
    "post_toxicity_scale": (0.1, 0.3),
    "follow_prob": (0.03, 0.1),
    "unfollow_prob": (0.1, 0.3),
    "assimilation_rate": (0.05, 0.25),
    "confidence_bound": (0.3, 0.6),
    "backfire_rate": (0.05, 0.25),
    "backfire_gap": (0.3, 0.6),
    "anchor_rate": (0.05, 0.15),
    "reinforcement_rate": (0.02, 0.08),
    "exposure_assimilation": (0.0, 0.1),
    "misinfo_threshold": (0.8, 1.6),
    "misinfo_steepness": (1.5, 3.0),
    "misinfo_adoption": (0.5, 0.9),
    "misinfo_post_share": (0.7, 1.0),
    "misinfo_recovery": (0.01, 0.05),
}


def random_surrogate(rng: np.random.Generator) -> SurrogateConfig:
    """One draw of :data:`DRAW_RANGES` (in the table's order)."""
    values = {name: float(rng.uniform(lo, hi)) for name, (lo, hi) in DRAW_RANGES.items()}
    return replace(SurrogateConfig(), **values)


def synthetic_trace(
    config: SurrogateConfig,
    num_users: int,
    rounds: int,
    seed: int,
    env_id: str = "PolicySim-Rec-v0",
    scenario: str = "misinformation",
    policy: str = "random",
    path: str | Path | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> Trace:
    """Play one episode of ``config`` (reset seed ``seed``, ``policy`` filling the policy's
    slots so that the injected channel is observed) and return its trace (also written to
    ``path`` if given)."""
    import gymnasium as gym

    import socialenv  # noqa: F401 - registers the envs
    from socialenv.envs.episodes import play_episode
    from socialenv.envs.policy_registry import make_run_policy

    env = gym.make(
        env_id,
        num_users=num_users,
        rounds=rounds,
        scenario=scenario,
        surrogate=asdict(config),
        **(env_kwargs or {}),
    )
    base = env.unwrapped
    recorder = base.trace()
    recorder.extra_meta["policy"] = policy
    play_episode(env, make_run_policy(policy, base, seed), seed=seed)
    trace = recorder.trace(base.trace_meta())
    env.close()
    if path is not None:
        from socialenv.fitting.trace import write_trace

        write_trace(trace, path)
        trace.path = Path(path)
    return trace
