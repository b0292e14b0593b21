"""The declared objective of each env, the objective-form rewards, the lever as a share of the
active users, honest lever accounting and the contexts an untrained policy cannot read
stance from (issue 20)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import socialenv  # noqa: F401
from agent_models.types import Behaviour, FeedChannel, RoundInput, RoundOutput
from baselines.policies import ArmLayout, make_policy
from socialenv.core.config import DEFAULT_LEVER_SHARE
from socialenv.envs.exposure import ExposureEnv
from socialenv.envs.policy_registry import make_run_policy, select_action
from socialenv.envs.rec import RecEnv
from tests.socialenv.test_rewards import MisinformingBrain, ScriptedBrain


class EveryFeedBrain(ScriptedBrain):
    """Every active user reacts with ``kind`` (toxicity ``tox``) to every post in their feed."""

    def act(self, round_input: RoundInput) -> RoundOutput:
        rows, cols = np.nonzero(round_input.feed >= 0)
        m = len(rows)
        return RoundOutput(
            react_user=round_input.active[rows],
            react_post=round_input.feed[rows, cols],
            react_kind=np.full(m, int(self.kind), np.int8),
            react_stance=np.zeros(m, np.float32),
            react_toxicity=np.full(m, self.tox, np.float32),
        )


def _value(kind: Behaviour, tox: float, d_author: int, d_receiver: int) -> float:
    """A reaction's value to the Rec objective by hand (hostile_toxicity 0.5, both weights 1):
    across opposite stances +1 if civil, −1 if hostile, − the toxicity of a reply; else 0."""
    hostile = kind == Behaviour.DISLIKE or (kind == Behaviour.REPLY and tox >= 0.5)
    if d_author * d_receiver != -1:
        return 0.0
    return float(not hostile) - float(hostile) - (tox if kind == Behaviour.REPLY else 0.0)


@pytest.mark.parametrize(
    ("kind", "tox"),
    [
        (Behaviour.LIKE, 0.0),
        (Behaviour.REPLY, 0.3),
        (Behaviour.REPLY, 0.8),
        (Behaviour.DISLIKE, 0.0),
    ],
)
def test_rec_objective_and_arm_rewards_by_hand(kind: Behaviour, tox: float) -> None:
    env = RecEnv(num_users=150, users=EveryFeedBrain(kind, tox), candidate_users=30, budget=1)
    obs, _ = env.reset(seed=0)
    discrete = env.sim.users.discrete_stance.copy()
    author_of = env.sim.posts.author
    allowed = np.flatnonzero(obs["action_mask"])
    receiver_of, post_of = env._arms["user"], env._arms["post"]
    gap = np.abs(discrete[author_of[post_of[allowed]]] - discrete[receiver_of[allowed]])
    slate = np.full(env.slate_size, env.no_op)
    picked: list[int] = []
    for g in (2, 1, 0):  # a cross-stance, a neutral-camp and a same-stance pair
        for arm in allowed[gap == g]:
            if all(receiver_of[arm] != receiver_of[other] for other in picked):
                picked.append(int(arm))
                break
    assert len(picked) == 3
    slate[:3] = picked
    _, reward, _, _, info = env.step(slate)
    result = env._last_result
    valid = result.feed >= 0
    users = np.broadcast_to(result.active[:, None], result.feed.shape)[valid]
    posts = result.feed[valid]
    values = np.array(
        [
            _value(kind, tox, int(discrete[author_of[p]]), int(discrete[u]))
            for u, p in zip(users, posts, strict=True)
        ]
    )
    metrics = info["metrics"]
    assert metrics["objective"] == pytest.approx(values.sum() / len(result.active))
    # here a reaction has a positive value exactly when it is civil and across stances
    assert metrics["civil_cross_reactions_per_user"] == pytest.approx(
        np.sum(values > 0) / len(result.active)
    )
    # the built-in personalized slots of the users the policy did not govern set the baseline
    governed = np.unique(receiver_of[obs["action_mask"].astype(bool)])
    builtin = (
        valid
        & (result.feed_channel == int(FeedChannel.PERSONALIZED))
        & ~np.isin(result.active, governed)[:, None]
    )
    b_users = np.broadcast_to(result.active[:, None], result.feed.shape)[builtin]
    baseline = np.mean(
        [
            _value(kind, tox, int(discrete[author_of[p]]), int(discrete[u]))
            for u, p in zip(b_users, result.feed[builtin], strict=True)
        ]
    )
    assert metrics["builtin_slot_value"] == pytest.approx(baseline)
    change = (
        np.array(
            [
                _value(
                    kind, tox, int(discrete[author_of[post_of[a]]]), int(discrete[receiver_of[a]])
                )
                for a in picked
            ]
        )
        - baseline
    )
    np.testing.assert_allclose(
        info["arm_rewards"][:3], np.clip(0.5 + 0.5 * change, 0, 1), atol=1e-6
    )
    # the step reward is the round's objective; the arms' own credit is the slot reward
    assert reward == metrics["objective"]
    assert metrics["slot_reward"] == pytest.approx(change.sum() / len(governed))
    # a neutral user's reaction to a camp's post is worth what a same-stance one is, in both
    assert change[1] == pytest.approx(change[2])
    slots = RecEnv(
        num_users=150,
        users=EveryFeedBrain(kind, tox),
        candidate_users=30,
        budget=1,
        reward={"step": "slots"},
    )
    slots.reset(seed=0)
    _, slot_step, _, _, slot_info = slots.step(slate)
    assert slot_step == pytest.approx(change.sum() / len(governed))
    assert slot_info["metrics"]["objective"] == metrics["objective"]


def test_rec_origin_earns_zero_slot_reward_and_the_paper_form_keeps_eq9() -> None:
    env = gym.make("PolicySim-Rec-v0", num_users=150, rounds=2)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(np.full(env.action_space.shape, env.unwrapped.no_op))
    assert info["metrics"]["slot_reward"] == 0.0 and reward == info["metrics"]["objective"]
    paper = gym.make("PolicySim-Rec-v0", num_users=150, rounds=2, reward={"form": "paper"})
    paper.reset(seed=0)
    _, _, _, _, info_paper = paper.step(np.full(paper.action_space.shape, paper.unwrapped.no_op))
    # the form changes the reward, not the world
    assert info_paper["metrics"]["objective"] == info["metrics"]["objective"]


@pytest.mark.parametrize(
    "reward",
    [
        {"form": "paper"},
        {"step": "slots"},
        {"hostile_weight": 0.0, "reply_toxicity_weight": 0.0},
        {"hostile_weight": 3.0, "reply_toxicity_weight": 8.0},
    ],
)
def test_the_reward_settings_change_the_rewards_and_never_the_world(reward: dict) -> None:
    """Under the same slates, every observation and every ``info`` entry other than the
    reward terms is the same whatever the reward's form, step and weights."""
    reward_terms = {"arm_rewards", "arm_toxicity", "response_reward", "metrics"}
    metric_terms = {"objective", "slot_reward", "builtin_slot_value"}
    default = gym.make("PolicySim-Rec-v0", num_users=200, rounds=3)
    other = gym.make("PolicySim-Rec-v0", num_users=200, rounds=3, reward=reward)
    obs_a, _ = default.reset(seed=5)
    obs_b, _ = other.reset(seed=5)
    rng = np.random.default_rng(0)
    for _ in range(3):
        for key in obs_a:
            np.testing.assert_array_equal(obs_a[key], obs_b[key])
        slate = rng.integers(0, default.unwrapped.no_op + 1, default.action_space.shape)
        obs_a, _, _, _, info_a = default.step(slate)
        obs_b, _, _, _, info_b = other.step(slate)
        for key in info_a.keys() - reward_terms:
            np.testing.assert_array_equal(np.asarray(info_a[key]), np.asarray(info_b[key]))
        for key in info_a["metrics"].keys() - metric_terms:
            if key in info_b["metrics"]:
                assert info_a["metrics"][key] == info_b["metrics"][key], key


