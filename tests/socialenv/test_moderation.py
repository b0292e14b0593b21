"""PolicySim-Moderation-v0: checkers, effects of each governance action, the classifier,
the over-moderation penalty, seeding and save/resume."""

from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import socialenv
from socialenv import load_env
from socialenv.mechanisms.governance import MODERATION_ACTIONS
from tests.support import small_env

SMALL = small_env(num_users=200, rounds=4)


def _slate(env, action: str, *, flagged_only: bool = True) -> np.ndarray:
    """Apply ``action`` to the first candidate posts (flagged ones if asked)."""
    base = env.unwrapped
    arms = base._arms
    names = np.array(base.moderation_config.actions)[arms["action"]]
    ok = arms["mask"] & (names == action)
    if flagged_only:
        ok &= base.lever.state.flag[np.maximum(arms["post"], 0)]
    pick = np.flatnonzero(ok)[: base.slate_size]
    slate = np.full(base.slate_size, base.no_op, np.int64)
    slate[: len(pick)] = pick
    return slate


def test_checkers() -> None:
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*Box observation space (minimum|maximum) value.*"
        )
        warnings.filterwarnings("ignore", message=".*unconventional shape.*")
        check_env(gym.make("PolicySim-Moderation-v0", **SMALL).unwrapped)
        sb3_check_env(gym.make("PolicySim-Moderation-v0", **SMALL).unwrapped, warn=True)


def test_spaces_and_arms() -> None:
    env = gym.make("PolicySim-Moderation-v0", moderation={"targets": 7}, **SMALL)
    obs, _ = env.reset(seed=0)
    base = env.unwrapped
    assert base.num_arms == 7 * len(MODERATION_ACTIONS)
    assert env.action_space.nvec.tolist() == [base.num_arms + 1] * base.slate_size
    assert obs["arms"].shape == (base.num_arms, base.context_dim)
    arms = base._arms
    assert set(arms) >= {"user", "post", "action", "mask"}
    valid = arms["post"] >= 0
    np.testing.assert_array_equal(arms["user"][valid], base.sim.posts.author[arms["post"][valid]])
    np.testing.assert_array_equal(
        base.arm_groups(), np.arange(base.num_arms) // len(MODERATION_ACTIONS)
    )


def test_arms_carry_the_posts_toxicity_score_and_its_products_with_the_action() -> None:
    from socialenv.envs.moderation import MODERATION_FEATURES

    env = gym.make("PolicySim-Moderation-v0", **SMALL)
    env.reset(seed=3)
    # after a round the candidates include posts written in this episode
    obs = env.step(np.full(env.unwrapped.slate_size, env.unwrapped.no_op))[0]
    base = env.unwrapped
    offset = base.context_dim - len(MODERATION_FEATURES)
    column = {name: offset + i for i, name in enumerate(MODERATION_FEATURES)}
    valid = base._arms["mask"]
    post = base._arms["post"][valid]
    arms = obs["arms"][valid]
    toxicity = base.sim.posts.toxicity[post].astype(np.float32)
    assert toxicity.max() > 0  # the check below is not over zeros only
    np.testing.assert_array_equal(arms[:, column["post_toxicity"]], toxicity)
    for action in MODERATION_ACTIONS:
        np.testing.assert_array_equal(
            arms[:, column[f"post_toxicity_x_{action}"]],
            toxicity * arms[:, column[f"action_{action}"]],
        )
    assert (obs["arms"][~valid] == 0).all()


def test_suppress_flagged_with_toxic_action_reads_the_toxicity_scores() -> None:
    from baselines.suppress_flagged import SuppressFlagged

    env = gym.make("PolicySim-Moderation-v0", moderation={"targets": 40}, **SMALL)
    obs, _ = env.reset(seed=2)
    base = env.unwrapped
    cfg = base.moderation_config
    rule = SuppressFlagged(env, action="label", toxic_action="delete")
    slate = rule.act(obs)
    chosen = slate[slate != base.no_op]
    post = base._arms["post"][chosen]
    action = np.array(cfg.actions)[base._arms["action"][chosen]]
    toxic = base.sim.posts.toxicity[post] >= cfg.toxic_threshold
    flagged = base.lever.state.flag[post]
    assert toxic.any() and (~toxic).any()  # both branches of the rule are exercised
    assert len(np.unique(post)) == len(post)
    assert (action[toxic] == "delete").all() and (action[~toxic] == "label").all()
    assert flagged[~toxic].all()  # a post that is not toxic is acted on only when flagged
    # without toxic_action it is the flag rule
    flag_only = SuppressFlagged(env, action="label").act(obs)
    assert base.lever.state.flag[base._arms["post"][flag_only[flag_only != base.no_op]]].all()
    with pytest.raises(ValueError, match="toxic_action='ban' is not allowed"):
        SuppressFlagged(env, action="label", toxic_action="ban")


