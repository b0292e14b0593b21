"""PettingZoo ParallelEnv view of PolicySim: users (and optionally the platform) as agents.

    import socialenv
    env = socialenv.parallel_env("PolicySim-Rec-v0", controlled_users=10, num_users=1000)
    obs, infos = env.reset(seed=0)
    while env.agents:
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        obs, rewards, terminations, truncations, infos = env.step(actions)

**Agents.** ``"user_<id>"`` for each *controlled* user (default the first 10 ids; pass a
list of ids for others) and, with ``platform_agent=True`` (default), ``"platform"``. Every
other user keeps the env's brain (surrogate, LLM or an ABM population), so populations are
mixed: controlled agents act from outside, the rest from the brain, in the same round. One
``step`` is one platform round; agents are truncated together after ``rounds`` rounds.

**User observation** (``Dict``), built from the feed the platform will serve this round:
    "feed": (F, d + 11) float32, per slot the post embedding (d) and :data:`FEED_FEATURES`.
    "feed_mask": (F,) int8, 1 where the slot holds a post.
    "state": (12,) float32, :data:`STATE_FEATURES` (``active`` is 0 when the user is not
        active this round: its action is then ignored and its feed is empty).
    "embedding": (2d,) float32, the user's profile ⊕ memory embedding (Eq. 7).
F = relational + personalized + headline slots (``feed_slots`` to override).

**User action**: ``MultiBinary(F·6 + 1)``: for slot s, entries ``6s .. 6s+5`` are
:data:`USER_BEHAVIOURS` (like, dislike, retweet, reply, follow the author, unfollow the
author) and the last entry writes an original post. Several behaviours may be chosen at
once, all zeros is "do nothing". :func:`encode_user_action` builds one from a (F, 6) array.

**Platform agent**: observation = the gym env's (``"arms"`` (K, D), ``"arm_mask"`` (K,) —
renamed from ``action_mask``, which PettingZoo reserves for masks of the agent's own action
space — and the optional user/graph arrays); action = the env's
``MultiDiscrete([K + 1] * slate_size)`` (or its ``Box`` of scores with
``action_format="scores"``); reward = the env's reward. Without a platform agent,
``platform_policy`` (a policy name such as ``"eenet"``, a policy object, or None = no
intervention) chooses the slate and learns from its rewards.

**Rewards of users**: the weighted reactions the user's posts received this round
(``user_reward_weights``, default like +1, retweet +1, reply +1, dislike −1).

**Timing within a round.** All agents move simultaneously: controlled users see the feed
built by the platform's channels before the platform's own action of the round, so they do
not see the posts the platform's policy recommends in the same round; a post that the
policy's picks then displace from a sampled user's recommended slots, or that exposure
control hides, cannot be reacted to (the reaction is dropped and counted in the user's info
as ``dropped_reactions``). Controlled users write civil text unless ``reply_toxicity`` /
``post_toxicity`` say otherwise; their stance, misinformation state and memory keep evolving
by the platform's and the inner brain's rules.

**Modules**: :mod:`~socialenv.pettingzoo_env.agents` (agent names, controlled users, user
rewards), :mod:`~socialenv.pettingzoo_env.actions` (a user's action),
:mod:`~socialenv.pettingzoo_env.observations` (what a user observes),
:mod:`~socialenv.pettingzoo_env.mixed_brain` (controlled users beside the env's brain),
:mod:`~socialenv.pettingzoo_env.parallel` (the ParallelEnv) and
:mod:`~socialenv.pettingzoo_env.aec` (the AEC view).
"""

# ruff: noqa: E402 - the submodules import pettingzoo: check the install first
from policysim_infra.extras import require

require("pettingzoo", "rl", "socialenv.pettingzoo_env (the PettingZoo views)")

from socialenv.pettingzoo_env.actions import (
    USER_BEHAVIOURS,
    ExternalActions,
    decode_user_actions,
    encode_user_action,
)
from socialenv.pettingzoo_env.aec import env
from socialenv.pettingzoo_env.agents import DEFAULT_USER_REWARD_WEIGHTS, PLATFORM, user_agent
from socialenv.pettingzoo_env.mixed_brain import ExternalActionBrain, merge_outputs
from socialenv.pettingzoo_env.observations import FEED_FEATURES, STATE_FEATURES
from socialenv.pettingzoo_env.parallel import PolicySimParallelEnv, parallel_env

__all__ = [
    "DEFAULT_USER_REWARD_WEIGHTS",
    "FEED_FEATURES",
    "PLATFORM",
    "STATE_FEATURES",
    "USER_BEHAVIOURS",
    "ExternalActionBrain",
    "ExternalActions",
    "PolicySimParallelEnv",
    "decode_user_actions",
    "encode_user_action",
    "env",
    "merge_outputs",
    "parallel_env",
    "user_agent",
]
