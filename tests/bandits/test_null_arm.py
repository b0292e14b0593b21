"""The ridge policies' null arm (``null_reward``): leaving a slot to the env's default action
when no arm is expected to do better, with the propensities that selection has."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bandits import make_policy
from bandits.egreedy import epsilon_greedy_inclusion, epsilon_greedy_slate
from bandits.slate import per_group_inclusion, select_per_group

RIDGE = ("egreedy", "linucb", "lints")
DIM = 3


def two_kinds_of_arms(n: int = 12) -> np.ndarray:
    """(n, DIM) contexts: the first half "good" (feature 0 on), the second "bad" (feature 1)."""
    contexts = np.zeros((n, DIM), np.float32)
    contexts[: n // 2, 0] = 1.0
    contexts[n // 2 :, 1] = 1.0
    contexts[:, 2] = np.linspace(0.0, 0.1, n)
    return contexts


def trained(name: str, null_reward: float | None, **kwargs) -> object:
    """A policy that has seen good arms earn 0.8 and bad arms 0.2, 50 times each."""
    policy = make_policy(name, DIM, seed=3, null_reward=null_reward, **kwargs)
    contexts = two_kinds_of_arms()
    rewards = np.where(contexts[:, 0] > 0, 0.8, 0.2)
    for _ in range(50):
        policy.update(contexts, rewards)
    return policy


@pytest.mark.parametrize("name", RIDGE)
@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "half"])
def test_null_reward_is_validated_by_name(name, bad):
    with pytest.raises(ValueError, match="null_reward"):
        make_policy(name, DIM, null_reward=bad)


@pytest.mark.parametrize("name", RIDGE)
def test_untrained_policy_scores_every_arm_at_the_null_value_and_fills_the_slate(name):
    policy = make_policy(name, DIM, seed=0, null_reward=0.5, **_no_noise(name))
    contexts = two_kinds_of_arms()
    assert np.allclose(policy.scores(contexts), 0.5)
    assert len(policy.select(contexts, None, 6)) == 6


@pytest.mark.parametrize("name", RIDGE)
def test_scores_are_in_reward_units_after_learning(name):
    policy = trained(name, 0.5, **_no_noise(name))
    scores = policy.scores(two_kinds_of_arms())
    assert np.all(np.abs(scores[:6] - 0.8) < 0.05)
    assert np.all(np.abs(scores[6:] - 0.2) < 0.05)


@pytest.mark.parametrize("name", ("linucb", "lints"))
def test_arms_expected_below_the_null_arm_are_not_picked(name):
    policy = trained(name, 0.5, **_no_noise(name))
    picks = policy.select(two_kinds_of_arms(), None, 10)
    assert sorted(picks.tolist()) == list(range(6))
    without = trained(name, None, **_no_noise(name))
    assert len(without.select(two_kinds_of_arms(), None, 10)) == 10


def test_egreedy_leaves_greedy_slots_empty_but_keeps_exploring():
    policy = trained("egreedy", 0.5, epsilon=0.3)
    contexts = two_kinds_of_arms()
    lengths, bad_picks = [], 0
    for _ in range(400):
        picks = policy.select(contexts, None, 10)
        lengths.append(len(picks))
        bad_picks += int(np.sum(picks >= 6))
    assert min(lengths) == 6  # without exploration, greedy slots beyond the 6 good arms stay empty
    assert bad_picks > 0  # exploring slots still try the arms below the null arm


def test_egreedy_inclusion_with_a_floor_matches_the_slates_frequencies():
    rng = np.random.default_rng(0)
    scores = np.array([0.9, 0.7, 0.7, 0.6, 0.4, 0.3, 0.2, 0.1])
    budget, epsilon, floor = 4, 0.3, 0.5
    exact = epsilon_greedy_inclusion(scores, budget, epsilon, floor)
    counts = np.zeros(len(scores))
    draws = 40_000
    for _ in range(draws):
        counts[epsilon_greedy_slate(scores, budget, epsilon, rng, floor)] += 1
    assert np.allclose(counts / draws, exact, atol=0.01)
    assert np.all(exact[4:] < 0.3)  # below the floor: only when explored


@pytest.mark.parametrize("name", RIDGE)
def test_per_group_inclusion_matches_select_per_group_with_a_null_arm(name):
    """The propensities OPE logs are those of the slates the env gets, abstentions included."""
    policy = trained(name, 0.5, **({"epsilon": 0.2} if name == "egreedy" else {}))
    contexts = two_kinds_of_arms(12)
    groups = np.tile(np.arange(6), 2)  # every group: one good arm and one bad arm
    mask = np.ones(12, bool)
    probs, method = per_group_inclusion(policy, contexts, mask, 6, groups)
    counts = np.zeros(12)
    draws = 2_000
    for _ in range(draws):
        picks = select_per_group(policy, contexts, mask, 6, groups)
        assert len(set(picks.tolist())) == len(picks)
        counts[picks] += 1
    tolerance = 0.0 if method == "deterministic" else 0.06
    assert np.allclose(counts / draws, probs, atol=tolerance + 0.02), (method, probs)
    assert probs[6:].max() < 0.5  # bad arms: rarely or never, where they used to fill slots


def _no_noise(name: str) -> dict[str, float]:
    """Hyper-parameters that make the scores the ridge estimate (no bonus, sample or
    exploration) so that a test can read them."""
    return {
        "egreedy": {"epsilon": 0.0},
        "linucb": {"alpha": 0.0},
        "lints": {"posterior_scale": 0.0},
    }[name]


# ------------------------------------------------------- cost-constrained ε-greedy
def constrained(**kwargs) -> object:
    """A constrained ε-greedy that has seen good arms earn 0.8 at cost 0.3 (feature 0) and bad
    arms earn 0.6 at cost −0.1 (feature 1), 50 times each."""
    policy = make_policy("egreedy_constrained", DIM, seed=1, **kwargs)
    contexts = two_kinds_of_arms()
    good = contexts[:, 0] > 0
    for _ in range(50):
        policy.update(contexts, np.where(good, 0.8, 0.6), costs=np.where(good, 0.3, -0.1))
    return policy


def test_constrained_picks_only_arms_within_the_cost_limit():
    contexts = two_kinds_of_arms()
    policy = constrained(epsilon=0.0)
    assert np.array_equal(policy.eligible(contexts), contexts[:, 1] > 0)
    assert sorted(policy.select(contexts, None, 10).tolist()) == list(range(6, 12))
    loose = constrained(epsilon=0.0, cost_limit=1.0)  # every arm allowed: the rewarding ones
    assert sorted(loose.select(contexts, None, 6).tolist()) == list(range(6))


def test_constrained_explores_only_the_eligible_arms_with_exact_propensities():
    contexts = two_kinds_of_arms()
    policy = constrained(epsilon=0.5)
    probs, method = policy.inclusion_probabilities(contexts, None, 3)
    assert method == "exact" and np.all(probs[:6] == 0) and probs.sum() == pytest.approx(3)
    counts = np.zeros(12)
    for _ in range(4000):
        picks = policy.select(contexts, None, 3)
        assert np.all(picks >= 6)
        counts[picks] += 1
    np.testing.assert_allclose(counts / 4000, probs, atol=0.03)


def test_constrained_untrained_allows_every_arm_and_warns_once_without_costs():
    contexts = two_kinds_of_arms()
    policy = make_policy("egreedy_constrained", DIM, seed=0)
    assert policy.eligible(contexts).all()
    with pytest.warns(UserWarning, match="no costs"):
        policy.update(contexts, np.full(12, 0.5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy.update(contexts, np.full(12, 0.5))  # said once
    assert policy.eligible(contexts).all()  # the cost model learnt nothing


@pytest.mark.parametrize(
    "costs", [np.zeros(5), np.array([np.nan] * 12), np.array(["x"] * 12)], ids=str
)
def test_constrained_refuses_bad_costs_naming_them(costs):
    policy = make_policy("egreedy_constrained", DIM, seed=0)
    with pytest.raises(ValueError, match="costs"):
        policy.update(two_kinds_of_arms(), np.full(12, 0.5), costs=costs)
    assert policy.n_observations == 0  # refused before anything was learnt


def test_constrained_state_round_trip_keeps_the_cost_model():
    from bandits import ConstrainedEpsilonGreedy

    policy = constrained(epsilon=0.2)
    restored = ConstrainedEpsilonGreedy.from_state_dict(policy.state_dict())
    contexts = two_kinds_of_arms()
    assert np.array_equal(restored.eligible(contexts), policy.eligible(contexts))
    assert np.array_equal(restored.select(contexts, None, 4), policy.select(contexts, None, 4))