# ------------------------------------------------------------------ the lever
@pytest.mark.parametrize("env_id", ["PolicySim-Rec-v0", "PolicySim-Exposure-v0"])
def test_default_lever_fits_the_memory_budget_and_serves_a_share(env_id: str) -> None:
    env = gym.make(env_id).unwrapped
    # K ≤ 800 arms at the default 1,000 users (PPO's rollout buffer, issue 26)
    assert env.num_arms <= 800
    obs, _ = env.reset(seed=0)
    assert obs["arms"].shape == (env.num_arms, env.context_dim)
    governed = len(np.unique(env._arms["user"][env._arms["mask"]]))
    assert governed == round(DEFAULT_LEVER_SHARE * len(env.sim.active))


@pytest.mark.parametrize("env_id", ["PolicySim-Rec-v0", "PolicySim-Exposure-v0"])
def test_lever_share_means_the_same_at_every_population_size(env_id: str) -> None:
    shares = []
    for users in (300, 1000, 3000):
        env = gym.make(env_id, num_users=users, rounds=1).unwrapped
        env.reset(seed=1)
        governed = len(np.unique(env._arms["user"][env._arms["mask"]]))
        shares.append(governed / len(env.sim.active))
        assert env._capacity >= governed  # the fixed-size observation holds the round's lever
    np.testing.assert_allclose(shares, DEFAULT_LEVER_SHARE, atol=0.02)


