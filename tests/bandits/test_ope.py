"""Logged propensities of every shipped policy, the run folder's logged rounds, and the
off-policy estimators (IPS, SNIPS, DR) on a bandit whose true value is known."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from bandits import POLICIES, make_policy
from bandits.base import PROPENSITY_METHODS, top_k_inclusion
from bandits.egreedy import epsilon_greedy_inclusion
from bandits.ope import LoggedRounds, RoundLogger, estimate, evaluate, target_inclusion
from bandits.slate import one_per_group_inclusion, select_one_per_group

K, D, BUDGET = 24, 5, 4


def _problem(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    contexts = rng.normal(size=(K, D)).astype(np.float32)
    mask = np.ones(K, bool)
    mask[[2, 9]] = False
    return contexts, mask


def _trained(name: str, contexts: np.ndarray, mask: np.ndarray):
    policy = make_policy(name, context_dim=D, seed=3)
    rng = np.random.default_rng(1)
    for _ in range(3):
        chosen = policy.select(contexts, mask, BUDGET)
        policy.update(contexts[chosen], rng.random(BUDGET))
    return policy


def _empirical(policy, draw, n: int) -> np.ndarray:
    counts = np.zeros(K)
    clone = copy.deepcopy(policy)
    for _ in range(n):
        counts[draw(clone)] += 1
    return counts / n


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_inclusion_probabilities_match_the_selection_frequencies(name: str) -> None:
    contexts, mask = _problem()
    policy = _trained(name, contexts, mask)
    probs, method = policy.inclusion_probabilities(contexts, mask, BUDGET)
    assert method in PROPENSITY_METHODS
    assert probs.shape == (K,) and np.all(probs[~mask] == 0)
    np.testing.assert_allclose(probs.sum(), BUDGET)
    draws = 50 if method == "deterministic" else 2000  # one distinct slate to see, or many
    freq = _empirical(policy, lambda p: p.select(contexts, mask, BUDGET), draws)
    # exact: sampling error only (sd <= 0.011); Monte-Carlo (500 draws): both errors
    assert np.abs(freq - probs).max() < (0.035 if method != "monte_carlo" else 0.08)
    if method == "deterministic":
        assert set(np.unique(probs)) <= {0.0, 1.0}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_logging_propensities_does_not_change_the_slates(name: str) -> None:
    contexts, mask = _problem()
    logged_policy = _trained(name, contexts, mask)
    plain_policy = copy.deepcopy(logged_policy)
    for _ in range(5):
        logged = logged_policy.select_with_propensities(contexts, mask, BUDGET)
        np.testing.assert_array_equal(logged.arms, plain_policy.select(contexts, mask, BUDGET))
        assert np.all((logged.propensities > 0) & (logged.propensities <= 1))


def test_method_per_policy() -> None:
    contexts, mask = _problem()
    expected = {
        "random": "exact",
        "egreedy": "exact",
        "egreedy_neural": "exact",
        "lints": "monte_carlo",
        "linucb": "deterministic",
        "neural_ucb": "deterministic",
        "eenet": "deterministic",
    }
    for name, method in expected.items():
        assert (
            _trained(name, contexts, mask).select_with_propensities(contexts, mask, BUDGET).method
            == method
        )
    greedy = make_policy("egreedy", context_dim=D, epsilon=0.0)
    greedy.update(contexts[:3], np.array([0.1, 0.5, 0.9]))
    assert greedy.select_with_propensities(contexts, mask, BUDGET).deterministic


def test_epsilon_greedy_closed_form_small_case() -> None:
    # K = 3 arms, budget 1: greedy (prob 1 − ε) or a uniform draw over all 3 arms (ε)
    probs = epsilon_greedy_inclusion(np.array([0.9, 0.1, 0.5]), 1, 0.3)
    np.testing.assert_allclose(probs, [0.7 + 0.1, 0.1, 0.1])
    # ties share their ranks: two arms tied for best, budget 1, ε = 0 -> 1/2 each
    np.testing.assert_allclose(
        epsilon_greedy_inclusion(np.array([1.0, 1.0, 0.0]), 1, 0.0), [0.5, 0.5, 0.0]
    )
    np.testing.assert_allclose(
        top_k_inclusion(np.array([3.0, 2.0, 2.0, 2.0, 1.0]), 2), [1, 1 / 3, 1 / 3, 1 / 3, 0]
    )


@pytest.mark.parametrize(
    ("name", "whole_groups", "method"),
    [
        ("random", True, "exact"),  # equal allowed arms per group: exact by symmetry
        ("random", False, "monte_carlo"),
        ("egreedy", True, "monte_carlo"),
        ("linucb", False, "deterministic"),
    ],
)
def test_one_per_group_inclusion(name: str, whole_groups: bool, method: str) -> None:
    contexts, mask = _problem()
    groups = np.arange(K) // 3
    if whole_groups:
        mask = ~np.isin(groups, [0, 5])  # padding users: all their arms masked
    policy = _trained(name, contexts, mask)
    probs, got = one_per_group_inclusion(policy, contexts, mask, BUDGET, groups)
    assert got == method
    np.testing.assert_allclose(probs.sum(), BUDGET)
    freq = _empirical(
        policy, lambda p: select_one_per_group(p, contexts, mask, BUDGET, groups), 1500
    )
    assert np.abs(freq - probs).max() < (0.05 if method == "exact" else 0.08)


def test_baseline_policies_report_propensities() -> None:
    import gymnasium as gym

    import socialenv  # noqa: F401
    from baselines import make_policy as make_baseline

    env = gym.make("PolicySim-Rec-v0", num_users=150, rounds=2)
    obs, _ = env.reset(seed=0)
    mask = obs["action_mask"].astype(bool)
    methods = {}
    for name in ("popularity", "mmr", "origin"):
        policy = make_baseline(name, env, seed=0)
        probs, methods[name] = policy.inclusion_probabilities(obs["arms"], mask, 10)
        assert np.all(probs[~mask] == 0)
        np.testing.assert_allclose(probs.sum(), 0 if name == "origin" else 10)
    # popularity: a post's arms tie on engagement, so the cut splits a tie group
    assert methods == {"popularity": "exact", "mmr": "deterministic", "origin": "deterministic"}
    exposure = gym.make("PolicySim-Exposure-v0", num_users=150, rounds=2)
    obs, _ = exposure.reset(seed=0)
    policy = make_baseline("suppress_flagged", exposure, seed=0)
    logged = policy.select_with_propensities(obs["arms"], obs["action_mask"].astype(bool), 20)
    assert logged.method == "monte_carlo" and np.all(logged.propensities > 0)


# ------------------------------------------------------------------ estimators


def _synthetic_log(
    epsilon: float, rounds: int, seed: int
) -> tuple[LoggedRounds, np.ndarray, np.ndarray]:
    """Rounds of a logging ε-greedy on a linear Bernoulli bandit; returns the log, the
    (T, K) contexts' mean rewards, and the theta."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=D)
    logger = RoundLogger()
    policy = make_policy("egreedy", context_dim=D, epsilon=epsilon, seed=seed)
    means = []
    for t in range(rounds):
        if t % 20 == 0:
            logger.start_episode()
        contexts = rng.normal(size=(K, D)).astype(np.float32)
        mask = rng.random(K) > 0.1
        mean = 1 / (1 + np.exp(-(contexts @ theta)))
        logged = policy.select_with_propensities(contexts, mask, BUDGET)
        rewards = (rng.random(BUDGET) < mean[logged.arms]).astype(np.float32)
        policy.update(contexts[logged.arms], rewards)
        logger.add(
            contexts,
            mask,
            logged.arms,
            logged.propensities,
            logged.method,
            rewards,
            np.ones(BUDGET, bool),
        )
        means.append(mean)
    return logger.rounds(), np.asarray(means), theta


