"""Why the learners rank as they do in Table 3: the diagnostics behind BENCHMARKS.md.

    python benchmarks/table3_diagnostics.py slates          # distinct users per Exposure slate
    python benchmarks/table3_diagnostics.py learnability    # per-feature analysis, offline fits
    python benchmarks/table3_diagnostics.py curves --rounds 50   # reward per round vs an oracle
    python benchmarks/table3_diagnostics.py exploration     # exploration term vs exploitation

- **slates** — how many distinct users a policy's slate names on PolicySim-Exposure-v0 when
  it takes its top-``budget`` arms (a second arm on a user is discarded and scores 0), and the
  reward with :func:`bandits.slate.select_one_per_group` instead.
- **learnability** — logs (context, reward) pairs of the random policy, then: reward noise
  (for Rec, the share of the reward variance explained by the expected reward under the
  users' hidden state), each scalar feature's scale and correlation with the reward, and the
  held-out R² (train on 70% of the seeds, test on the others) of ridge and of a 2-layer MLP
  (EE-Net's f1, after 100 … 3,000 Adam steps) on raw and standardized contexts, per block of
  columns; for Rec also on the noise-free expected reward, with and without the hidden
  quantities of the reaction model (:data:`REC_HIDDEN`).
- **curves** — mean reward per block of rounds of each policy and of an oracle over a longer
  horizon. Rec oracle: greedy on the expected reward under the surrogate's hidden state;
  Exposure oracle: mute the users who currently believe the misinformation (hidden state),
  full exposure for the others (``suppress_flagged`` is the observable heuristic). Env
  ``PolicySim-RecExtra-v0`` (registered here) is Rec with three more observable arm features
  (:class:`RecWithAgreementFeatures`).
- **exploration** — for EE-Net, EE-Net with standardized f2 inputs
  (:class:`StandardizedGradientEENet`) and NeuralUCB, the spread over arms of the
  exploitation estimate and of the exploration term, round by round.

Policies are named "name" or "name:key=value,..." (e.g. ``eenet:train_steps=50``). Slates on
Exposure hold one arm per user, as in the runner.
Results go to ``benchmarks/results/table3_diagnostics_<part>.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import socialenv  # noqa: F401 - registers the env ids
from agent_models.types import Behaviour
from bandits.eenet import EENet
from bandits.neural_ucb import NeuralUCB
from baselines.policies import EXPOSURE_FEATURES, REC_FEATURES
from baselines.policies import make_policy as make_any_policy
from socialenv.envs.rec import RecEnv
from socialenv.runner import arm_groups, select_action

REC = "PolicySim-Rec-v0"
EXPOSURE = "PolicySim-Exposure-v0"
RESULTS = Path(__file__).parent / "results"


# ---------------------------------------------------------------------------- oracles


def rec_expected_rewards(env: Any, draws: int = 256, seed: int = 0) -> np.ndarray:
    """(K,) Monte-Carlo expected Eq. 9 reward of every arm of the current Rec observation,
    computed from the surrogate brain's hidden state (attitudes, reply and toxicity
    propensities) with its reaction model: what a clairvoyant policy would rank by.

    Only for the default :class:`agent_models.surrogate.SurrogateBrain`; arms masked out get -1.
    """
    base = env.unwrapped
    sim, brain, cfg = base.sim, base.brain, base.brain.config
    reward_cfg = base.config.reward
    arms = base._arms
    valid = arms["mask"]
    user = np.maximum(arms["user"], 0)
    post = np.maximum(arms["post"], 0)
    users, posts = sim.users, sim.posts
    attitude = np.clip(users.opinion + brain.shock, -1, 1)[user]
    post_stance = posts.stance[post]
    similarity = np.einsum("kd,kd->k", users.latent[user], posts.latent[post])
    agree = attitude * post_stance
    gap = np.abs(attitude - post_stance) / 2
    interest = cfg.interest_weight * similarity + cfg.promoted_attention
    reply_propensity = np.log(np.maximum(users.profiles.reply_frequency[user], 1e-3) / 0.25)
    logits = {
        Behaviour.LIKE: cfg.like_bias + interest + cfg.agreement_weight * agree,
        Behaviour.DISLIKE: cfg.dislike_bias + interest - cfg.agreement_weight * agree,
        Behaviour.RETWEET: cfg.retweet_bias + interest + cfg.retweet_agreement_weight * agree,
        Behaviour.REPLY: cfg.reply_bias + interest + cfg.reply_gap_weight * gap + reply_propensity,
    }
    weights = reward_cfg.engagement
    name = {Behaviour.LIKE: "like", Behaviour.DISLIKE: "dislike", Behaviour.RETWEET: "retweet",
            Behaviour.REPLY: "reply"}
    rng = np.random.default_rng(seed)
    k = len(user)
    engagement = np.zeros((draws, k))
    happened = {}
    for behaviour, logit in logits.items():
        hit = rng.random((draws, k)) < 1.0 / (1.0 + np.exp(-logit))
        happened[behaviour] = hit
        engagement = np.maximum(engagement, hit * weights.get(name[behaviour], 0.0))
    positive = happened[Behaviour.LIKE] | happened[Behaviour.RETWEET]
    follow = positive & (rng.random((draws, k)) < cfg.follow_prob)
    engagement = np.where(follow, np.maximum(engagement, weights.get("follow", 0.0)), engagement)
    toxicity = users.toxicity_propensity[user] * (
        cfg.reply_toxicity_base + cfg.reply_toxicity_gap * gap
    ) * rng.uniform(0.5, 1.5, (draws, k))
    toxicity = np.where(happened[Behaviour.REPLY], np.clip(toxicity, 0, 1), 0.0)
    divergence = np.abs(users.stance[posts.author[post]] - users.stance[user]) / 2
    if reward_cfg.divergence_needs_reaction:
        divergence = divergence * (engagement > 0)
    reward = np.clip(
        reward_cfg.stance_weight * divergence - reward_cfg.toxicity_weight * toxicity
        + reward_cfg.engagement_weight * engagement, 0.0, 1.0,
    ).mean(0)
    return np.where(valid, reward, -1.0)


#: Hidden per-arm quantities of the Rec reaction model that the arm context lacks or only
#: approximates (see :func:`rec_hidden_features`).
REC_HIDDEN = ("receiver_reply_propensity", "post_stance", "receiver_attitude",
              "attitude_x_post_stance", "attitude_post_gap", "receiver_toxicity_propensity")


def rec_hidden_features(env: Any) -> np.ndarray:
    """(K, 6) :data:`REC_HIDDEN` of every arm of the current Rec observation: log(reply
    frequency / 0.25) of the receiver, the post's own stance s_p, the receiver's attitude o_v
    (opinion + news shock), o_v·s_p, |o_v − s_p|/2, the receiver's toxicity propensity."""
    base = env.unwrapped
    sim, arms = base.sim, base._arms
    user, post = np.maximum(arms["user"], 0), np.maximum(arms["post"], 0)
    attitude = np.clip(sim.users.opinion + base.brain.shock, -1, 1)[user]
    stance = sim.posts.stance[post]
    return np.stack([
        np.log(np.maximum(sim.users.profiles.reply_frequency[user], 1e-3) / 0.25), stance,
        attitude, attitude * stance, np.abs(attitude - stance) / 2,
        sim.users.toxicity_propensity[user],
    ], axis=1).astype(np.float64)