def test_rec_policy_share_counts_the_slots_the_policy_filled() -> None:
    env = gym.make("PolicySim-Rec-v0", num_users=300, rounds=1)
    obs, _ = env.reset(seed=0)
    policy = make_run_policy("random", env.unwrapped, 0)
    _, _, _, _, info = env.step(select_action(policy, obs, env.unwrapped))
    result = env.unwrapped._last_result
    valid = result.feed >= 0
    injected = (result.feed_channel[valid] == int(FeedChannel.INJECTED)).mean()
    assert info["metrics"]["policy_share"] == pytest.approx(injected)
    assert 0.05 < info["metrics"]["policy_share"] < 0.3  # Origin serves most impressions


@pytest.mark.parametrize(
    "env_id", ["PolicySim-Rec-v0", "PolicySim-Exposure-v0", "PolicySim-Moderation-v0"]
)
def test_null_arm_reward_is_the_objective_forms_zero_point(env_id: str) -> None:
    assert gym.make(env_id, num_users=150).unwrapped.null_arm_reward() == 0.5
    paper = gym.make(env_id, num_users=150, reward={"form": "paper"}).unwrapped
    assert paper.null_arm_reward() is None


def test_a_bandit_with_a_null_arm_leaves_slots_to_the_platform() -> None:
    """A LinUCB that has learnt every arm is worse than the built-in slot leaves the slate
    empty (no_op slots, the env accepts them, the policy serves nothing); the same LinUCB
    without a null arm fills every slot it can."""
    env = gym.make("PolicySim-Rec-v0", num_users=300, rounds=2)
    base = env.unwrapped
    obs, _ = env.reset(seed=0)
    null = make_run_policy("linucb", base, 0, alpha=0.0, null_reward=base.null_arm_reward())
    plain = make_run_policy("linucb", base, 0, alpha=0.0)
    allowed = obs["arms"][obs["action_mask"].astype(bool)]
    for policy in (null, plain):
        policy.update(allowed, np.full(len(allowed), 0.3))  # every arm did worse than 0.5
    assert np.all(select_action(null, obs, base) == base.no_op)
    filled = select_action(plain, obs, base)
    groups = base.arm_groups()[obs["action_mask"].astype(bool)]
    fillable = np.minimum(np.unique(groups, return_counts=True)[1], base.per_user).sum()
    assert np.count_nonzero(filled != base.no_op) == min(base.slate_size, fillable)
    _, reward, _, _, info = env.step(select_action(null, obs, base))
    assert info["metrics"]["slot_reward"] == 0.0 and info["metrics"]["policy_share"] == 0.0


