"""CleanRL-style single-file PPO with a per-arm policy on a PolicySim env.

Everything the algorithm needs is in this file (the env comes from ``socialenv``): one shared
MLP scores every arm over its own context; each sampled user's ``per_user`` slots choose
without replacement among the user's C candidates or leave the slot to the platform (the
no-op, whose logit comes from the mean embedding of the user's arms); masked arms get a
logit of -1e8; the critic reads the masked mean of all arm embeddings. The same design as
the Stable-Baselines3 policy in ``baselines/per_arm.py``.

    python examples/ppo_per_arm.py --env-id PolicySim-Exposure-v0 --total-timesteps 20000
    python examples/ppo_per_arm.py --num-envs 8 --workers 2    # the envs on 2 cores
    python examples/ppo_per_arm.py --smoke

The envs are the native vector env (``gym.make_vec(..., vectorization_mode=
"vector_entry_point")``, same-step autoreset): with ``--workers W`` its sub-envs step on W
processes, with the same results as one.

At the end the frozen policy (deterministic: each user's top choices) plays held-out seeds
against random choices on the same seeds and prints the paired difference.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import socialenv  # noqa: F401  (registers the env ids)
from socialenv.envs.registration import lever_config_class

MASKED = -1e8


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="PolicySim-Rec-v0")
    p.add_argument("--num-users", type=int, default=300)
    p.add_argument(
        "--sampled-users",
        type=int,
        default=32,
        help="users the policy governs per round (the env lever's users_field: candidate_users for Rec, exposure_users for Exposure)",
    )
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--total-timesteps", type=int, default=20_000)
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--workers", type=int, default=1, help="processes stepping the envs")
    p.add_argument("--num-steps", type=int, default=64, help="steps per env per rollout")
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--gamma", type=float, default=0.5)
    p.add_argument("--gae-lambda", type=float, default=0.9)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.0)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--target-kl", type=float, default=0.05)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-seeds", type=int, default=5, help="held-out seeds 100, 101, ...")
    p.add_argument("--smoke", action="store_true", help="a tiny env and a few hundred steps")
    args = p.parse_args()
    if args.smoke:
        args.num_users, args.sampled_users, args.rounds = 120, 8, 3
        args.total_timesteps, args.num_envs, args.num_steps, args.eval_seeds = 128, 2, 16, 2
    return args


def env_kwargs(args: argparse.Namespace) -> dict:
    # the env's lever declares which of its arguments fixes the users it governs per round
    users_field = lever_config_class(args.env_id).users_field
    return {"num_users": args.num_users, "rounds": args.rounds, users_field: args.sampled_users}


def layout(env: gym.Env) -> tuple[int, int, int]:
    """(U sampled users, C candidates per user, P slots per user) of a PolicySim env: the
    slate (U·P) and arm (U·C) counts from the spaces, P (no space carries it) from the env."""
    per_user = env.unwrapped.per_user
    users = env.action_space.shape[0] // per_user
    return users, env.observation_space["arms"].shape[0] // users, per_user


def empty_slot(env: gym.Env) -> int:
    """The action value that leaves a slot empty: the last of each slot's ``MultiDiscrete``
    values (K, the number of arms)."""
    return int(env.action_space.nvec[0]) - 1


def to_slate(choices: np.ndarray, candidates: int, per_user: int, no_op: int) -> np.ndarray:
    """(..., U·P) per-user choices (C = no-op) -> (..., U·P) global arm indices of the env."""
    user = np.arange(choices.shape[-1]) // per_user
    return np.where(choices < candidates, user * candidates + choices, no_op)


def symlog(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.log1p(torch.abs(x))


class Agent(nn.Module):
    def __init__(
        self, context_dim: int, users: int, candidates: int, per_user: int, hidden: int
    ) -> None:
        super().__init__()
        self.users, self.candidates, self.per_user = users, candidates, per_user
        self.encoder = nn.Sequential(
            nn.Linear(context_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.score = nn.Linear(hidden, 1)
        self.no_op = nn.Linear(hidden, 1)
        self.critic = nn.Sequential(nn.Linear(hidden, 64), nn.Tanh(), nn.Linear(64, 1))
        for head in (self.score, self.no_op):
            nn.init.normal_(head.weight, std=0.01)
            nn.init.zeros_(head.bias)

    def embed(self, arms: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(symlog(arms)) * mask.unsqueeze(-1)

    def get_value(self, arms: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        embedding = self.embed(arms, mask)
        pooled = embedding.sum(1) / mask.sum(1, keepdim=True).clamp(min=1.0)
        return self.critic(pooled).squeeze(-1)

    def logits(self, embedding: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, U, C + 1): each candidate's score (masked at -1e8) and the user's no-op."""
        batch = embedding.shape[0]
        scores = self.score(embedding).squeeze(-1).masked_fill(mask < 0.5, MASKED)
        per_user = embedding.reshape(batch, self.users, self.candidates, -1)
        user_mask = mask.reshape(batch, self.users, self.candidates, 1)
        pooled = per_user.sum(2) / user_mask.sum(2).clamp(min=1.0)
        return torch.cat(
            [scores.reshape(batch, self.users, self.candidates), self.no_op(pooled)], dim=2
        )

    def get_action_and_value(
        self,
        arms: torch.Tensor,
        mask: torch.Tensor,
        action: torch.Tensor | None = None,
        deterministic: bool = False,
    ):
        """Choices (B, U·P), their log-prob (B,), the first slot's entropy (B,), value (B,)."""
        embedding = self.embed(arms, mask)
        logits = self.logits(embedding, mask)
        taken = torch.zeros_like(logits, dtype=torch.bool)
        given = None if action is None else action.long().reshape(-1, self.users, self.per_user)
        picks, log_prob = [], torch.zeros(logits.shape[0])
        entropy = None
        for slot in range(self.per_user):
            dist = torch.distributions.Categorical(logits=logits.masked_fill(taken, MASKED))
            if entropy is None:
                entropy = dist.entropy().sum(-1)
            if given is not None:
                pick = given[..., slot]
            else:
                pick = dist.probs.argmax(-1) if deterministic else dist.sample()
            log_prob = log_prob + dist.log_prob(pick).sum(-1)
            taken = taken | (
                nn.functional.one_hot(pick, self.candidates + 1).bool()
                & (pick < self.candidates).unsqueeze(-1)
            )
            picks.append(pick)
        pooled = embedding.sum(1) / mask.sum(1, keepdim=True).clamp(min=1.0)
        value = self.critic(pooled).squeeze(-1)
        return torch.stack(picks, -1).flatten(1), log_prob, entropy, value


