"""Non-learned reference policies and models for PolicySim.

- Policies over the arm contexts (bandit interface): ``origin`` (no intervention),
  ``popularity`` (trending posts), ``mmr`` (diversity re-ranking), ``suppress_flagged``
  (exposure moderation heuristic) — :func:`make_policy` also builds every bandit.
- HiSim opinion dynamics as the users' stance dynamics: :class:`OpinionDynamicsBrain`
  with bounded confidence, Lorenz or relative agreement (:func:`make_population` resolves
  ``"surrogate"``, ``"llm"`` or an ABM name for the env's ``users=`` argument).
- RL baselines via Stable-Baselines3 (imported on use): :mod:`baselines.per_arm`, a
  per-arm policy (one shared network scores every arm; per-user choices, masked) for PPO,
  and :mod:`baselines.sb3`, PPO with SB3's flat ``MultiInputPolicy``.
"""

from baselines.opinion_dynamics import (
    OPINION_MODELS,
    POPULATIONS,
    BoundedConfidence,
    Lorenz,
    OpinionDynamicsBrain,
    OpinionModel,
    RelativeAgreement,
    abm_step,
    bias,
    diversity,
    make_opinion_model,
    make_population,
)
from baselines.policies import (
    BASELINE_POLICIES,
    EXPOSURE_FEATURES,
    REC_FEATURES,
    ArmLayout,
    MMRPolicy,
    PopularityPolicy,
    SuppressFlaggedPolicy,
    env_kind,
    headline_only_kwargs,
    make_policy,
    policy_names,
)
from socialenv.envs.episodes import opinion_metrics, play_episode
from socialenv.envs.policy_registry import OriginPolicy

__all__ = [
    "BASELINE_POLICIES",
    "EXPOSURE_FEATURES",
    "OPINION_MODELS",
    "POPULATIONS",
    "REC_FEATURES",
    "ArmLayout",
    "BoundedConfidence",
    "Lorenz",
    "MMRPolicy",
    "OpinionDynamicsBrain",
    "OpinionModel",
    "OriginPolicy",
    "PopularityPolicy",
    "RelativeAgreement",
    "SuppressFlaggedPolicy",
    "abm_step",
    "bias",
    "diversity",
    "env_kind",
    "headline_only_kwargs",
    "make_opinion_model",
    "make_policy",
    "make_population",
    "opinion_metrics",
    "play_episode",
    "policy_names",
]
