"""Held-out validation of a fitted surrogate (the second half of `policysim fit`).

- **Splits**: by users (a seeded random 30% of the users held out) and by rounds (the last
  30% of the rounds held out). The fit is redone on the training part of each split.
- **Log-likelihood per action** on the held-out part, of the fitted, the default and a null
  model: an action is one decision the surrogate draws — each of the four reactions to each
  shown impression, and posting or not in each active user-round. The null model gives every
  reaction kind and posting its training frequency.
- **Action-mix JSD** (bits, base-2 Jensen–Shannon divergence) between the held-out counts of
  like, dislike, retweet, reply, post, follow, unfollow and each model's expected counts.
- **Macro metrics**: the fitted and the default surrogate replay the trace's env (same env id,
  population size, scenario, rounds; the trace's policy or Origin) on ``sim_seeds`` seeds; per
  round the stance mean and std, cross-stance ratio, toxicity and engagement, compared with
  the trace as the mean absolute error over rounds, with a 95% CI over seeds.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from agent_models.surrogate import SurrogateConfig
from socialenv.fitting.trace import Trace

MACRO_METRICS = ("stance_mean", "stance_std", "cross_interaction_ratio", "toxicity", "engagement")
ACTIONS = ("like", "dislike", "retweet", "reply", "post", "follow", "unfollow")


def posting_data(trace: Trace, lookup: Any) -> tuple[np.ndarray, np.ndarray]:
    """(y, q): per active user-round whether it posted, and 2r/(1+r) of its post/retweet ratio."""
    from socialenv.fitting.estimate import population_column

    users, posts = trace["users"], trace["posts"]
    act = users["active"]
    ep, rd, who = users["episode"][act], users["round"][act], users["user"][act]
    y = np.isin(
        lookup.key(ep, rd, who), lookup.key(posts["episode"], posts["round"], posts["user"])
    )
    ratio = population_column(trace, "post_retweet_ratio", ep, who)
    return y, 2 * ratio / (1 + ratio)


def _bernoulli_ll(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return np.where(y, np.log(p), np.log1p(-p))


def model_scores(trace: Trace, config: SurrogateConfig | None) -> dict[str, Any]:
    """Log-likelihood and expected action counts of ``config`` on ``trace`` (None: the null
    model's frequencies are filled in by the caller)."""
    from socialenv.fitting.estimate import Lookup, population_column
    from socialenv.fitting.likelihood import REACTION_PARAMS, reaction_data, reaction_logits

    lookup = Lookup(trace)
    data = reaction_data(trace, lookup)
    y_post, q = posting_data(trace, lookup)
    cfg = asdict(config)
    theta = np.array([cfg[name] for name in REACTION_PARAMS])
    prob = 1 / (1 + np.exp(-reaction_logits(theta, data)))
    post_p = np.clip(cfg["post_rate"] * q, 0, 1)
    ll_react = _bernoulli_ll(data.outcome, prob).sum()
    ll_post = _bernoulli_ll(y_post, post_p).sum()
    # expected unfollows: dislikes and toxic replies (P(clip(μU) > thr) = clip(1.5 − thr/μ, 0, 1))
    imp = trace["impressions"]
    prop = population_column(trace, "toxicity_propensity", imp["episode"], imp["user"])
    mu = np.clip(
        prop * cfg["reply_toxicity_base"]
        + cfg["reply_toxicity_gap"] * data.gap * np.maximum(prop - cfg["civility_threshold"], 0),
        0,
        1,
    )
    toxic = np.clip(1.5 - cfg["toxic_threshold"] / np.maximum(mu, 1e-12), 0, 1)
    expected = {
        "like": prob[:, 0].sum(),
        "dislike": prob[:, 1].sum(),
        "retweet": prob[:, 2].sum(),
        "reply": prob[:, 3].sum(),
        "post": post_p.sum(),
        "follow": cfg["follow_prob"] * (prob[:, 0].sum() + prob[:, 2].sum()),
        "unfollow": cfg["unfollow_prob"] * (prob[:, 1].sum() + (prob[:, 3] * toxic).sum()),
    }
    return {
        "ll": float(ll_react + ll_post),
        "ll_reactions": float(ll_react),
        "ll_posting": float(ll_post),
        "decisions": int(data.outcome.size + len(y_post)),
        "reaction_decisions": int(data.outcome.size),
        "posting_decisions": int(len(y_post)),
        "expected": {k: float(v) for k, v in expected.items()},
        "outcome": data.outcome,
        "y_post": y_post,
    }


def observed_mix(trace: Trace, scores: dict[str, Any]) -> dict[str, float]:
    edges = trace["edges"]
    out = scores["outcome"]
    return {
        "like": float(out[:, 0].sum()),
        "dislike": float(out[:, 1].sum()),
        "retweet": float(out[:, 2].sum()),
        "reply": float(out[:, 3].sum()),
        "post": float(scores["y_post"].sum()),
        "follow": float(edges["follow"].sum()),
        "unfollow": float((~edges["follow"]).sum()),
    }


def jsd_bits(p: dict[str, float], q: dict[str, float]) -> float:
    from scipy.spatial.distance import jensenshannon

    a = np.array([p[k] for k in ACTIONS], np.float64)
    b = np.array([q[k] for k in ACTIONS], np.float64)
    if a.sum() <= 0 or b.sum() <= 0:
        return float("nan")
    return float(jensenshannon(a / a.sum(), b / b.sum(), base=2) ** 2)


def _null_scores(
    train: Trace, test_scores: dict[str, Any], train_scores: dict[str, Any]
) -> dict[str, Any]:
    rate = train_scores["outcome"].mean(axis=0) if len(train_scores["outcome"]) else np.full(4, 0.5)
    post_rate = train_scores["y_post"].mean() if len(train_scores["y_post"]) else 0.5
    y = test_scores["outcome"]
    ll_react = _bernoulli_ll(y, np.broadcast_to(rate, y.shape)).sum()
    ll_post = _bernoulli_ll(
        test_scores["y_post"], np.full(len(test_scores["y_post"]), post_rate)
    ).sum()
    train_mix = observed_mix(train, train_scores)
    scale = len(y) / max(len(train_scores["outcome"]), 1)
    expected = {k: v * scale for k, v in train_mix.items()}
    expected["post"] = post_rate * len(test_scores["y_post"])
    return {
        "ll": float(ll_react + ll_post),
        "ll_reactions": float(ll_react),
        "ll_posting": float(ll_post),
        "expected": expected,
    }


def held_out(
    trace: Trace, seed: int = 0, start: SurrogateConfig | None = None, test_share: float = 0.3
) -> dict[str, Any]:
    """Fit on the training part of each split and score fitted, default and null models on
    the held-out part."""
    from socialenv.fitting.likelihood import fit_trace

    rng = np.random.default_rng([seed, 23])
    n = int(trace.meta["num_users"])
    users = rng.permutation(n)
    n_test = max(int(round(test_share * n)), 1)
    rounds = np.unique(trace["users"]["round"])
    n_test_rounds = max(int(round(test_share * len(rounds))), 1) if len(rounds) > 1 else 0
    splits = {"users": (trace.select(users=users[n_test:]), trace.select(users=users[:n_test]))}
    if n_test_rounds:
        splits["rounds"] = (
            trace.select(rounds=rounds[:-n_test_rounds]),
            trace.select(rounds=rounds[-n_test_rounds:]),
        )
    report: dict[str, Any] = {"seed": seed, "test_share": test_share}
    for name, (train, test) in splits.items():
        fitted = fit_trace(train, start=start, seed=seed).config()
        test_fit = model_scores(test, fitted)
        test_default = model_scores(test, SurrogateConfig())
        train_null = model_scores(train, SurrogateConfig())
        null = _null_scores(train, test_fit, train_null)
        mix = observed_mix(test, test_fit)
        decisions = test_fit["decisions"]
        entry: dict[str, Any] = {"decisions": decisions, "observed_mix": mix}
        for model, sc in (("fitted", test_fit), ("default", test_default), ("null", null)):
            entry[model] = {
                "ll_per_action": sc["ll"] / max(decisions, 1),
                "ll_per_reaction_decision": sc["ll_reactions"]
                / max(test_fit["reaction_decisions"], 1),
                "ll_per_posting_decision": sc["ll_posting"] / max(test_fit["posting_decisions"], 1),
                "action_mix_jsd_bits": jsd_bits(mix, sc["expected"]),
            }
        # a paired CI of the per-impression log-likelihood difference fitted − default
        entry["fitted_minus_default_ll_per_action"] = _paired_difference(test, fitted)
        report[name] = entry
    return report


def _paired_difference(test: Trace, fitted: SurrogateConfig) -> dict[str, float]:
    """Mean ± 95% CI (over users, a cluster bootstrap-free normal interval) of the held-out
    log-likelihood per action, fitted minus default."""
    from socialenv.fitting.estimate import Lookup
    from socialenv.fitting.likelihood import REACTION_PARAMS, reaction_data, reaction_loglik

    lookup = Lookup(test)
    data = reaction_data(test, lookup)
    if not len(data):
        return {"mean": float("nan"), "ci95": float("nan")}
    f, d = asdict(fitted), asdict(SurrogateConfig())
    diff = reaction_loglik(np.array([f[k] for k in REACTION_PARAMS]), data) - reaction_loglik(
        np.array([d[k] for k in REACTION_PARAMS]), data
    )
    user = test["impressions"]["user"]
    _, inverse = np.unique(user, return_inverse=True)
    per_user = np.bincount(inverse, weights=diff) / np.bincount(inverse) / 4
    se = per_user.std(ddof=1) / np.sqrt(len(per_user)) if len(per_user) > 1 else float("nan")
    return {"mean": float(per_user.mean()), "ci95": float(1.96 * se), "users": int(len(per_user))}


def macro_comparison(
    trace: Trace, fitted: SurrogateConfig, sim_seeds: int = 3, png: str | Path | None = None
) -> dict[str, Any]:
    """Replay the trace's env with the fitted and the default surrogate; per-round macro
    metrics against the trace's, with a 95% CI over ``sim_seeds`` seeds."""
    import gymnasium as gym

    import socialenv  # noqa: F401 - registers the envs
    from socialenv.envs.episodes import play_episode
    from socialenv.envs.policy_registry import make_run_policy

    meta = trace.meta
    rounds_table = trace["rounds"]
    t_rounds = np.unique(rounds_table["round"])
    observed = {
        m: np.array([np.nanmean(rounds_table[m][rounds_table["round"] == r]) for r in t_rounds])
        for m in MACRO_METRICS
    }
    from socialenv.envs.registration import env_keywords

    known = set(env_keywords("PolicySim-Rec-v0"))
    kwargs = {
        **{k: v for k, v in (meta.get("env_kwargs") or {}).items() if k in known},
        "num_users": int(meta["num_users"]),
        "rounds": int(len(t_rounds)),
    }
    if isinstance(meta.get("scenario"), str) and meta["scenario"] not in ("Scenario",):
        kwargs["scenario"] = meta["scenario"]
    policy_name = meta.get("policy", "origin")
    runs: dict[str, dict[str, np.ndarray]] = {}
    for label, config in (("fitted", fitted), ("default", SurrogateConfig())):
        per_seed = {m: [] for m in MACRO_METRICS}
        for s in range(sim_seeds):
            env = gym.make(meta["env_id"], users="surrogate", surrogate=config, **kwargs)
            policy = make_run_policy(policy_name, env.unwrapped, s)
            rows = play_episode(env, policy, seed=s)
            env.close()
            for m in MACRO_METRICS:
                per_seed[m].append([row[m] for row in rows])
        runs[label] = {m: np.array(v, np.float64) for m, v in per_seed.items()}
    report: dict[str, Any] = {
        "sim_seeds": sim_seeds,
        "policy": policy_name,
        "env_kwargs": kwargs,
        "metrics": {},
    }
    for m in MACRO_METRICS:
        entry: dict[str, Any] = {"trace": observed[m].tolist()}
        for label in ("fitted", "default"):
            series = runs[label][m]
            mae = np.abs(series - observed[m][None, :]).mean(axis=1)
            entry[label] = {
                "per_round_mean": series.mean(axis=0).tolist(),
                "mae": float(mae.mean()),
                "mae_ci95": _t_interval(mae),
            }
        report["metrics"][m] = entry
    if png is not None:
        _plot(report, t_rounds, runs, observed, Path(png))
        report["png"] = str(png)
    return report


def _t_interval(values: np.ndarray) -> float | None:
    """Half-width of the 95% t-interval of the mean (None below two values)."""
    if len(values) < 2:
        return None
    from scipy import stats

    return float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))


def _plot(
    report: dict[str, Any],
    rounds: np.ndarray,
    runs: dict[str, dict[str, np.ndarray]],
    observed: dict[str, np.ndarray],
    path: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MACRO_METRICS), figsize=(4 * len(MACRO_METRICS), 3.4))
    for ax, m in zip(axes, MACRO_METRICS, strict=True):
        ax.plot(rounds, observed[m], "k-o", ms=3, label="trace")
        for label, colour in (("fitted", "tab:blue"), ("default", "tab:orange")):
            series = runs[label][m]
            mean = series.mean(axis=0)
            half = (
                1.96 * series.std(axis=0, ddof=1) / np.sqrt(len(series))
                if len(series) > 1
                else 0 * mean
            )
            ax.plot(rounds, mean, color=colour, label=f"{label} surrogate")
            ax.fill_between(rounds, mean - half, mean + half, color=colour, alpha=0.25)
        ax.set_title(m.replace("_", " "))
        ax.set_xlabel("round")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"trace vs surrogates ({report['sim_seeds']} seeds, 95% CI bands)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