def evaluate(agent: Agent | None, args: argparse.Namespace) -> list[float]:
    """Mean step reward per held-out seed: the agent's top choices, or random choices (None)."""
    out = []
    for seed in range(100, 100 + args.eval_seeds):
        env = gym.make(args.env_id, **env_kwargs(args))
        users, candidates, per_user = layout(env)
        rng = np.random.default_rng(seed)
        obs, _ = env.reset(seed=seed * 1000)
        rewards, done = [], False
        while not done:
            if agent is None:  # each user: per_user distinct allowed candidates at random
                allowed = obs["action_mask"].reshape(users, candidates).astype(bool)
                keys = np.where(allowed, rng.random(allowed.shape), -1.0)
                order = np.argsort(-keys, axis=1)[:, :per_user]
                choices = np.where(
                    np.take_along_axis(keys, order, 1) >= 0, order, candidates
                ).ravel()
            else:
                with torch.no_grad():
                    choices = agent.get_action_and_value(
                        torch.as_tensor(obs["arms"])[None],
                        torch.as_tensor(obs["action_mask"], dtype=torch.float32)[None],
                        deterministic=True,
                    )[0][0].numpy()
            obs, reward, terminated, truncated, _ = env.step(
                to_slate(choices, candidates, per_user, empty_slot(env))
            )
            rewards.append(reward)
            done = terminated or truncated
        out.append(float(np.mean(rewards)))
        env.close()
    return out


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    kwargs = env_kwargs(args)
    envs = gym.make_vec(
        args.env_id,
        num_envs=args.num_envs,
        vectorization_mode="vector_entry_point",
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        workers=args.workers,
        **kwargs,
    )
    probe = gym.make(args.env_id, **kwargs)
    users, candidates, per_user = layout(probe)
    no_op, (num_arms, context_dim) = empty_slot(probe), probe.observation_space["arms"].shape
    agent = Agent(context_dim, users, candidates, per_user, args.hidden)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    n, e = args.num_steps, args.num_envs
    obs_arms = torch.zeros((n, e, num_arms, context_dim))
    obs_mask = torch.zeros((n, e, num_arms))
    actions = torch.zeros((n, e, users * per_user), dtype=torch.long)
    logprobs, rewards, dones, values = (torch.zeros((n, e)) for _ in range(4))
    batch_size = n * e
    minibatch_size = batch_size // args.num_minibatches

    global_step, start = 0, time.time()
    next_obs, _ = envs.reset(seed=[args.seed + i for i in range(e)])
    next_arms = torch.as_tensor(next_obs["arms"])
    next_mask = torch.as_tensor(next_obs["action_mask"], dtype=torch.float32)
    next_done = torch.zeros(e)
    episode_sum, episode_len, episode_means = np.zeros(e), np.zeros(e), []
    num_iterations = max(1, args.total_timesteps // batch_size)
    for iteration in range(1, num_iterations + 1):
        for step in range(n):
            global_step += e
            obs_arms[step], obs_mask[step], dones[step] = next_arms, next_mask, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_arms, next_mask)
            actions[step], logprobs[step], values[step] = action, logprob, value
            next_obs, reward, terminated, truncated, _ = envs.step(
                to_slate(action.numpy(), candidates, per_user, no_op)
            )
            done = np.logical_or(terminated, truncated)
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
            next_arms = torch.as_tensor(next_obs["arms"])
            next_mask = torch.as_tensor(next_obs["action_mask"], dtype=torch.float32)
            next_done = torch.as_tensor(done, dtype=torch.float32)
            episode_sum += reward
            episode_len += 1
            for i in np.flatnonzero(done):
                episode_means.append(episode_sum[i] / episode_len[i])
                episode_sum[i] = episode_len[i] = 0

        with torch.no_grad():  # GAE; truncation is treated as the end (gamma is small)
            next_value = agent.get_value(next_arms, next_mask)
            advantages = torch.zeros_like(rewards)
            last = torch.zeros(e)
            for t in reversed(range(n)):
                not_done = 1.0 - (next_done if t == n - 1 else dones[t + 1])
                following = next_value if t == n - 1 else values[t + 1]
                delta = rewards[t] + args.gamma * following * not_done - values[t]
                last = delta + args.gamma * args.gae_lambda * not_done * last
                advantages[t] = last
            returns = advantages + values

        b_arms, b_mask = (
            obs_arms.reshape(batch_size, num_arms, context_dim),
            obs_mask.reshape(batch_size, num_arms),
        )
        b_actions, b_logprobs = actions.reshape(batch_size, -1), logprobs.reshape(-1)
        b_advantages, b_returns = advantages.reshape(-1), returns.reshape(-1)
        indices = np.arange(batch_size)
        approx_kl = torch.zeros(())
        for _ in range(args.update_epochs):
            np.random.default_rng(args.seed + iteration).shuffle(indices)
            for lo in range(0, batch_size, minibatch_size):
                mb = indices[lo : lo + minibatch_size]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                    b_arms[mb], b_mask[mb], b_actions[mb]
                )
                logratio = newlogprob - b_logprobs[mb]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - logratio).mean()
                mb_adv = b_advantages[mb]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(
                    -mb_adv * ratio,
                    -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef),
                ).mean()
                v_loss = 0.5 * ((newvalue - b_returns[mb]) ** 2).mean()
                loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
            if args.target_kl is not None and approx_kl > args.target_kl:
                break
        recent = np.mean(episode_means[-20:]) if episode_means else float("nan")
        print(
            f"step {global_step}: mean step reward (last 20 episodes) {recent:.4f}, approx_kl {approx_kl:.4f}, "
            f"{global_step / (time.time() - start):.0f} steps/s",
            flush=True,
        )
    envs.close()

    ppo, random = evaluate(agent, args), evaluate(None, args)
    diff = np.subtract(ppo, random)
    half = 1.96 * diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
    print(
        f"held-out seeds: ppo {np.mean(ppo):.4f}, random {np.mean(random):.4f}, "
        f"ppo - random {diff.mean():+.4f} ± {half:.4f} (paired, normal 95% CI)"
    )


if __name__ == "__main__":
    main()