@pytest.mark.parametrize("target_name", ["random", "linucb"])
def test_estimators_recover_the_true_value(target_name: str) -> None:
    log, means, _ = _synthetic_log(epsilon=0.5, rounds=600, seed=0)
    target = make_policy(target_name, context_dim=D, seed=9)
    if target_name == "linucb":
        target.update(log.contexts[:50, 0].astype(np.float32), np.linspace(0, 1, 50))
    inclusion = target_inclusion(target, log)
    truth = float((inclusion * means).sum(axis=1).mean() / BUDGET)
    for name in ("ips", "snips", "dr"):
        est = estimate(inclusion, log, name)
        assert abs(est.value - truth) < max(2.5 * est.ci95, 0.02), (
            name,
            est.value,
            truth,
            est.ci95,
        )
    results = evaluate(target, log)
    assert set(results) == {"ips", "snips", "dr"}
    assert results["dr"].ci95 <= results["ips"].ci95 * 1.05  # the reward model removes variance


def test_estimators_on_the_logging_policy_itself_give_the_logged_mean() -> None:
    log, _, _ = _synthetic_log(epsilon=0.3, rounds=100, seed=1)
    weights_one = np.zeros(log.mask.shape)
    rows = np.repeat(np.arange(log.num_rounds), BUDGET)
    weights_one[rows, log.arms.ravel()] = log.propensities.ravel()
    logged_mean = float(log.rewards.sum(axis=1).mean() / BUDGET)
    assert estimate(weights_one, log, "ips").value == pytest.approx(logged_mean)


