"""The intervention lever: the policy is the recommender / exposure controller of a sampled
user set. Per-user caps, the score action, recommended-slot placement, candidate sources,
the platform's misinformation classifier, and slates with per-group capacities."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import socialenv  # noqa: F401
from agent_models.types import FeedChannel
from bandits import make_policy as make_bandit
from bandits.slate import select_per_group
from baselines.policies import (
    EXPOSURE_FEATURES,
    REC_FEATURES,
    ArmLayout,
    MMRPolicy,
    SuppressFlaggedPolicy,
    make_policy,
)
from socialenv.core.candidates import generate_candidates
from socialenv.core.config import CANDIDATE_SOURCES, RecommenderConfig
from socialenv.core.platform import Recommender
from socialenv.envs.policy_registry import select_action
from tests.support import LEVER_ENV_IDS, small_env

SMALL_REC = small_env(candidate_users=10, budget=2)


# ------------------------------------------------------------------ the score action
def test_scores_pick_each_users_best_allowed_arms() -> None:
    env = gym.make("PolicySim-Rec-v0", action_format="scores", **SMALL_REC).unwrapped
    assert isinstance(env.action_space, gym.spaces.Box) and env.action_space.shape == (
        env.num_arms,
    )
    obs, _ = env.reset(seed=2)
    mask = obs["action_mask"].astype(bool)
    groups = env.arm_groups()
    scores = np.random.default_rng(0).uniform(-1, 1, env.num_arms)
    scores[~mask] = 10.0  # masked arms are ignored whatever their score
    slate = env.slate_from_scores(scores)
    assert slate.shape == (env.slate_size,)
    chosen = slate[slate != env.no_op]
    assert mask[chosen].all() and len(np.unique(chosen)) == len(chosen)
    for user in range(env.lever_config.candidate_users):
        allowed = np.flatnonzero(mask & (groups == user))
        best = allowed[np.argsort(-scores[allowed], kind="stable")][: env.per_user]
        np.testing.assert_array_equal(np.sort(chosen[groups[chosen] == user]), np.sort(best))
    # the env applies exactly that slate
    _, _, _, _, info = env.step(scores)
    np.testing.assert_array_equal(info["arm_indices"], slate)
    assert info["arm_applied"].sum() == len(chosen)
    assert info["over_user_cap"] == info["duplicate_arms"] == info["invalid_arms"] == 0


def test_score_ties_are_broken_by_arm_index_and_order_only_matters() -> None:
    env = gym.make("PolicySim-Rec-v0", **SMALL_REC).unwrapped
    obs, _ = env.reset(seed=5)
    mask = obs["action_mask"].astype(bool)
    flat = env.slate_from_scores(np.zeros(env.num_arms))
    groups = env.arm_groups()
    for user in range(env.lever_config.candidate_users):
        allowed = np.flatnonzero(mask & (groups == user))
        np.testing.assert_array_equal(flat[np.isin(flat, allowed)], allowed[: env.per_user])
    scores = np.random.default_rng(1).normal(size=env.num_arms)
    # values outside the Box bounds are accepted: only the order within a user matters
    np.testing.assert_array_equal(
        env.slate_from_scores(scores), env.slate_from_scores(100 * scores + 7)
    )


def test_exposure_scores_set_one_level_per_user() -> None:
    env = gym.make(
        "PolicySim-Exposure-v0", num_users=150, rounds=2, exposure_users=12, action_format="scores"
    ).unwrapped
    env.reset(seed=0)
    levels = np.asarray(env.lever_config.exposure_levels)
    scores = np.tile(-np.abs(levels - 0.25), env.lever_config.exposure_users)  # prefer level 0.25
    _, _, _, _, info = env.step(scores)
    assert info["arm_applied"].sum() == env.slate_size == 12
    assert np.isclose(env.sim.users.exposure, 0.25).sum() == 12
    assert info["metrics"]["governed_users"] == 12


# ------------------------------------------------------------------ per-user caps
def test_exposure_second_level_of_a_user_is_over_the_cap() -> None:
    env = gym.make("PolicySim-Exposure-v0", num_users=150, rounds=2, exposure_users=10).unwrapped
    env.reset(seed=1)
    levels = len(env.lever_config.exposure_levels)
    user = env._arms["user"][0]
    slate = np.full(env.slate_size, env.no_op)
    slate[:3] = [0, 1, levels]  # user 0 at level 0, user 0 at level 1, user 1 at level 0
    _, _, _, _, info = env.step(slate)
    assert info["over_user_cap"] == 1 and info["arm_applied"][:3].tolist() == [True, False, True]
    assert env.sim.users.exposure[user] == env.lever_config.exposure_levels[0]  # the first arm wins


def test_select_per_group_respects_capacities() -> None:
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(6), 5)  # 6 users x 5 arms
    contexts = rng.normal(size=(30, 4)).astype(np.float32)
    mask = rng.random(30) < 0.8
    for name in ("linucb", "random", "egreedy"):  # scored once / asked repeatedly
        policy = make_bandit(name, context_dim=4, seed=0)
        picks = select_per_group(policy, contexts, mask, 12, groups, per_group=2)
        assert len(picks) == len(np.unique(picks)) == 12 and mask[picks].all()
        assert np.bincount(groups[picks]).max() <= 2
    # a budget larger than the capacity is cut to what the caps allow
    policy = make_bandit("linucb", context_dim=4, seed=0)
    picks = select_per_group(policy, contexts, mask, 100, groups, per_group=2)
    capacity = sum(min(2, int(mask[groups == g].sum())) for g in range(6))
    assert len(picks) == capacity
    # a scored policy keeps each group's best arms and then the best of those overall
    scores = np.arange(30, dtype=np.float64)[::-1]  # arm 0 best
    policy = make_bandit("linucb", context_dim=4, seed=0)
    policy.scores = lambda c: scores[: len(c)]  # deterministic ranking
    picks = select_per_group(policy, contexts, None, 4, groups, per_group=2)
    np.testing.assert_array_equal(picks, [0, 1, 5, 6])
    with pytest.raises(ValueError, match="per_group"):
        select_per_group(policy, contexts, None, 4, groups, per_group=0)
    with pytest.raises(ValueError, match="groups"):
        select_per_group(policy, contexts, None, 4, groups[:5])


def test_mmr_and_suppress_flagged_respect_per_user_caps() -> None:
    rec = gym.make("PolicySim-Rec-v0", **SMALL_REC)
    obs, _ = rec.reset(seed=0)
    base = rec.unwrapped
    action = select_action(make_policy("mmr", rec, seed=0, stance_gap_weight=1.0), obs, rec)
    filled = action[action != base.no_op]
    assert len(filled) == base.slate_size and len(np.unique(filled)) == len(filled)
    assert np.bincount(base.arm_groups()[filled]).max() <= base.per_user
    _, _, _, _, info = rec.step(action)
    assert info["over_user_cap"] == info["invalid_arms"] == info["duplicate_arms"] == 0

    layout = ArmLayout("exposure", 2 * 2 + len(EXPOSURE_FEATURES))
    levels = np.array([0.0, 0.5, 1.0])
    contexts = np.zeros((9, layout.context_dim), np.float32)
    contexts[:, layout.feature("level")] = np.tile(levels, 3)
    contexts[:, layout.feature("flagged_share")] = [0.9] * 3 + [0.0] * 3 + [0.6] * 3
    contexts[:, 0] = np.repeat([1.0, 2.0, 3.0], 3)  # three users
    picks = select_per_group(
        SuppressFlaggedPolicy(context_dim=layout.context_dim, kind="exposure"),
        contexts,
        None,
        3,
        np.repeat(np.arange(3), 3),
        per_group=1,
    )
    assert sorted(picks.tolist()) == [0, 5, 6]  # flagged users muted, the clean one kept
    # MMR on raw contexts: with per-user caps of 1 it names every user once
    rec_layout = ArmLayout("rec", 3 * 2 + len(REC_FEATURES))
    rec_contexts = (
        np.random.default_rng(3).normal(size=(12, rec_layout.context_dim)).astype(np.float32)
    )
    picks = select_per_group(
        MMRPolicy(context_dim=rec_layout.context_dim, kind="rec"),
        rec_contexts,
        None,
        4,
        np.repeat(np.arange(4), 3),
        per_group=1,
    )
    assert sorted((picks // 3).tolist()) == [0, 1, 2, 3]


# ------------------------------------------------------------------ recommended slots
def _feed() -> tuple[Recommender, np.ndarray, np.ndarray]:
    rec = Recommender(RecommenderConfig(relational=2, personalized=3, headline=1))
    feed = np.array(
        [[10, 11, 20, 21, 22, 30], [12, -1, 23, 24, 25, 31], [13, 14, 26, 27, -1, 32]], np.int64
    )
    channel = np.tile(np.array([0, 0, 1, 1, 1, 2], np.int8), (3, 1))
    return rec, feed, channel


def test_policy_picks_fill_the_personalized_slots_first() -> None:
    rec, feed, channel = _feed()
    # row 0 gets two picks, row 2 four (one more than its 3 slots: dropped), row 1 none
    new_feed, new_channel = rec.place_recommendations(
        feed, channel, np.array([2, 0, 2, 2, 0, 2]), np.array([90, 80, 91, 92, 81, 93])
    )
    np.testing.assert_array_equal(
        new_feed,
        [
            [10, 11, 80, 81, 20, 30],  # built-in shifted after
            [12, -1, 23, 24, 25, 31],  # untouched
            [13, 14, 90, 91, 92, 32],
        ],
    )  # 93 beyond the slots
    injected = int(FeedChannel.INJECTED)
    np.testing.assert_array_equal(
        new_channel[:, 2:5], [[injected, injected, 1], [1, 1, 1], [injected] * 3]
    )
    np.testing.assert_array_equal(new_channel[:, [0, 1, 5]], channel[:, [0, 1, 5]])
    np.testing.assert_array_equal(feed, _feed()[1])  # the input is not modified


def test_no_recommendation_leaves_the_feed_as_origin_builds_it() -> None:
    rec, feed, channel = _feed()
    same_feed, same_channel = rec.place_recommendations(
        feed, channel, np.zeros(0, np.int64), np.zeros(0, np.int64)
    )
    np.testing.assert_array_equal(same_feed, feed)
    np.testing.assert_array_equal(same_channel, channel)
    # an empty slate is Origin: same seed, same world, with or without the policy's slate of no-ops
    a = gym.make("PolicySim-Rec-v0", **SMALL_REC).unwrapped
    b = gym.make("PolicySim-Rec-v0", **SMALL_REC).unwrapped
    a.reset(seed=3)
    b.reset(seed=3)
    _, _, _, _, info = a.step(np.full(a.slate_size, a.no_op))
    plain = b.sim.run_round()  # the simulation without a policy
    np.testing.assert_array_equal(a._last_result.feed, plain.feed)
    np.testing.assert_array_equal(a._last_result.feed_channel, plain.feed_channel)
    np.testing.assert_array_equal(a.sim.users.stance, b.sim.users.stance)
    assert info["metrics"]["policy_share"] == 0.0
    assert not (a._last_result.feed_channel == int(FeedChannel.INJECTED)).any()


def test_the_policy_governs_the_recommended_slots_of_its_users() -> None:
    env = gym.make("PolicySim-Rec-v0", **SMALL_REC).unwrapped
    obs, _ = env.reset(seed=4)
    slate = env.slate_from_scores(np.zeros(env.num_arms))
    arm_user, arm_post = env._arms["user"].copy(), env._arms["post"].copy()
    _, _, _, _, info = env.step(slate)
    result = env._last_result
    injected = result.feed_channel == int(FeedChannel.INJECTED)
    applied = slate[info["arm_applied"]]
    assert injected.sum() <= len(applied) and injected.any()
    # every injected slot shows one of the policy's (user, post) pairs, in that user's row
    rows, cols = np.nonzero(injected)
    pairs = set(zip(arm_user[applied].tolist(), arm_post[applied].tolist(), strict=True))
    assert all(
        (int(result.active[r]), int(result.feed[r, c])) in pairs
        for r, c in zip(rows, cols, strict=True)
    )
    assert set(result.active[rows].tolist()) <= set(arm_user[applied].tolist())
    share = info["metrics"]["policy_share"]
    assert share == pytest.approx(injected.sum() / (result.feed >= 0).sum())


# ------------------------------------------------------------------ candidate generation
def test_candidate_sources() -> None:
    mix = {"interest": 2, "opposite": 3, "popular": 2, "fresh": 1}
    env = gym.make(
        "PolicySim-Rec-v0", num_users=300, rounds=3, candidate_users=40, budget=1, candidates=mix
    ).unwrapped
    env.reset(seed=0)
    env.step(np.full(env.slate_size, env.no_op))  # a round of fresh posts
    sim = env.sim
    users = np.sort(np.random.default_rng(0).choice(sim.active, 40, replace=False))
    cands = generate_candidates(sim.feed_context(), users, mix, 2, 100, np.random.default_rng(1))
    assert cands.post.shape == cands.source.shape == (40, 8)
    expected_source = np.repeat([CANDIDATE_SOURCES.index(s) for s in mix], list(mix.values()))
    np.testing.assert_array_equal(cands.source, np.tile(expected_source, (40, 1)))
    valid = cands.post >= 0
    assert valid.mean() > 0.8
    for row in np.where(valid, cands.post, -np.arange(1, 9)):  # no post twice for a user
        assert len(np.unique(row)) == 8
    assert not (sim.posts.author[np.where(valid, cands.post, 0)] == users[:, None])[valid].any()
    lo, hi = sim.recent_post_range(2)
    assert ((cands.post[valid] >= lo) & (cands.post[valid] < hi)).all()
    # opposite-stance candidates lie on the other side of the user's discrete stance
    opposite = (cands.source == CANDIDATE_SOURCES.index("opposite")) & valid
    sign = sim.users.discrete_stance[users][:, None] * np.ones((1, 8), np.int64)
    post_stance = sim.posts.stance[np.where(valid, cands.post, 0)]
    sided = opposite & (sign != 0)
    assert sided.sum() > 20
    assert (post_stance[sided] * sign[sided] < -1 / 3).all()
    neutral = opposite & (sign == 0)
    assert (np.abs(post_stance[neutral]) > 1 / 3).all()
    # fresh candidates come from the last round
    fresh = (cands.source == CANDIDATE_SOURCES.index("fresh")) & valid
    last_lo, last_hi = sim.round_start[-2], sim.round_start[-1]
    assert ((cands.post[fresh] >= last_lo) & (cands.post[fresh] < last_hi)).all()
    # the env's arms carry the same source one-hot as their context
    obs, _ = env.reset(seed=0)
    layout = ArmLayout("rec", env.context_dim)
    one_hot = obs["arms"][:, [layout.feature(f"source_{s}") for s in CANDIDATE_SOURCES]]
    arms_mask = obs["action_mask"].astype(bool)
    np.testing.assert_array_equal(one_hot[arms_mask].argmax(axis=1), env._arms["source"][arms_mask])


# ------------------------------------------------------------------ the classifier
def test_perfect_classifier_flags_exactly_the_misinformation() -> None:
    env = gym.make(
        "PolicySim-Exposure-v0",
        num_users=200,
        rounds=3,
        exposure_users=10,
        classifier={"recall": 1.0, "false_positive_rate": 0.0},
    ).unwrapped
    env.reset(seed=0)
    for _ in range(2):
        env.step(np.full(env.slate_size, env.no_op))
    n = len(env.sim.posts)
    misinfo, flagged = env.sim.posts.misinfo[:n], env.sim.posts.flagged[:n]
    assert misinfo.any() and (~misinfo).any()
    np.testing.assert_array_equal(flagged, misinfo)


def test_noisy_classifier_has_its_configured_rates() -> None:
    env = gym.make(
        "PolicySim-Exposure-v0",
        num_users=400,
        rounds=3,
        exposure_users=10,
        classifier={"recall": 0.6, "false_positive_rate": 0.1},
    ).unwrapped
    env.reset(seed=0)
    for _ in range(3):
        _, _, _, _, info = env.step(np.full(env.slate_size, env.no_op))
    n = len(env.sim.posts)
    mis, flag = env.sim.posts.misinfo[:n], env.sim.posts.flagged[:n]
    recall, fpr = flag[mis].mean(), flag[~mis].mean()
    assert abs(recall - 0.6) < 4 * np.sqrt(0.24 / mis.sum())
    assert abs(fpr - 0.1) < 4 * np.sqrt(0.09 / (~mis).sum())
    assert 0 <= info["metrics"]["classifier_recall"] <= 1
    # the platform's per-user signal is the flagged share, not the hidden label
    blind = gym.make(
        "PolicySim-Exposure-v0",
        num_users=200,
        rounds=2,
        exposure_users=10,
        classifier={"recall": 0.0, "false_positive_rate": 0.0},
    ).unwrapped
    obs, _ = blind.reset(seed=0)
    layout = ArmLayout("exposure", blind.context_dim)
    assert blind.sim.posts.misinfo[: len(blind.sim.posts)].any()
    assert not obs["arms"][:, layout.feature("flagged_share")].any()


# ------------------------------------------------------------------ PettingZoo and scores
def test_parallel_env_with_scores_needs_the_platform_agent() -> None:
    with pytest.raises(ValueError, match="platform_agent"):
        socialenv.parallel_env(
            "PolicySim-Rec-v0", platform_agent=False, action_format="scores", **SMALL_REC
        )
    env = socialenv.parallel_env(
        "PolicySim-Rec-v0", controlled_users=2, action_format="scores", **SMALL_REC
    )
    env.reset(seed=0)
    with pytest.raises(ValueError, match="must act every step"):
        env.step({})
    _, rewards, _, _, infos = env.step({"platform": np.zeros(env.base.num_arms, np.float32)})
    assert infos["platform"]["arm_applied"].any() and np.isfinite(rewards["platform"])


@pytest.mark.parametrize("env_id", LEVER_ENV_IDS)
def test_score_action_envs_pass_the_checkers(env_id: str) -> None:
    import warnings

    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    kwargs = {
        "num_users": 150,
        "rounds": 3,
        "action_format": "scores",
        **(
            {"candidate_users": 10, "budget": 2}
            if env_id == "PolicySim-Rec-v0"
            else {"exposure_users": 10}
        ),
    }
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*Box observation space (minimum|maximum) value.*"
        )
        warnings.filterwarnings("ignore", message=".*unconventional shape.*")
        check_env(gym.make(env_id, **kwargs).unwrapped)
        sb3_check_env(gym.make(env_id, **kwargs).unwrapped, warn=True)


def test_slate_helpers_and_custom_recommenders_say_what_they_need() -> None:
    env = gym.make("PolicySim-Rec-v0", action_format="scores", **SMALL_REC)
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="action_format"):
        select_action(make_policy("random", env, seed=0), obs, env)

    class FeedsOnly:
        """A duck-typed recommender with build_feeds but no place_recommendations."""

        def __init__(self) -> None:
            self.inner = Recommender(RecommenderConfig())

        def build_feeds(self, ctx, active, rng):
            return self.inner.build_feeds(ctx, active, rng)

    custom = gym.make("PolicySim-Rec-v0", feed_recommender=FeedsOnly(), **SMALL_REC).unwrapped
    obs, _ = custom.reset(seed=0)
    custom.step(np.full(custom.slate_size, custom.no_op))  # Origin needs feeds only
    with pytest.raises(TypeError, match="place_recommendations"):
        custom.step(custom.slate_from_scores(np.zeros(custom.num_arms)))


# ------------------------------------------------------------------ the lever component
def test_each_env_takes_its_own_lever_under_one_keyword() -> None:
    from socialenv.envs.rec import RecLeverConfig

    flat = gym.make("PolicySim-Rec-v0", **small_env(), candidate_users=7, budget=2).unwrapped
    nested = gym.make(
        "PolicySim-Rec-v0", **small_env(), lever={"candidate_users": 7, "budget": 2}
    ).unwrapped
    typed = gym.make(
        "PolicySim-Rec-v0", **small_env(), lever=RecLeverConfig(candidate_users=7, budget=2)
    ).unwrapped
    assert flat.lever_config == nested.lever_config == typed.lever_config
    assert flat.config.lever is flat.lever_config and flat.num_arms == 7 * 8
    with pytest.raises(ValueError, match="each field once"):
        gym.make("PolicySim-Rec-v0", lever={"budget": 2}, budget=3)
    with pytest.raises(ValueError, match=r"lever=\['budgte'\] is not allowed.*did you mean"):
        gym.make("PolicySim-Rec-v0", lever={"budgte": 2})


@pytest.mark.parametrize(
    ("env_id", "keyword", "owner"),
    [
        ("PolicySim-Rec-v0", "exposure_users", "PolicySim-Exposure-v0"),
        ("PolicySim-Rec-v0", "moderation", "PolicySim-Moderation-v0"),
        ("PolicySim-Exposure-v0", "candidates", "PolicySim-Rec-v0"),
        ("PolicySim-Moderation-v0", "lever_share", "PolicySim-Rec-v0"),
    ],
)
def test_another_envs_lever_argument_is_refused_naming_its_env(
    env_id: str, keyword: str, owner: str
) -> None:
    from policysim_infra.validation import UnknownKeywordError

    with pytest.raises(UnknownKeywordError, match=f"'{keyword}' belongs to {owner}'s lever"):
        gym.make(env_id, **{keyword: None})


def test_each_lever_config_declares_its_size_arguments_among_its_fields() -> None:
    from socialenv.envs.registration import ENV_IDS, lever_config_class

    for env_id in ENV_IDS:
        config_class = lever_config_class(env_id)
        names = [entry.split("=")[0] for entry in config_class.size_fields]
        assert names, env_id  # the sizing advice names them (socialenv.envs.sizing)
        assert set(names) <= set(config_class.field_names()), (env_id, names)
        users = config_class.users_field
        assert users is None or names[0] == users, (env_id, names)  # a fixed size first


def test_the_simulation_knows_only_the_lever_hooks() -> None:
    """No env-specific branch in the simulation; one ``_apply_action`` and no ``step``
    override in the envs."""
    import inspect

    from socialenv.core import simulation
    from socialenv.envs import ExposureEnv, ModerationEnv, PolicySimEnv, RecEnv

    source = inspect.getsource(simulation)
    for word in ("moderation.", "ModerationState", "exposure_users", "recommend_user"):
        assert word not in source, word
    for cls in (RecEnv, ExposureEnv, ModerationEnv):
        assert "_apply_action" not in vars(cls) and "step" not in vars(cls), cls
    assert list(inspect.signature(PolicySimEnv._apply_action).parameters) == ["self", "chosen"]


def test_the_round_reports_what_the_policys_choices_caused() -> None:
    env = gym.make("PolicySim-Rec-v0", **SMALL_REC).unwrapped
    obs, _ = env.reset(seed=4)
    rng = np.random.default_rng(0)
    caused_any = False
    for _ in range(3):
        valid = np.flatnonzero(obs["action_mask"])
        slate = np.full(env.slate_size, env.no_op)
        picks = rng.choice(valid, min(len(valid), env.slate_size), replace=False)
        slate[: len(picks)] = picks
        obs, _, _, _, info = env.step(slate)
        result = env._last_result
        effects, out = result.policy, result.output
        applied = info["arm_indices"][info["arm_applied"]]
        chosen = effects.choice
        assert len(chosen["user"]) == len(applied)
        hit = effects.reaction_choice >= 0
        # a reaction is caused exactly when its (user, post) is an applied (user, post)
        pairs = set(zip(chosen["user"].tolist(), chosen["post"].tolist(), strict=True))
        reacted = list(zip(out.react_user.tolist(), out.react_post.tolist(), strict=True))
        assert hit.tolist() == [pair in pairs for pair in reacted]
        k = effects.reaction_choice[hit]
        assert (chosen["user"][k] == out.react_user[hit]).all()
        assert (chosen["post"][k] == out.react_post[hit]).all()
        assert (chosen["author"] == env.sim.posts.author[chosen["post"]]).all()
        assert (result.reaction_author == env.sim.posts.author[out.react_post]).all()
        caused_any |= bool(hit.any())
    assert caused_any