def _play_level(level: float, **kwargs) -> dict[str, float]:
    env = gym.make("PolicySim-Exposure-v0", num_users=300, rounds=2, **kwargs)
    obs, _ = env.reset(seed=0)
    policy = make_policy("fixed_level", env, level=level)
    _, reward, _, _, info = env.step(select_action(policy, obs, env.unwrapped))
    return {"reward": reward, **info["metrics"]}


def test_exposure_policy_share_counts_only_levels_below_one() -> None:
    let_through = _play_level(1.0)
    assert let_through["governed_users"] > 0 and let_through["policy_share"] == 0.0
    muted = _play_level(0.0)
    assert muted["policy_share"] > 0.0
    assert muted["policy_share"] == pytest.approx(muted["exposure_removed"], abs=0.05)


def test_exposure_objective_charges_silencing_and_is_the_step_reward() -> None:
    free = _play_level(0.0, reward={"clean_removal_cost": 0.0})
    charged = _play_level(0.0)
    assert charged["clean_removed_per_user"] > 0
    assert charged["objective"] == pytest.approx(
        free["objective"] - 0.001 * charged["clean_removed_per_user"]
    )
    assert charged["reward"] == charged["objective"]


def test_exposure_arm_rewards_when_removal_is_free_and_nobody_was_misled() -> None:
    # with a free removal the rewards' scale, uptake + clean_removal_cost, is 0 in a round
    # that misleads nobody (it divided by it: NaN rewards). Which rounds do depends on the
    # CPU's floating-point kernels (seed 2's round 7 with AVX2, seeds 3 and 5 with AVX-512),
    # so the seeds are played until such rounds are found.
    found = 0
    for seed in range(10):
        env = gym.make(
            "PolicySim-Exposure-v0", num_users=300, rounds=8, reward={"clean_removal_cost": 0.0}
        )
        obs, _ = env.reset(seed=seed)
        policy = make_policy("fixed_level", env, level=0.0)
        for _ in range(8):
            obs, _, _, _, info = env.step(select_action(policy, obs, env.unwrapped))
            assert np.isfinite(info["arm_rewards"]).all()
            applied = info["arm_applied"]
            if info["metrics"]["misinformation_uptake"] == 0.0 and applied.any():
                np.testing.assert_array_equal(info["arm_rewards"][applied], 0.5)
                found += 1
        if found >= 2:
            break
    assert found >= 2


def test_exposure_objective_by_hand() -> None:
    env = ExposureEnv(num_users=300, users=MisinformingBrain(), exposure_levels=(0.0, 1.0))
    obs, _ = env.reset(seed=0)
    policy = make_policy("fixed_level", env, level=0.0)
    _, reward, _, _, info = env.step(select_action(policy, obs, env))
    result, sim = env._last_result, env.sim
    newly = (sim.users.misinformed & ~result.misinformed_before).sum()
    recovered = (~sim.users.misinformed & result.misinformed_before).sum()
    clean_removed = (result.impression_removed & ~sim.posts.misinfo[result.impression_post]).sum()
    expected = (recovered - newly - 0.001 * clean_removed) / len(result.active)
    assert info["metrics"]["objective"] == pytest.approx(expected)
    assert reward == pytest.approx(expected)


# ------------------------------------------------------------------ contexts
@pytest.mark.parametrize("env_id", ["PolicySim-Rec-v0", "PolicySim-Exposure-v0"])
def test_every_arm_context_has_the_same_norm(env_id: str) -> None:
    env = gym.make(env_id, num_users=300, rounds=2)
    obs, _ = env.reset(seed=0)
    for _ in range(2):
        mask = obs["action_mask"].astype(bool)
        norms = np.linalg.norm(obs["arms"][mask].astype(np.float64), axis=1)
        np.testing.assert_allclose(norms, env.unwrapped._context_norm, rtol=1e-5)
        obs, *_ = env.step(np.full(env.action_space.shape, env.unwrapped.no_op))