def test_one_episode_reports_no_interval() -> None:
    log, _, _ = _synthetic_log(epsilon=0.3, rounds=20, seed=4)  # 20 rounds: one episode
    assert len(np.unique(log.episode)) == 1
    results = evaluate(make_policy("random", context_dim=D, seed=0), log)
    for est in results.values():
        assert est.ci95 is None and np.isfinite(est.value)
        assert "n/a" in str(est)
    two, _, _ = _synthetic_log(epsilon=0.3, rounds=40, seed=4)
    assert all(
        est.ci95 is not None and est.ci95 > 0
        for est in evaluate(make_policy("random", context_dim=D, seed=0), two).values()
    )


def test_logged_rounds_round_trip_and_validation(tmp_path) -> None:
    log, _, _ = _synthetic_log(epsilon=0.2, rounds=30, seed=2)
    path = log.save(tmp_path / "logged_rounds.npz")
    back = LoggedRounds.load(tmp_path)
    np.testing.assert_array_equal(back.arms, log.arms)
    np.testing.assert_array_equal(back.method, log.method)
    both = LoggedRounds.concatenate([log, back])
    assert both.num_rounds == 60 and len(np.unique(both.episode)) == 2 * len(np.unique(log.episode))
    assert path.exists()
    bad = np.where(log.arms >= 0, 0.0, np.nan)
    with pytest.raises(ValueError, match="propensities"):
        LoggedRounds(
            log.contexts, log.mask, log.arms, bad, log.rewards, log.applied, log.episode, log.method
        )
    with pytest.raises(ValueError, match="estimator"):
        estimate(np.zeros(log.mask.shape), log, "direct")


def test_matches_obp_on_single_arm_slates() -> None:
    """Budget 1 is the classic contextual bandit: compare with the Open Bandit Pipeline."""
    obp_ope = pytest.importorskip("obp.ope")
    rng = np.random.default_rng(4)
    n, k = 400, 6
    contexts = rng.normal(size=(n, k, D)).astype(np.float32)
    arms = rng.integers(0, k, size=(n, 1))
    pscore = np.full((n, 1), 1.0 / k)
    rewards = rng.random((n, 1)).astype(np.float32)
    log = LoggedRounds(
        contexts,
        np.ones((n, k), bool),
        arms,
        pscore,
        rewards,
        np.ones((n, 1), bool),
        np.arange(n) // 40,
        np.full(n, "exact"),
    )
    target = rng.dirichlet(np.ones(k), size=n)
    q = rng.random((n, k))
    kwargs = {
        "reward": rewards[:, 0].astype(np.float64),
        "action": arms[:, 0],
        "pscore": pscore[:, 0],
        "action_dist": target[:, :, None],
    }
    ours = {
        name: estimate(target, log, name, reward_model=q).value for name in ("ips", "snips", "dr")
    }
    assert ours["ips"] == pytest.approx(
        obp_ope.InverseProbabilityWeighting().estimate_policy_value(**kwargs)
    )
    assert ours["snips"] == pytest.approx(
        obp_ope.SelfNormalizedInverseProbabilityWeighting().estimate_policy_value(**kwargs)
    )
    assert ours["dr"] == pytest.approx(
        obp_ope.DoublyRobust().estimate_policy_value(
            **kwargs, estimated_rewards_by_reg_model=q[:, :, None]
        )
    )