class ExposureOracle:
    """Mute the users who currently believe the misinformation (hidden state; they slip it
    into their posts), full exposure for everyone else; one arm per user (needs the env)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def select(self, contexts: np.ndarray, mask: np.ndarray | None = None,
               budget: int = 1) -> np.ndarray:
        base = self.env.unwrapped
        arms = base._arms
        believer = base.sim.users.misinformed[np.maximum(arms["user"], 0)]
        lowest = np.isclose(arms["level"], min(base.config.exposure_levels))
        highest = np.isclose(arms["level"], max(base.config.exposure_levels))
        score = np.where(believer, np.where(lowest, 2.0, -1.0), np.where(highest, 1.0, -1.0))
        if mask is not None:
            score = np.where(mask, score, -np.inf)
        return np.argsort(-score, kind="stable")[:budget]

    def update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        del contexts, rewards


class RecOracle:
    """Greedy on :func:`rec_expected_rewards` (needs the env; not a bandit)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def select(self, contexts: np.ndarray, mask: np.ndarray | None = None,
               budget: int = 1) -> np.ndarray:
        expected = rec_expected_rewards(self.env)
        if mask is not None:
            expected = np.where(mask, expected, -np.inf)
        return np.argsort(-expected, kind="stable")[:budget]

    def update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        del contexts, rewards