def test_score_action_keeps_the_budget_best_posts() -> None:
    """30 candidate posts, a budget of 10 slots: the score form takes each post's best action
    and keeps the 10 best-scored posts; the env steps with it and passes the checker."""
    env = gym.make(
        "PolicySim-Moderation-v0",
        action_format="scores",
        moderation={"targets": 30},
        budget=10,
        **SMALL,
    )
    obs, _ = env.reset(seed=0)
    base = env.unwrapped
    rng = np.random.default_rng(0)
    for _ in range(3):
        scores = rng.uniform(-1, 1, base.num_arms).astype(np.float32)
        slate = base.slate_from_scores(scores)
        chosen = slate[slate != base.no_op]
        allowed = np.flatnonzero(obs["action_mask"])
        posts = np.unique(base.arm_groups()[allowed])
        assert len(chosen) == min(10, len(posts))
        assert len(np.unique(base.arm_groups()[chosen])) == len(chosen)  # one action per post
        best_per_post = {
            g: allowed[base.arm_groups()[allowed] == g][
                np.argmax(scores[allowed][base.arm_groups()[allowed] == g])
            ]
            for g in posts
        }
        ranked = sorted(best_per_post.values(), key=lambda a: (-scores[a], a))
        assert set(chosen.tolist()) == set(ranked[: len(chosen)])
        obs, reward, _, _, info = env.step(scores)
        assert reward == info["metrics"]["objective"] <= 1.0
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*Box observation space (minimum|maximum) value.*"
        )
        check_env(gym.make("PolicySim-Moderation-v0", action_format="scores", **SMALL).unwrapped)


def test_delete_hides_post_and_wrongful_removal_is_penalized() -> None:
    env = gym.make("PolicySim-Moderation-v0", moderation={"precision": 0.3, "recall": 1.0}, **SMALL)
    env.reset(seed=3)
    base = env.unwrapped
    slate = _slate(env, "delete")
    posts = base._arms["post"][slate[slate != base.no_op]]
    assert len(posts)
    _, reward, _, _, info = env.step(slate)
    mod = base.lever.state
    assert mod.deleted[posts].all()
    assert not np.isin(mod.last_post[~mod.last_removed], posts).any()  # never delivered
    harmful = mod.harmful(base.sim.posts, posts)
    assert info["metrics"]["wrongful_removals"] == float((~harmful).sum())
    assert info["metrics"]["actions_delete"] == float(len(posts))
    # the same deletions on a platform that does not charge for them score higher
    env2 = gym.make(
        "PolicySim-Moderation-v0",
        moderation={
            "precision": 0.3,
            "recall": 1.0,
            "wrongful_penalty": 0.0,
            "cost": {"delete": 0.0},
        },
        **SMALL,
    )
    env2.reset(seed=3)
    _, reward2, _, _, _ = env2.step(slate)
    assert (~harmful).any() and reward2 > reward
    # deleted posts are no longer offered for deletion
    assert not base._arms["mask"][
        np.isin(base._arms["post"], posts) & (base._arms["action"] == 0)
    ].any()


def test_suspension_stops_activity_for_k_rounds() -> None:
    env = gym.make(
        "PolicySim-Moderation-v0", moderation={"suspend_rounds": 2}, num_users=200, rounds=5
    )
    env.reset(seed=1)
    base = env.unwrapped
    slate = _slate(env, "suspend", flagged_only=False)
    authors = np.unique(base._arms["user"][slate[slate != base.no_op]])
    env.step(slate)
    assert not np.isin(base._last_result.active, authors).any()
    assert not np.isin(base.sim.active, authors).any()  # round 1 too
    assert not np.isin(
        base.sim.posts.author[base.lever.state.last_post[~base.lever.state.last_removed]],
        authors,
    ).any()
    env.step(np.full(base.slate_size, base.no_op))
    assert base.lever.state.suspended(2).sum() == 0  # lifted after k = 2 rounds