def test_run_folder_logs_the_rounds_and_keeps_the_trajectory(tmp_path) -> None:
    from policysim.runner import RunConfig, run

    common = {
        "env_id": "PolicySim-Rec-v0",
        "policy": "egreedy",
        "seeds": (0, 1),
        "env_kwargs": {
            "num_users": 150,
            "rounds": 3,
            "candidate_users": 8,
            "budget": 2,
            "reward": {"form": "paper"},
        },
        "plots": False,
        "progress": False,
    }
    logged = run(RunConfig(**common, out_dir=str(tmp_path), run_name="logged"))
    plain = run(
        RunConfig(**common, out_dir=str(tmp_path), run_name="plain", log_propensities=False)
    )
    assert [r["reward"] for r in logged.rows] == [r["reward"] for r in plain.rows]
    assert not (plain.out_dir / "logged_rounds.npz").exists()
    log = LoggedRounds.load(logged.out_dir)
    assert log.num_rounds == 6 and list(np.unique(log.episode)) == [0, 1]
    assert log.groups is not None  # at most `budget` arms per sampled user
    # Rec's step reward is the slate's slot rewards summed / slate size
    np.testing.assert_allclose(
        log.rewards.sum(axis=1) / log.budget, [r["reward"] for r in logged.rows], rtol=1e-5
    )
    assert set(log.method) == {"monte_carlo"}


# ------------------------------------------------------------------ per-user slates


def _group_frequencies(policy, contexts, mask, budget, groups, per_group, draws):
    """(K,) inclusion frequencies of select_per_group over ``draws`` slates of a copy of the
    policy, and the (draws, K) 0/1 slates."""
    from bandits.slate import select_per_group

    clone = copy.deepcopy(policy)
    slates = np.zeros((draws, len(contexts)))
    for i in range(draws):
        slates[i, select_per_group(clone, contexts, mask, budget, groups, per_group)] = 1
    return slates.mean(axis=0), slates


@pytest.mark.parametrize(
    ("env_id", "names"),
    [
        ("PolicySim-Rec-v0", ("random", "popularity", "mmr", "linucb")),
        ("PolicySim-Exposure-v0", ("random", "suppress_flagged", "linucb")),
    ],
)
def test_per_user_slate_propensities_of_the_ope_targets_are_closed_form(
    env_id: str, names: tuple
) -> None:
    """The targets of benchmarks/ope_estimators.py on env rounds: never Monte-Carlo, equal to the
    selection frequencies, and the policy's generator untouched (the slate afterwards is the
    one it would have picked)."""
    import gymnasium as gym

    import socialenv  # noqa: F401
    from bandits.slate import per_group_inclusion, select_per_group
    from baselines import make_policy as make_baseline
    from policysim.runner import select_action

    env = gym.make(env_id, num_users=150, rounds=3)
    base = env.unwrapped
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(select_action(make_baseline("random", env, seed=1), obs, env))
    mask, groups = obs["action_mask"].astype(bool), base.arm_groups()
    for name in names:
        policy = make_baseline(name, env, seed=2)
        plain = copy.deepcopy(policy)
        probs, method = per_group_inclusion(
            policy, obs["arms"], mask, base.slate_size, groups, base.per_user
        )
        assert method in ("exact", "deterministic"), name
        np.testing.assert_array_equal(
            select_per_group(policy, obs["arms"], mask, base.slate_size, groups, base.per_user),
            select_per_group(plain, obs["arms"], mask, base.slate_size, groups, base.per_user),
        )
        assert np.all(probs[~mask] == 0) and np.all(probs <= 1)
        capacity = np.minimum(np.bincount(groups[mask]), base.per_user).sum()
        np.testing.assert_allclose(probs.sum(), min(capacity, base.slate_size))
        freq, _ = _group_frequencies(
            policy,
            obs["arms"],
            mask,
            base.slate_size,
            groups,
            base.per_user,
            30 if method == "deterministic" else 400,
        )
        assert np.abs(freq - probs).max() < 0.09, name  # 400 draws: sd <= 0.025
        if method == "deterministic":
            np.testing.assert_array_equal(freq, probs)
    # a slate too small for every user's share: a deterministic ranking, generator untouched
    policy = make_baseline("linucb", env, seed=2)
    # untrained, LinUCB ties every arm (the contexts share one norm); one update breaks the ties
    policy.update(obs["arms"][mask][:20], np.linspace(0.0, 1.0, 20))
    state = copy.deepcopy(policy._rng.bit_generator.state)
    probs, method = per_group_inclusion(policy, obs["arms"], mask, 5, groups, base.per_user)
    assert method == "deterministic" and probs.sum() == 5
    assert policy._rng.bit_generator.state == state