def test_an_untrained_linucb_picks_cross_stance_pairs_at_the_base_rate() -> None:
    picked, base = [], []
    for seed in range(3):
        env = gym.make("PolicySim-Rec-v0", num_users=300, rounds=1)
        obs, _ = env.reset(seed=seed)
        layout = ArmLayout("rec", env.unwrapped.context_dim)
        cross = obs["arms"][:, layout.feature("cross_stance")] > 0
        mask = obs["action_mask"].astype(bool)
        slate = select_action(make_run_policy("linucb", env.unwrapped, seed), obs, env.unwrapped)
        slate = slate[slate != env.unwrapped.no_op]
        picked.append(cross[slate].mean())
        base.append(cross[mask].mean())
    assert abs(np.mean(picked) - np.mean(base)) < 0.08, (picked, base)


def test_observed_history_follows_the_replies_and_is_saved(tmp_path) -> None:
    env = RecEnv(
        num_users=150, users=EveryFeedBrain(Behaviour.REPLY, 0.9), candidate_users=20, budget=1
    )
    env.reset(seed=0)
    before = env._observed_history()["reply_toxicity"].copy()
    env.step(np.full(env.slate_size, env.no_op))
    after = env._observed_history()
    replied = np.unique(env._last_result.output.react_user)
    assert (after["reply_toxicity"][replied] > before[replied]).all()
    assert (after["cross_civility"] <= 0.8 + 1e-6).all()  # hostile replies lower it
    path = env.save(tmp_path / "env")
    loaded = RecEnv.load(path, users=EveryFeedBrain(Behaviour.REPLY, 0.9))
    np.testing.assert_array_equal(
        loaded._observed_history()["reply_toxicity"], after["reply_toxicity"]
    )


# ------------------------------------------------------------------ moderation
def test_moderation_objective_is_zero_without_moderation_and_is_the_step_reward() -> None:
    env = gym.make("PolicySim-Moderation-v0", num_users=200, rounds=2)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(np.full(env.action_space.shape, env.unwrapped.no_op))
    assert info["metrics"]["objective"] == 0.0 == reward
    paper = gym.make("PolicySim-Moderation-v0", num_users=200, rounds=2, reward={"form": "paper"})
    paper.reset(seed=0)
    _, reward_paper, _, _, info_paper = paper.step(
        np.full(paper.action_space.shape, paper.unwrapped.no_op)
    )
    assert reward_paper == info_paper["metrics"]["moderation_reward"] < 1.0


# ------------------------------------------------------------------ the zoo's one-line rules
def test_rec_rules_pick_what_they_say() -> None:
    env = gym.make("PolicySim-Rec-v0", num_users=300, rounds=1)
    obs, _ = env.reset(seed=0)
    base = env.unwrapped
    layout = ArmLayout("rec", base.context_dim)
    mask, groups = obs["action_mask"].astype(bool), base.arm_groups()
    for name, feature in (("opposite", "cross_stance"), ("agreeing", "agreement")):
        slate = select_action(make_policy(name, env, seed=0), obs, base)
        slate = slate[slate != base.no_op]
        values = obs["arms"][:, layout.feature(feature)]
        for user in np.unique(groups[slate]):
            mine = np.flatnonzero(mask & (groups == user))
            picked = slate[groups[slate] == user]
            # each user's picks are among that user's best arms by the rule's feature
            assert values[picked].min() >= np.sort(values[mine])[::-1][len(picked) - 1] - 1e-6


class SplitToxicityBrain(EveryFeedBrain):
    """Every active user replies to every post in their feed: even user ids at toxicity 0.4,
    odd ones at 0."""

    def act(self, round_input: RoundInput) -> RoundOutput:
        out = super().act(round_input)
        out.react_toxicity = np.where(out.react_user % 2 == 0, 0.4, 0.0).astype(np.float32)
        return out