@dataclass(eq=False)
class StandardizedGradientEENet(EENet):
    """EE-Net whose exploration net f2 reads standardized pooled gradients:
    φ'(x) = (φ(x) − μ) / σ, with μ, σ (per feature, σ floored at 1% of its mean) measured on the
    arms of the first round scored and then frozen (so f2's replayed inputs stay comparable).

    The prototype of the change recommended for :class:`bandits.eenet.EENet`: on PolicySim's
    contexts φ(x) is ~1e-3 in size, so f2 barely varies across arms and the exploration term
    is inert (see ``exploration``)."""

    def _reset(self) -> None:
        super()._reset()
        self._phi_mean: torch.Tensor | None = None
        self._phi_scale: torch.Tensor | None = None

    def _values_and_pooled(self, contexts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, pooled = super()._values_and_pooled(contexts)
        if self._phi_mean is None:
            std = pooled.std(0) if len(pooled) > 1 else pooled.abs().mean(0)
            self._phi_mean = pooled.mean(0)
            self._phi_scale = torch.clamp(std, min=max(float(std.mean()) * 1e-2, 1e-12))
        return values, (pooled - self._phi_mean) / self._phi_scale


class RecWithAgreementFeatures(RecEnv):
    """PolicySim-Rec-v0 plus three observable arm features the reaction model depends on
    (registered here only, as ``PolicySim-RecExtra-v0``): the post's own stance s_p (the
    context has the author's smoothed stance S_u, not the post's), the agreement S_v·s_p
    (likes and retweets rise with agreement: a linear model cannot form the product), and
    the receiver's reply propensity log(reply_frequency / 0.25) (a profile attribute, §2.1;
    replies carry the highest engagement weight). D = 3d + 13."""

    num_arm_features = RecEnv.num_arm_features + 3

    def _arm_contexts(self, arms: dict[str, np.ndarray], arm_user_context: np.ndarray) -> np.ndarray:
        base = super()._arm_contexts(arms, arm_user_context)
        user, post = np.maximum(arms["user"], 0), np.maximum(arms["post"], 0)
        post_stance = self.sim.posts.stance[post]
        reply = np.log(np.maximum(self.sim.users.profiles.reply_frequency[user], 1e-3) / 0.25)
        extra = np.stack([post_stance, self.sim.users.stance[user] * post_stance, reply], axis=1)
        extra[~arms["mask"]] = 0.0
        return np.concatenate([base, extra], axis=1).astype(np.float32)


REC_EXTRA = "PolicySim-RecExtra-v0"
if REC_EXTRA not in gym.registry:
    gym.register(id=REC_EXTRA, entry_point=RecWithAgreementFeatures)


def symmetric_init_(model: torch.nn.Module) -> None:
    """Make a one-hidden-layer :class:`bandits.networks.MLP` output exactly 0 for every input
    while keeping its random features (NeuralUCB's initialisation, Zhou et al. 2020, Alg. 1):
    the second half of the hidden units copies the first half, and the output layer weighs
    the halves +w and −w, with output bias 0."""
    first, last = model.layers[0], model.layers[-1]
    if len(model.layers) != 2 or first.out_features % 2:
        raise ValueError("symmetric_init_ needs one hidden layer of even width")
    half = first.out_features // 2
    with torch.no_grad():
        first.weight[half:] = first.weight[:half]
        first.bias[half:] = first.bias[:half]
        last.weight[:, half:] = -last.weight[:, :half]
        last.bias.zero_()


@dataclass(eq=False)
class SymmetricInitEENet(EENet):
    """EE-Net with f1 and f2 initialised to output 0 everywhere (:func:`symmetric_init_`):
    every arm scores the same until data arrives, so the first slate is uniformly random (the
    tie-break) instead of the argmax of a random network."""

    def _reset(self) -> None:
        super()._reset()
        symmetric_init_(self._exploitation.model)
        symmetric_init_(self._exploration.model)


@dataclass(eq=False)
class SymmetricInitNeuralUCB(NeuralUCB):
    """NeuralUCB with its network initialised to output 0 everywhere, as in Zhou et al. 2020."""

    def _reset(self) -> None:
        super()._reset()
        symmetric_init_(self._network.model)


#: Policies only this script knows (ablations of the neural bandits).
VARIANTS: dict[str, type] = {
    "eenet_phi_std": StandardizedGradientEENet,
    "eenet_sym": SymmetricInitEENet,
    "neural_ucb_sym": SymmetricInitNeuralUCB,
}


def parse_policy(spec: str) -> tuple[str, dict[str, Any]]:
    """"name" or "name:key=value,key=value" (values parsed as JSON) -> (name, kwargs)."""
    name, _, rest = spec.partition(":")
    kwargs: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        kwargs[key] = json.loads(value)
    return name, kwargs


def make_diagnostic_policy(spec: str, env: Any, seed: int, **kwargs: Any) -> Any:
    """A policy from ``spec`` ("name[:key=value,...]"): a bandit, a baseline
    (``suppress_flagged`` is the observable Exposure heuristic), an EE-Net variant of
    :data:`VARIANTS`, ``eenet_gnn``, or "oracle" (:class:`RecOracle` / :class:`ExposureOracle`)."""
    name, spec_kwargs = parse_policy(spec)
    kwargs = {**spec_kwargs, **kwargs}
    if name == "oracle":
        if isinstance(env.unwrapped, RecEnv):
            return RecOracle(env)
        return ExposureOracle(env)
    if name in VARIANTS:
        return VARIANTS[name](context_dim=env.unwrapped.context_dim, seed=seed, **kwargs)
    return make_any_policy(name, env, seed, **kwargs)


# ---------------------------------------------------------------------------- episodes


def play(env_id: str, policy_name: str, seed: int, env_kwargs: dict[str, Any],
         one_per_user: bool = True, policy_kwargs: dict[str, Any] | None = None,
         on_round: Callable[[Any, Any, dict[str, Any], dict[str, Any]], None] | None = None,
         ) -> list[dict[str, Any]]:
    """One episode of ``policy_name`` (learning online); one row per round with ``reward``,
    ``applied_reward`` (mean over applied arms), ``distinct_users`` and the env metrics.
    ``on_round(env, policy, obs_before, info)`` is called after every step."""
    env = gym.make(env_id, **env_kwargs)
    base = env.unwrapped
    policy = make_diagnostic_policy(policy_name, env, seed, **(policy_kwargs or {}))
    obs, _ = env.reset(seed=seed * 1000)
    rows, done = [], False
    while not done:
        if hasattr(policy, "observe_graph"):
            policy.observe_graph(base.graph_data())
        groups = arm_groups(base) if one_per_user else None
        action = select_action(policy, obs, base.config.budget, base.no_op, groups=groups)
        before = obs
        obs, reward, _, truncated, info = env.step(action)
        applied = info["arm_applied"]
        if applied.any():
            policy.update(before["arms"][info["arm_indices"][applied]], info["arm_rewards"][applied])
        filled = action[action != base.no_op]
        rows.append({
            "round": int(info["round"]), "reward": float(reward),
            "applied_reward": float(info["arm_rewards"][applied].mean()) if applied.any() else 0.0,
            "distinct_users": int(len(np.unique(_arm_users(base, before, filled)))),
            **{k: float(v) for k, v in info["metrics"].items()},
        })
        if on_round is not None:
            on_round(env, policy, before, info)
        done = truncated
    env.close()
    return rows


def _arm_users(base: Any, obs: dict[str, Any], arms: np.ndarray) -> np.ndarray:
    """Users of ``arms`` of observation ``obs``: rows of the user-context columns."""
    user_columns = obs["arms"][arms][:, : 2 * base._latent_dim]
    return np.unique(user_columns, axis=0, return_inverse=True)[1].reshape(-1)


# ---------------------------------------------------------------------------- parts


def part_slates(args: argparse.Namespace) -> dict[str, Any]:
    """Distinct users per Exposure slate and reward, top-budget vs one arm per user."""
    out: dict[str, Any] = {}
    kwargs = {"num_users": args.users, "rounds": args.rounds}
    print(f"{'policy':<12} {'slate':<14} {'distinct users / 20':>20} {'reward':>8} "
          f"{'reward per applied arm':>24}")
    for policy in args.policies:
        for one_per_user in (False, True):
            rows = [r for s in range(args.seeds)
                    for r in play(EXPOSURE, policy, s, kwargs, one_per_user=one_per_user)]
            summary = {k: float(np.mean([r[k] for r in rows]))
                       for k in ("distinct_users", "reward", "applied_reward")}
            label = "one per user" if one_per_user else "top-budget"
            out[f"{policy}/{label}"] = summary
            print(f"{policy:<12} {label:<14} {summary['distinct_users']:>20.1f} "
                  f"{summary['reward']:>8.3f} {summary['applied_reward']:>24.3f}")
    return out


class _Recorder:
    """Wraps a policy: records the Rec oracle's expected reward of the round's arms at the
    first ``select`` of each round (``expected`` is None on Exposure)."""

    def __init__(self, env: Any, inner: Any, seed: int, with_expectation: bool) -> None:
        self.env, self.inner, self.seed = env, inner, seed
        self.with_expectation = with_expectation
        self.expected: np.ndarray | None = None
        self.hidden: np.ndarray | None = None
        self._fresh = True

    def select(self, contexts: np.ndarray, mask: np.ndarray | None = None,
               budget: int = 1) -> np.ndarray:
        if self.with_expectation and self._fresh:
            self.expected = rec_expected_rewards(self.env, seed=self.seed)
            self.hidden = rec_hidden_features(self.env)
            self._fresh = False
        return self.inner.select(contexts, mask, budget)

    def update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        self._fresh = True
        self.inner.update(contexts, rewards)


def collect(env_id: str, seeds: int, rounds: int, users: int, policy: str = "random",
            ) -> dict[str, np.ndarray]:
    """(context, reward) pairs of ``policy``'s applied arms (one arm per user), with the
    oracle's expected reward of each pair on Rec. Arrays: contexts (n, D), rewards (n,),
    expected (n,) and hidden (n, 6) (:data:`REC_HIDDEN`; NaN on Exposure), seed (n,),
    round (n,)."""
    store: dict[str, list[np.ndarray]] = {"contexts": [], "rewards": [], "expected": [],
                                          "hidden": [], "seed": [], "round": []}
    for seed in range(seeds):
        env = gym.make(env_id, num_users=users, rounds=rounds)
        base = env.unwrapped
        recorder = _Recorder(env, make_diagnostic_policy(policy, env, seed), seed,
                             with_expectation=env_id == REC)
        obs, _ = env.reset(seed=seed * 1000)
        done = False
        while not done:
            action = select_action(recorder, obs, base.config.budget, base.no_op,
                                   groups=arm_groups(base))
            before = obs
            obs, _, _, truncated, info = env.step(action)
            applied = info["arm_applied"]
            arms = info["arm_indices"][applied]
            if applied.any():
                recorder.update(before["arms"][arms], info["arm_rewards"][applied])
            store["contexts"].append(before["arms"][arms])
            store["rewards"].append(info["arm_rewards"][applied])
            store["expected"].append(recorder.expected[arms] if recorder.expected is not None
                                     else np.full(len(arms), np.nan))
            store["hidden"].append(recorder.hidden[arms] if recorder.hidden is not None
                                   else np.full((len(arms), len(REC_HIDDEN)), np.nan))
            store["seed"].append(np.full(len(arms), seed))
            store["round"].append(np.full(len(arms), info["round"]))
            done = truncated
        env.close()
    return {k: np.concatenate(v) for k, v in store.items()}


def ridge_r2(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
             regularization: float = 1.0) -> float:
    """Held-out R² of ridge regression with an unpenalised intercept."""
    mean_x, mean_y = x_train.mean(0), y_train.mean()
    a = (x_train - mean_x).T @ (x_train - mean_x) + regularization * np.eye(x_train.shape[1])
    theta = np.linalg.solve(a, (x_train - mean_x).T @ (y_train - mean_y))
    prediction = (x_test - mean_x) @ theta + mean_y
    return r2(y_test, prediction)


#: Adam steps at which :func:`mlp_r2` reports: 100 is all the training EE-Net's f1 gets in
#: 10 rounds (10 steps per update).
MLP_CHECKPOINTS = (100, 300, 1000, 3000)


def mlp_r2(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
           seed: int = 0) -> dict[int, float]:
    """Held-out R² of EE-Net's f1 (D → 64 → 1, Adam 1e-3, batch 64) after each of
    :data:`MLP_CHECKPOINTS` steps."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(x_train.shape[1], 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    xt = torch.from_numpy(x_train.astype(np.float32))
    yt = torch.from_numpy(y_train.astype(np.float32))
    x_eval = torch.from_numpy(x_test.astype(np.float32))
    out: dict[int, float] = {}
    for step in range(1, max(MLP_CHECKPOINTS) + 1):
        rows = torch.randint(len(xt), (64,), generator=generator)
        optimizer.zero_grad()
        loss = torch.mean((model(xt[rows]).squeeze(-1) - yt[rows]) ** 2)
        loss.backward()
        optimizer.step()
        if step in MLP_CHECKPOINTS:
            with torch.no_grad():
                out[step] = r2(y_test, model(x_eval).squeeze(-1).numpy())
    return out


def r2(y: np.ndarray, prediction: np.ndarray) -> float:
    return float(1.0 - np.mean((y - prediction) ** 2) / max(np.var(y), 1e-12))


def _fits(x: np.ndarray, y: np.ndarray, train: np.ndarray) -> dict[str, Any]:
    """Held-out R² of ridge (raw / standardized columns) and of the MLP (raw / standardized,
    at each checkpoint) predicting y from x."""
    mean, std = x[train].mean(0), x[train].std(0) + 1e-8
    z = (x - mean) / std
    return {
        "ridge_raw": ridge_r2(x[train], y[train], x[~train], y[~train]),
        "ridge_standardized": ridge_r2(z[train], y[train], z[~train], y[~train],
                                       regularization=float(train.sum()) * 0.01),
        "mlp_raw": mlp_r2(x[train], y[train], x[~train], y[~train]),
        "mlp_standardized": mlp_r2(z[train], y[train], z[~train], y[~train]),
    }


def part_learnability(args: argparse.Namespace) -> dict[str, Any]:
    """Reward noise, per-feature scale / correlation, held-out R² per column block."""
    out: dict[str, Any] = {}
    for env_id, names in ((REC, REC_FEATURES), (EXPOSURE, EXPOSURE_FEATURES)):
        start = time.perf_counter()
        data = collect(env_id, args.seeds, args.rounds, args.users)
        x, y = data["contexts"].astype(np.float64), data["rewards"].astype(np.float64)
        n_features = len(names)
        latent = (x.shape[1] - n_features) // (3 if env_id == REC else 2)
        result: dict[str, Any] = {"n": len(y), "reward_mean": float(y.mean()),
                                  "reward_std": float(y.std()),
                                  "reward_zero_share": float(np.mean(y == 0))}
        scalars = x[:, -n_features:]
        result["features"] = {
            name: {"mean": float(scalars[:, i].mean()), "std": float(scalars[:, i].std()),
                   "min": float(scalars[:, i].min()), "max": float(scalars[:, i].max()),
                   "corr_reward": _corr(scalars[:, i], y)}
            for i, name in enumerate(names)
        }
        result["user_context_entry_std"] = float(x[:, : 2 * latent].std(0).mean())
        blocks = {"all": slice(None), "scalar features": slice(x.shape[1] - n_features, None),
                  "user context": slice(0, 2 * latent)}
        if env_id == REC:
            blocks["post embedding"] = slice(2 * latent, 3 * latent)
        train = data["seed"] < max(1, int(round(args.seeds * 0.7)))
        result["heldout_r2"] = {block: _fits(x[:, columns], y, train)
                                for block, columns in blocks.items()}
        if env_id == REC:
            expected, hidden = data["expected"], data["hidden"]
            result["oracle_r2"] = r2(y, expected)
            result["expected_reward_std"] = float(expected.std())
            result["hidden"] = {name: {"corr_reward": _corr(hidden[:, i], y),
                                       "corr_expected": _corr(hidden[:, i], expected)}
                                for i, name in enumerate(REC_HIDDEN)}
            with_hidden = np.concatenate([scalars, hidden], axis=1)
            result["expected_r2"] = {
                "scalar features": _fits(scalars, expected, train),
                "all context": _fits(x, expected, train),
                "scalar + hidden": _fits(with_hidden, expected, train),
            }
        result["seconds"] = time.perf_counter() - start
        out[env_id] = result
        _print_learnability(env_id, result)
    return out


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    if a.std() == 0 or b.std() == 0:
        return 0.0
    return float(np.corrcoef(a, b)[0, 1])


def _print_fits(title: str, fits: dict[str, Any]) -> None:
    steps = "/".join(str(c) for c in MLP_CHECKPOINTS)
    print(f"  {title}")
    print(f"    {'columns':<18} {'ridge raw / std':>16}   MLP raw @ {steps} steps | standardized")
    for block, fit in fits.items():
        mlp_raw = " ".join(f"{v:6.3f}" for v in fit["mlp_raw"].values())
        mlp_std = " ".join(f"{v:6.3f}" for v in fit["mlp_standardized"].values())
        print(f"    {block:<18} {fit['ridge_raw']:>7.3f} / {fit['ridge_standardized']:<7.3f}"
              f"  {mlp_raw} | {mlp_std}")


def _print_learnability(env_id: str, result: dict[str, Any]) -> None:
    print(f"\n{env_id}: {result['n']} (context, reward) pairs of the random policy; reward "
          f"mean {result['reward_mean']:.3f}, std {result['reward_std']:.3f}, "
          f"zero {result['reward_zero_share']:.0%}")
    if "oracle_r2" in result:
        print(f"  the expected reward under the hidden state explains R² = "
              f"{result['oracle_r2']:.3f} of the reward variance (its std over arms "
              f"{result['expected_reward_std']:.3f})")
    print(f"  user-context columns: mean per-column std {result['user_context_entry_std']:.3f}")
    print(f"  {'feature':<28} {'mean':>7} {'std':>7} {'min':>7} {'max':>7} {'corr(r)':>8}")
    for name, f in result["features"].items():
        print(f"  {name:<28} {f['mean']:>7.3f} {f['std']:>7.3f} {f['min']:>7.2f} "
              f"{f['max']:>7.2f} {f['corr_reward']:>8.3f}")
    for name, f in result.get("hidden", {}).items():
        print(f"  (hidden) {name:<28} corr(r) {f['corr_reward']:>7.3f}  "
              f"corr(E[r]) {f['corr_expected']:>7.3f}")
    _print_fits("held-out R² of the reward (train on 70% of the seeds):", result["heldout_r2"])
    if "expected_r2" in result:
        _print_fits("held-out R² of the expected reward (noise-free target):",
                    result["expected_r2"])


def part_curves(args: argparse.Namespace) -> dict[str, Any]:
    """Mean reward per block of rounds for each policy, and the oracle."""
    out: dict[str, Any] = {}
    block = max(1, args.block)
    for env_id in args.envs:
        kwargs = {"num_users": args.users, "rounds": args.rounds}
        out[env_id] = {}
        edges = list(range(0, args.rounds, block))
        header = " ".join(f"{e + 1:>3}-{min(e + block, args.rounds):<3}" for e in edges)
        print(f"\n{env_id}: {args.users} users, {args.seeds} seeds; mean reward over rounds")
        print(f"  {'policy':<34} {header}   mean  misinformation/cross")
        for policy in args.policies:
            start = time.perf_counter()
            runs = [play(env_id, policy, s, kwargs) for s in range(args.seeds)]
            rewards = np.array([[r["reward"] for r in rows] for rows in runs])
            blocks = [float(rewards[:, e:e + block].mean()) for e in edges]
            key = "misinformation_ratio" if env_id == EXPOSURE else \
                "cross_interaction_ratio_recommended"
            final = float(np.mean([rows[-1][key] if env_id == EXPOSURE
                                   else np.mean([r[key] for r in rows]) for rows in runs]))
            out[env_id][policy] = {"per_round": rewards.mean(0).tolist(), "blocks": blocks,
                                   "mean": float(rewards.mean()), key: final,
                                   "seconds": time.perf_counter() - start}
            print(f"  {policy:<34} " + " ".join(f"{b:>7.3f}" for b in blocks)
                  + f"  {rewards.mean():.3f}  {final:.3f}")
    return out


def part_exploration(args: argparse.Namespace) -> dict[str, Any]:
    """Spread over the K arms (std) of the exploitation estimate and of the exploration
    term of EE-Net and NeuralUCB, and the reward, per round."""
    out: dict[str, Any] = {}
    for env_id in args.envs:
        out[env_id] = {}
        for policy in ("eenet", "eenet_phi_std", "neural_ucb"):
            trace: list[dict[str, float]] = []

            def on_round(env: Any, pol: Any, obs: dict[str, Any], info: dict[str, Any],
                         trace: list[dict[str, float]] = trace) -> None:
                contexts = obs["arms"][obs["action_mask"].astype(bool)]
                total = pol.scores(contexts)
                if isinstance(pol, EENet):
                    values, _ = pol.exploitation_and_gradient_features(contexts)
                else:
                    with torch.no_grad():
                        values = pol._network.predict(torch.from_numpy(contexts)).numpy()
                explore = total - values
                trace.append({"exploit_std": float(values.std()),
                              "explore_std": float(explore.std()),
                              "explore_mean": float(explore.mean()),
                              "reward": float(info["arm_rewards"][info["arm_applied"]].mean())})

            for seed in range(args.seeds):
                play(env_id, policy, seed, {"num_users": args.users, "rounds": args.rounds},
                     on_round=on_round)
            per_round = {k: np.mean(np.array([t[k] for t in trace]).reshape(args.seeds, -1), 0)
                         .tolist() for k in trace[0]}
            out[env_id][policy] = per_round
            print(f"\n{env_id} {policy}: round: std_arms(exploit) / std_arms(explore) / mean explore")
            for r in range(0, args.rounds, max(1, args.rounds // 10)):
                print(f"  {r + 1:>3}: {per_round['exploit_std'][r]:.4f} / "
                      f"{per_round['explore_std'][r]:.4f} / {per_round['explore_mean'][r]:+.4f}")
    return out


PARTS = {"slates": part_slates, "learnability": part_learnability, "curves": part_curves,
         "exploration": part_exploration}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=sorted(PARTS))
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--block", type=int, default=10, help="rounds per column (curves)")
    parser.add_argument("--envs", nargs="+", default=[REC, EXPOSURE])
    parser.add_argument("--policies", nargs="+",
                        default=["random", "egreedy", "linucb", "neural_ucb", "eenet", "eenet_gnn",
                                 "oracle"],
                        help='"name" or "name:key=value,..." (e.g. eenet:train_steps=50); '
                             "names: bandits, baselines, eenet_gnn, eenet_phi_std, oracle")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = PARTS[args.part](args)
    out = args.out or RESULTS / f"table3_diagnostics_{args.part}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"config": {k: v for k, v in vars(args).items() if k != "out"},
                               "result": result}, indent=2, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