def _mmr_round(duplicate: bool, near_tie: bool):
    """MMR on 4 users x 4 arms (Rec layout), interest similarity spread apart; optionally arm 1
    a second post with arm 0's text offered to the same user, or another post for that user
    as relevant as arm 0."""
    from baselines.policies import REC_FEATURES, ArmLayout, MMRPolicy

    layout = ArmLayout("rec", 3 * 2 + len(REC_FEATURES))
    rng = np.random.default_rng(5)
    contexts = rng.normal(size=(16, layout.context_dim)).astype(np.float32)
    contexts[:, layout.feature("interest_similarity")] = np.linspace(0.9, 0.1, 16)
    if duplicate:
        contexts[1, layout.post_embedding] = contexts[0, layout.post_embedding]
        contexts[1, layout.feature("interest_similarity")] = contexts[
            0, layout.feature("interest_similarity")
        ]
        contexts[1, layout.feature("author_stance")] = -contexts[0, layout.feature("author_stance")]
    if near_tie:
        contexts[1, layout.feature("interest_similarity")] = contexts[
            0, layout.feature("interest_similarity")
        ]
    return (
        MMRPolicy(context_dim=layout.context_dim, kind="rec", seed=4),
        contexts,
        np.repeat(np.arange(4), 4),
    )


def test_mmr_per_user_propensities_exact_with_exchangeable_arms() -> None:
    from bandits.slate import per_group_inclusion

    policy, contexts, groups = _mmr_round(duplicate=False, near_tie=False)
    probs, method = per_group_inclusion(policy, contexts, None, 8, groups, 2)
    assert method == "deterministic" and policy.is_deterministic(contexts)
    policy, contexts, groups = _mmr_round(duplicate=True, near_tie=False)
    labels = policy.exchangeable_arms(contexts)
    assert labels[0] == labels[1] and len(np.unique(labels)) == 15
    assert not policy.is_deterministic(contexts)  # the jitter decides which of the two
    state = copy.deepcopy(policy._rng.bit_generator.state)
    probs, method = per_group_inclusion(policy, contexts, None, 8, groups, 2)
    assert method == "exact" and policy._rng.bit_generator.state == state
    assert probs[0] == probs[1] == 0.5  # one of the two, each half the time
    freq, slates = _group_frequencies(policy, contexts, None, 8, groups, 2, 400)
    assert 0.4 < freq[0] < 0.6 and np.all(slates[:, 0] + slates[:, 1] == 1)
    np.testing.assert_array_equal(np.delete(freq, [0, 1]), np.delete(probs, [0, 1]))
    for budget in (1, 8):  # without caps: one of the two, or both (arm 1 comes back later)
        plain, method = policy.inclusion_probabilities(contexts, None, budget)
        assert plain[0] == plain[1] == (0.5 if budget == 1 else 1.0)
        freq = _empirical(policy, lambda p, b=budget: p.select(contexts, None, b), 400)[:16]
        assert np.abs(freq - plain).max() < 0.09


def test_mmr_near_tie_between_different_arms_falls_back_to_monte_carlo() -> None:
    from bandits.slate import per_group_inclusion

    policy, contexts, groups = _mmr_round(duplicate=False, near_tie=True)
    assert policy.exchangeable_arms(contexts)[0] != policy.exchangeable_arms(contexts)[1]
    assert policy.deterministic_select(contexts, None, 4) is None
    state = copy.deepcopy(policy._rng.bit_generator.state)
    probs, method = per_group_inclusion(policy, contexts, None, 4, groups, 1)
    assert method == "monte_carlo" and policy._rng.bit_generator.state == state
    assert 0.35 < probs[0] < 0.65 and probs[0] + probs[1] == 1  # the first user's one slot
    freq, _ = _group_frequencies(policy, contexts, None, 4, groups, 1, 400)
    assert np.abs(freq - probs).max() < 0.12


def test_a_label_shared_across_groups_is_not_spread() -> None:
    """Exchangeable arms of two users: which one is picked changes the users' caps, so the
    symmetric form does not apply."""
    from bandits.slate import deterministic_inclusion, select_per_group

    policy, contexts, groups = _mmr_round(duplicate=True, near_tie=False)
    groups = groups.copy()
    groups[1] = 3  # arm 1 now belongs to another user than arm 0
    allowed = np.ones(16, bool)
    assert (
        deterministic_inclusion(
            policy,
            contexts,
            allowed,
            groups,
            lambda p: select_per_group(p, contexts, allowed, 8, groups, 2),
        )
        is None
    )