def test_rec_arm_toxicity_by_hand() -> None:
    """info["arm_toxicity"]: an arm's replies' toxicity above the round's mean, minus the same
    per built-in slot impression; 0 for the slots not applied."""
    env = RecEnv(num_users=150, users=SplitToxicityBrain(Behaviour.REPLY, 0.0), candidate_users=30)
    obs, _ = env.reset(seed=0)
    allowed = np.flatnonzero(obs["action_mask"])
    receiver_of = env._arms["user"]
    picked = [int(a) for a in allowed[np.unique(receiver_of[allowed], return_index=True)[1]][:6]]
    assert {receiver_of[a] % 2 for a in picked} == {0, 1}  # both kinds of receiver
    slate = np.full(env.slate_size, env.no_op)
    slate[: len(picked)] = picked
    _, _, _, _, info = env.step(slate)
    result = env._last_result
    tau = info["metrics"]["toxicity"]
    assert tau == pytest.approx(np.mean(result.output.react_toxicity))  # only replies written
    governed = np.unique(receiver_of[obs["action_mask"].astype(bool)])
    builtin = (
        (result.feed >= 0)
        & (result.feed_channel == int(FeedChannel.PERSONALIZED))
        & ~np.isin(result.active, governed)[:, None]
    )
    b_users = np.broadcast_to(result.active[:, None], result.feed.shape)[builtin]
    baseline = np.mean(np.where(b_users % 2 == 0, 0.4, 0.0) - tau)
    expected = np.where(receiver_of[picked] % 2 == 0, 0.4, 0.0) - tau - baseline
    applied = info["arm_applied"]
    assert applied[: len(picked)].all()
    np.testing.assert_allclose(info["arm_toxicity"][: len(picked)], expected, atol=1e-6)
    assert np.all(info["arm_toxicity"][~applied] == 0.0)
    assert env.arm_cost_key() == "arm_toxicity"
    paper = RecEnv(num_users=150, reward={"form": "paper"})
    assert paper.arm_cost_key() is None


def test_a_constrained_learner_learns_from_the_envs_arm_toxicity() -> None:
    """play_episode passes the env's per-arm costs to a policy that learns them, and refuses
    an env that reports none."""
    from socialenv.envs.episodes import play_episode

    env = gym.make("PolicySim-Rec-v0", num_users=300, rounds=3)
    policy = make_run_policy("egreedy_constrained", env.unwrapped, 0)
    play_episode(env, policy, seed=0)
    assert policy.n_observations > 0
    assert np.any(policy._cost_ridge.b != 0)  # the cost model saw the arms' toxicity
    exposure = gym.make("PolicySim-Exposure-v0", num_users=300, rounds=2)
    with pytest.raises(ValueError, match="learns per-arm costs"):
        make_run_policy("egreedy_constrained", exposure.unwrapped, 0)
    from bandits import make_policy

    built_elsewhere = make_policy("egreedy_constrained", exposure.unwrapped.context_dim)
    with pytest.raises(ValueError, match="learns per-arm costs"):
        play_episode(exposure, built_elsewhere, seed=0)


def test_the_slot_step_reward_is_recs_and_the_objective_forms_only() -> None:
    for env_id in ("PolicySim-Exposure-v0", "PolicySim-Moderation-v0"):
        with pytest.raises(ValueError, match=r"reward\.step='slots' is not allowed"):
            gym.make(env_id, num_users=150, reward={"step": "slots"})
    with pytest.raises(ValueError, match=r"reward\.step='slots' is not allowed"):
        gym.make("PolicySim-Rec-v0", num_users=150, reward={"form": "paper", "step": "slots"})
    with pytest.raises(ValueError, match=r"reward\.step"):
        gym.make("PolicySim-Rec-v0", num_users=150, reward={"step": "arms"})
