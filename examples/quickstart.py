"""Quickstart: the PolicySim recommendation env in a few lines.

1,000 surrogate users, 10 rounds. Each round the env samples ``candidate_users`` active
users and a few candidate posts for each; the policy is their recommender: it fills up to
``budget`` recommended slots per sampled user with (user, post) arms (the slate,
``env.action_space``, holds candidate_users × budget arm indices; the value K = the number
of arms leaves a slot to the platform). The reward is the
cross-viewpoint interaction they cause (Eq. 9 of the paper). We play three policies on the
same seed:

- origin: no intervention (every slot empty: the built-in recommender, the paper's "Origin"),
- random: a random slate,
- linucb: a contextual bandit learning online from each round's per-arm rewards.

    python examples/quickstart.py            # ~10 s on a laptop CPU
    python examples/quickstart.py --smoke    # tiny, for the tests
"""

from __future__ import annotations

import argparse
import os

import gymnasium as gym
import numpy as np

import socialenv  # noqa: F401  (registers PolicySim-Rec-v0 and PolicySim-Exposure-v0)
from bandits import make_policy
from socialenv.envs.policy_registry import select_action


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="PolicySim quickstart")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--smoke", action="store_true", default=os.environ.get("POLICYSIM_SMOKE") == "1"
    )
    args = parser.parse_args(argv)
    env_kwargs = {}
    if args.smoke:
        args.users, args.rounds = 150, 3
        env_kwargs = {"candidate_users": 20, "budget": 2}

    env = gym.make(
        "PolicySim-Rec-v0",
        num_users=args.users,
        rounds=args.rounds,
        render_mode="ansi",
        **env_kwargs,
    )
    num_arms, context_dim = env.observation_space["arms"].shape  # K arms x D context
    slate_size, no_op = env.action_space.shape[0], int(env.action_space.nvec[0]) - 1  # no_op = K
    print(
        f"{args.users} users; observation: arms ({num_arms}, {context_dim}) (K arms x D context), "
        f"action_mask ({num_arms},); slate of {slate_size} arm indices, each in 0..{no_op} "
        f"({no_op} = leave the slot to the platform)"
    )

    for name in ("origin", "random", "linucb"):
        policy = (
            None if name == "origin" else make_policy(name, context_dim=context_dim, seed=args.seed)
        )
        obs, info = env.reset(seed=args.seed)
        rewards, cross = [], []
        done = False
        while not done:
            if policy is None:  # no intervention: every slot empty
                action = np.full(slate_size, no_op)
            else:  # distinct allowed arms, `budget` per user
                action = select_action(policy, obs, env)
            contexts = obs["arms"]
            obs, reward, terminated, truncated, info = env.step(action)
            if policy is not None:  # learn from the arms that took effect
                applied = info["arm_applied"]
                policy.update(contexts[info["arm_indices"][applied]], info["arm_rewards"][applied])
            rewards.append(reward)
            cross.append(info["metrics"]["cross_interaction_ratio"])
            done = terminated or truncated
        m = info["metrics"]
        print(
            f"{name:>7}: mean reward {np.mean(rewards):.3f} | cross-stance interactions "
            f"{np.mean(cross):.3f} | toxicity {m['toxicity']:.3f} | stance {m['stance_mean']:+.3f} "
            f"± {m['stance_std']:.3f}"
        )
    print("last round:", env.render())
    env.close()


if __name__ == "__main__":
    main()