def test_label_and_downrank_lower_reach() -> None:
    env = gym.make(
        "PolicySim-Moderation-v0",
        moderation={"label_reach": 0.0, "downrank_reach": 0.0},
        num_users=300,
        rounds=3,
    )
    env.reset(seed=2)
    base = env.unwrapped
    mod = base.lever.state
    lab = _slate(env, "label", flagged_only=False)[:5]
    down = _slate(env, "downrank", flagged_only=False)[5:]
    lab_posts = base._arms["post"][lab[lab != base.no_op]]
    down_posts = base._arms["post"][down[down != base.no_op]]
    down_posts = down_posts[~np.isin(down_posts, lab_posts)]
    env.step(np.concatenate([lab, down]))
    delivered = mod.last_post[~mod.last_removed]
    assert mod.labelled[lab_posts].all() and (mod.downranked_until[down_posts] == 3).all()
    assert not np.isin(delivered, np.concatenate([lab_posts, down_posts])).any()


def test_classifier_precision_and_recall() -> None:
    env = gym.make(
        "PolicySim-Moderation-v0",
        moderation={"precision": 0.6, "recall": 0.9},
        num_users=2000,
        rounds=3,
    )
    env.reset(seed=0)
    base = env.unwrapped
    for _ in range(3):
        env.step(np.full(base.slate_size, base.no_op))
    mod = base.lever.state
    mod.score(base.sim.posts, np.random.default_rng(0))
    ids = np.arange(mod.scored)
    truth, flag = mod.harmful(base.sim.posts, ids), mod.flag[ids]
    assert abs(flag[truth].mean() - 0.9) < 0.05
    assert abs(truth[flag].mean() - 0.6) < 0.08


def test_same_seed_same_trajectory_and_resume(tmp_path: Path) -> None:
    def run(env, slates):
        out = []
        for s in slates:
            obs, reward, _, _, info = env.step(s)
            out.append((obs["arms"].copy(), reward, info["metrics"]))
        return out

    rng = np.random.default_rng(5)
    env = gym.make("PolicySim-Moderation-v0", **SMALL)
    env.reset(seed=9)
    slates = [rng.integers(0, env.unwrapped.num_arms + 1, env.action_space.shape) for _ in range(4)]
    full = run(env, slates)
    again = gym.make("PolicySim-Moderation-v0", **SMALL)
    again.reset(seed=9)
    second = run(again, slates)
    for a, b in zip(full, second, strict=True):
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1] == b[1] and a[2] == b[2]
    part = gym.make("PolicySim-Moderation-v0", **SMALL)
    part.reset(seed=9)
    run(part, slates[:2])
    resumed = load_env(part.unwrapped.save(tmp_path / "m.pkl"))
    tail = run(resumed, slates[2:])
    for a, b in zip(full[2:], tail, strict=True):
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1] == b[1] and a[2] == b[2]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"precision": 0.0}, "moderation.precision"),
        ({"actions": ("delete", "ban")}, "moderation.actions"),
        ({"cost": {"nuke": 0.1}}, "moderation.cost"),
        ({"suspend_rounds": 0}, "moderation.suspend_rounds"),
        ({"colour": 1}, "moderation"),
    ],
)
def test_bad_moderation_config_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        gym.make("PolicySim-Moderation-v0", moderation=kwargs, **SMALL)


def test_linucb_runs_through_the_runner_helpers() -> None:
    from socialenv.envs.episodes import play_episode
    from socialenv.envs.policy_registry import make_run_policy

    env = gym.make("PolicySim-Moderation-v0", **SMALL)
    policy = make_run_policy("linucb", env.unwrapped, seed=0)
    rows = play_episode(env, policy, seed=0)
    assert len(rows) == SMALL["rounds"]
    assert all("moderation_reward" in r for r in rows)
    acted = sum(r[f"actions_{a}"] for r in rows for a in MODERATION_ACTIONS)
    assert acted > 0


def test_pettingzoo_view_over_moderation() -> None:
    pz = socialenv.parallel_env("PolicySim-Moderation-v0", controlled_users=2, **SMALL)
    obs, _ = pz.reset(seed=0)
    assert obs["platform"]["arms"].shape[0] == pz.base.num_arms
    slate = _slate(pz.env, "delete", flagged_only=False)
    _, rewards, _, _, infos = pz.step({"platform": slate})
    assert rewards["platform"] == infos["platform"]["metrics"]["objective"]
    assert infos["platform"]["metrics"]["actions_delete"] > 0