def test_top_share_inclusion_small_case() -> None:
    from bandits.slate import top_share_inclusion

    scores = np.array([3.0, 2.0, 2.0, 2.0, 1.0, 5.0, 5.0, 0.0])
    group = np.array([0, 0, 0, 0, 0, 1, 1, 1])
    allowed = np.array([True] * 7 + [False])
    probs = top_share_inclusion(scores, allowed, group, np.array([2, 1]))
    np.testing.assert_allclose(probs, [1, 1 / 3, 1 / 3, 1 / 3, 0, 0.5, 0.5, 0])


def _with_member(
    path,
    out,
    name: str,
    array: np.ndarray | None = None,
    raw: bytes | None = None,
    drop: str | None = None,
):
    """Copy the npz at ``path`` to ``out`` with member ``name`` replaced/added (or ``drop`` removed)."""
    import io
    import zipfile

    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for member in src.namelist():
            if member not in (f"{name}.npy", f"{drop}.npy"):
                dst.writestr(member, src.read(member))
        if raw is None and array is not None:
            buf = io.BytesIO()
            np.save(buf, array)
            raw = buf.getvalue()
        if raw is not None:
            dst.writestr(f"{name}.npy", raw)
    return out


def test_logged_rounds_load_refuses_bad_members_before_reading(tmp_path) -> None:
    """Issue 21: unknown, missing, huge, bomb, truncated and NaN members are clear ValueErrors."""
    import io

    log, _, _ = _synthetic_log(0.3, 12, seed=1)
    path = log.save(tmp_path / "logged_rounds.npz")
    header = io.BytesIO()
    np.lib.format.write_array_header_2_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (10**7, 10**6, 1)}
    )
    cases = {
        "extra": (
            _with_member(path, tmp_path / "extra.npz", "payload", np.zeros(3)),
            r"unknown member\(s\) \['payload.npy'\]",
        ),
        "missing": (
            _with_member(path, tmp_path / "missing.npz", "x", drop="rewards"),
            "lacks 'rewards' \\(a required member\\)",
        ),
        "shape": (
            _with_member(path, tmp_path / "shape.npz", "rewards", np.zeros((3, 1), np.float32)),
            r"array 'rewards': shape \(3, 1\) is not allowed",
        ),
        "huge": (
            _with_member(path, tmp_path / "huge.npz", "contexts", raw=header.getvalue()),
            r"array 'contexts': its header declares shape \(10000000, 1000000, 1\)",
        ),
        "bomb": (
            _with_member(
                path, tmp_path / "bomb.npz", "contexts", np.zeros((12, 4_000, 400), np.float32)
            ),
            "refused as a zip bomb",
        ),
        "nan": (
            _with_member(
                path,
                tmp_path / "nan.npz",
                "rewards",
                np.full(log.rewards.shape, np.nan, np.float32),
            ),
            "rewards holds NaN",
        ),
        "method": (
            _with_member(
                path, tmp_path / "method.npz", "method", np.full(log.method.shape, "guess")
            ),
            r"method holds \['guess'\]: not allowed: one of",
        ),
    }
    for bad, why in cases.values():
        with pytest.raises(ValueError, match=why):
            LoggedRounds.load(bad)
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(ValueError, match="truncated.npz"):
        LoggedRounds.load(truncated)


def test_estimators_value_a_null_arm_target_with_its_empty_slots() -> None:
    """A target that leaves slots to its null arm is worth its arms' rewards plus the null
    reward for each slot it leaves empty; SNIPS normalises by the target's expected picks."""
    log, means, _ = _synthetic_log(epsilon=0.5, rounds=600, seed=2)
    target = make_policy("linucb", context_dim=D, seed=9, alpha=0.0, null_reward=0.85)
    picked = log.arms[:200] >= 0
    rows = np.nonzero(picked)[0]
    target.update(
        log.contexts[rows, log.arms[:200][picked]].astype(np.float32),
        log.rewards[:200][picked].astype(np.float64),
    )
    inclusion = target_inclusion(target, log)
    filled = inclusion.sum(axis=1)
    assert 0.2 * BUDGET < filled.mean() < 0.9 * BUDGET  # it does abstain, and not always
    truth = float((((inclusion * means).sum(axis=1) + 0.85 * (BUDGET - filled)) / BUDGET).mean())
    results = evaluate(target, log)
    for name, est in results.items():
        assert abs(est.value - truth) < max(2.5 * est.ci95, 0.02), (name, est.value, truth)
    without = estimate(inclusion, log, "ips")
    assert without.value < results["ips"].value - 0.05  # empty slots counted as 0 undervalue it
