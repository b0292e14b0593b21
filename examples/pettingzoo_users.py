"""Users and the platform as PettingZoo agents (ParallelEnv).

Ten users are controlled from outside by a scripted "bridge builder" policy (like posts of
their own camp, reply civilly to the other camp, post every round); the other users keep
the surrogate brain, and the "platform" agent is a LinUCB bandit choosing recommendations.
The loop is the standard PettingZoo parallel loop; any MARL library that speaks
``ParallelEnv`` can take the place of the scripted users.

    python examples/pettingzoo_users.py                  # 1,000 users, 10 rounds, seconds
    python examples/pettingzoo_users.py --population lorenz --controlled 50
    python examples/pettingzoo_users.py --smoke
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import socialenv
from bandits import make_policy
from bandits.slate import select_per_group
from socialenv.pettingzoo_env import FEED_FEATURES, PLATFORM, USER_BEHAVIOURS, encode_user_action


def bridge_builder(obs: dict[str, np.ndarray], latent_dim: int) -> np.ndarray:
    """Like same-camp posts, reply to opposite-camp posts, always post (one user's action)."""
    own = obs["state"][2]  # latent opinion
    post_stance = obs["feed"][:, latent_dim + FEED_FEATURES.index("post_stance")]
    seen = obs["feed_mask"].astype(bool)
    behaviours = np.zeros((len(seen), len(USER_BEHAVIOURS)), bool)
    behaviours[:, USER_BEHAVIOURS.index("like")] = seen & (own * post_stance > 0)
    behaviours[:, USER_BEHAVIOURS.index("reply")] = seen & (own * post_stance < -0.1)
    return encode_user_action(behaviours, post=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="PolicySim users as PettingZoo agents")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--controlled", type=int, default=10)
    parser.add_argument(
        "--population",
        default="surrogate",
        help="surrogate or an ABM: bounded_confidence, lorenz, relative_agreement",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--smoke", action="store_true", default=os.environ.get("POLICYSIM_SMOKE") == "1"
    )
    args = parser.parse_args(argv)
    env_kwargs = {}
    if args.smoke:
        args.users, args.rounds = 150, 3
        env_kwargs = {"candidate_users": 20, "budget": 2}

    env = socialenv.parallel_env(
        "PolicySim-Rec-v0",
        controlled_users=args.controlled,
        num_users=args.users,
        rounds=args.rounds,
        users=args.population,
        **env_kwargs,
    )
    base = env.base  # the underlying gym env
    latent_dim = (env.observation_space("user_0")["embedding"].shape[0]) // 2
    context_dim = env.observation_space(PLATFORM)["arms"].shape[1]
    slots = env.action_space(PLATFORM)  # MultiDiscrete([K + 1] * slate)
    slate_size, no_op = slots.shape[0], int(slots.nvec[0]) - 1
    platform = make_policy("linucb", context_dim=context_dim, seed=args.seed)
    print(
        f"agents: {env.possible_agents[0]}, {env.possible_agents[1]} … {env.possible_agents[-1]} "
        f"({len(env.possible_agents)}); user obs {env.observation_space('user_0')}; "
        f"user action {env.action_space('user_0')}"
    )

    observations, infos = env.reset(seed=args.seed)
    returns = dict.fromkeys(env.agents, 0.0)
    while env.agents:
        actions = {
            agent: bridge_builder(obs, latent_dim)
            for agent, obs in observations.items()
            if agent != PLATFORM
        }
        arms, mask = observations[PLATFORM]["arms"], observations[PLATFORM]["arm_mask"].astype(bool)
        # the platform fills up to `per_user` recommended slots of each sampled user
        picks = select_per_group(platform, arms, mask, slate_size, base.arm_groups(), base.per_user)
        slate = np.full(slate_size, no_op)
        slate[: len(picks)] = picks
        actions[PLATFORM] = slate
        observations, rewards, terminations, truncations, infos = env.step(actions)
        info = infos[PLATFORM]
        applied = info["arm_applied"]
        platform.update(arms[info["arm_indices"][applied]], info["arm_rewards"][applied])
        for agent, r in rewards.items():
            returns[agent] += r
        active = [a for a in infos if a != PLATFORM and infos[a]["active"]]
        print(
            f"round {info['round']}: platform reward {rewards[PLATFORM]:.3f}, "
            f"{len(active)} controlled users active, "
            f"{sum(infos[a]['reactions'] for a in active)} reactions by them, cross-stance ratio "
            f"{info['metrics']['cross_interaction_ratio']:.3f}"
        )
    users = [a for a in returns if a != PLATFORM]
    print(
        f"platform return {returns[PLATFORM]:.3f}; controlled users' engagement received: "
        f"mean {np.mean([returns[a] for a in users]):.1f}, best {max(users, key=returns.get)}"
    )
    env.close()


if __name__ == "__main__":
    main()
