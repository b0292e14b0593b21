"""The interface contract every policy in ``bandits.POLICIES`` must honour."""

from __future__ import annotations

import ast
import dataclasses
import io
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bandits
from bandits import POLICIES, Policy, ScoredPolicy, make_policy
from tests.support import assert_same

DIM = 6
POLICY_NAMES = sorted(POLICIES)
HYPOTHESIS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True, scope="module")
def single_torch_thread():
    """Tiny networks gain nothing from threads, and a busy 2-core machine makes OpenMP
    barriers stall; one thread keeps the suite fast and its timings stable."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def random_round(rng: np.random.Generator, n_arms: int = 12) -> np.ndarray:
    return rng.standard_normal((n_arms, DIM)).astype(np.float32)


def play(policy: Policy, data_seed: int, n_rounds: int, budget: int = 3) -> list[np.ndarray]:
    """Run select/update rounds on data that depends only on ``data_seed``."""
    rng = np.random.default_rng(data_seed)
    picks = []
    for _ in range(n_rounds):
        contexts = random_round(rng)
        mask = rng.random(contexts.shape[0]) < 0.8
        mask[:budget] = True
        chosen = policy.select(contexts, mask, budget)
        picks.append(chosen)
        policy.update(contexts[chosen], rng.uniform(0.0, 1.0, size=budget))
    return picks


_TRAINED: dict[str, Policy] = {}


def trained_policy(name: str) -> Policy:
    """One policy per name that has learned from a few rounds (shared across examples)."""
    if name not in _TRAINED:
        policy = make_policy(name, DIM, seed=0)
        play(policy, data_seed=100, n_rounds=4)
        _TRAINED[name] = policy
    return _TRAINED[name]


@st.composite
def selection_problems(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray | None, int]:
    n_arms = draw(st.integers(1, 40))
    use_mask = draw(st.booleans())
    if use_mask:
        mask = np.array(draw(st.lists(st.booleans(), min_size=n_arms, max_size=n_arms)))
        if not mask.any():
            mask[draw(st.integers(0, n_arms - 1))] = True
        n_allowed = int(mask.sum())
    else:
        mask, n_allowed = None, n_arms
    budget = draw(st.integers(1, n_allowed))
    values = draw(
        st.lists(
            st.floats(-10.0, 10.0, allow_nan=False, width=32),
            min_size=n_arms * DIM,
            max_size=n_arms * DIM,
        )
    )
    contexts = np.array(values, dtype=np.float32).reshape(n_arms, DIM)
    return contexts, mask, budget


@pytest.mark.parametrize("name", POLICY_NAMES)
@HYPOTHESIS
@given(problem=selection_problems())
def test_select_returns_budget_distinct_allowed_arms(name, problem):
    contexts, mask, budget = problem
    contexts_before = contexts.copy()
    chosen = trained_policy(name).select(contexts, mask, budget)
    assert chosen.dtype == np.int64
    assert chosen.shape == (budget,)
    assert len(np.unique(chosen)) == budget
    assert np.all((chosen >= 0) & (chosen < contexts.shape[0]))
    if mask is not None:
        assert mask[chosen].all()
    np.testing.assert_array_equal(contexts, contexts_before)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_budget_equal_to_allowed_arms_picks_them_all(name):
    contexts = random_round(np.random.default_rng(1), n_arms=9)
    mask = np.zeros(9, dtype=bool)
    mask[[1, 4, 7]] = True
    chosen = trained_policy(name).select(contexts, mask, 3)
    assert sorted(chosen.tolist()) == [1, 4, 7]


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_budget_above_allowed_arms_raises_naming_budget_and_mask(name):
    contexts = random_round(np.random.default_rng(2), n_arms=5)
    mask = np.array([True, False, True, False, False])
    with pytest.raises(ValueError, match="budget.*mask"):
        trained_policy(name).select(contexts, mask, 3)
    with pytest.raises(ValueError, match="budget"):
        trained_policy(name).select(contexts, None, 6)


def assert_same_scores(first, second, seed: int, n_arms: int) -> None:
    """Two scored policies give bit-identical scores on a fresh round (others have none)."""
    if isinstance(first, ScoredPolicy):
        contexts = random_round(np.random.default_rng(seed), n_arms=n_arms)
        assert np.array_equal(first.scores(contexts), second.scores(contexts))


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_same_seed_same_selections_bit_for_bit(name):
    first, second = make_policy(name, DIM, seed=7), make_policy(name, DIM, seed=7)
    assert_same(play(first, data_seed=3, n_rounds=5), play(second, data_seed=3, n_rounds=5))
    assert_same_scores(first, second, seed=4, n_arms=50)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_policies_leave_global_rngs_alone(name):
    legacy_numpy_state = np.random.get_state()  # noqa: NPY002 - checking it is untouched
    torch_state = torch.get_rng_state()
    play(make_policy(name, DIM, seed=5), data_seed=5, n_rounds=2)
    assert torch.equal(torch.get_rng_state(), torch_state)
    after = np.random.get_state()  # noqa: NPY002
    assert np.array_equal(after[1], legacy_numpy_state[1]) and after[2] == legacy_numpy_state[2]


@pytest.mark.parametrize("name", POLICY_NAMES)
@pytest.mark.parametrize(
    "empty_contexts", [np.empty((0, DIM), np.float32), np.empty((0,)), []], ids=["0xD", "0", "list"]
)
def test_update_with_empty_batch_changes_nothing(name, empty_contexts):
    updated, untouched = make_policy(name, DIM, seed=2), make_policy(name, DIM, seed=2)
    play(updated, data_seed=9, n_rounds=2)
    play(untouched, data_seed=9, n_rounds=2)
    updated.update(empty_contexts, np.empty(0))
    assert updated.n_observations == untouched.n_observations
    assert_same(play(updated, data_seed=10, n_rounds=3), play(untouched, data_seed=10, n_rounds=3))


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_reset_restores_initial_behaviour(name):
    policy = make_policy(name, DIM, seed=11)
    initial = play(policy, data_seed=12, n_rounds=4)
    play(policy, data_seed=13, n_rounds=3)
    policy.reset()
    assert policy.n_observations == 0
    assert_same(play(policy, data_seed=12, n_rounds=4), initial)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_state_dict_round_trip_continues_identically(name):
    original = make_policy(name, DIM, seed=21)
    play(original, data_seed=22, n_rounds=4)
    snapshot = original.state_dict()
    continued = play(original, data_seed=23, n_rounds=4)  # must not alter the snapshot
    restored = type(original).from_state_dict(pickle.loads(pickle.dumps(snapshot)))
    assert restored.n_observations == 4 * 3
    assert_same(play(restored, data_seed=23, n_rounds=4), continued)
    assert_same_scores(original, restored, seed=24, n_arms=30)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_state_dict_survives_torch_save(name):
    policy = make_policy(name, DIM, seed=1)
    play(policy, data_seed=1, n_rounds=2)
    buffer = io.BytesIO()
    torch.save(policy.state_dict(), buffer)
    buffer.seek(0)
    restored = make_policy(name, DIM, seed=1)
    restored.load_state_dict(torch.load(buffer, weights_only=False))
    contexts = random_round(np.random.default_rng(2))
    np.testing.assert_array_equal(
        policy.select(contexts, None, 4), restored.select(contexts, None, 4)
    )


def test_load_state_dict_rejects_other_policies_and_hyperparameters():
    state = make_policy("linucb", DIM, seed=0).state_dict()
    with pytest.raises(ValueError, match="policy"):
        make_policy("lints", DIM, seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="alpha"):
        make_policy("linucb", DIM, seed=0, alpha=2.0).load_state_dict(state)
    with pytest.raises(ValueError, match="context_dim"):
        make_policy("linucb", DIM + 1, seed=0).load_state_dict(state)


BAD_SELECT_INPUTS = {
    "wrong context dim": (np.zeros((4, DIM + 1), np.float32), None, 1, "contexts"),
    "1-D contexts": (np.zeros(DIM, np.float32), None, 1, "contexts"),
    "NaN context": (np.where(np.eye(4, DIM) > 0, np.nan, 0.0), None, 1, "contexts"),
    "inf context": (np.full((4, DIM), np.inf), None, 1, "contexts"),
    "string contexts": (np.full((4, DIM), "a"), None, 1, "contexts"),
    "budget 0": (np.zeros((4, DIM), np.float32), None, 0, "budget"),
    "budget float": (np.zeros((4, DIM), np.float32), None, 1.5, "budget"),
    "budget bool": (np.zeros((4, DIM), np.float32), None, True, "budget"),
    "mask wrong length": (np.zeros((4, DIM), np.float32), np.ones(3, bool), 1, "mask"),
    "mask of ints": (np.zeros((4, DIM), np.float32), np.ones(4, int), 1, "mask"),
    "mask allows none": (np.zeros((4, DIM), np.float32), np.zeros(4, bool), 1, "budget"),
}


@pytest.mark.parametrize("name", POLICY_NAMES)
@pytest.mark.parametrize("case", sorted(BAD_SELECT_INPUTS))
def test_bad_select_input_names_the_field(name, case):
    contexts, mask, budget, field = BAD_SELECT_INPUTS[case]
    with pytest.raises(ValueError, match=field):
        make_policy(name, DIM).select(contexts, mask, budget)


BAD_UPDATE_INPUTS = {
    "reward above 1": (np.zeros((2, DIM)), np.array([0.5, 1.5]), "rewards"),
    "reward below 0": (np.zeros((2, DIM)), np.array([-0.1, 0.5]), "rewards"),
    "NaN reward": (np.zeros((2, DIM)), np.array([np.nan, 0.5]), "rewards"),
    "length mismatch": (np.zeros((2, DIM)), np.array([0.5]), "rewards"),
    "2-D rewards": (np.zeros((2, DIM)), np.full((2, 1), 0.5), "rewards"),
    "wrong context dim": (np.zeros((2, DIM - 1)), np.array([0.5, 0.5]), "contexts"),
    "NaN context": (np.full((2, DIM), np.nan), np.array([0.5, 0.5]), "contexts"),
    "rewards without contexts": (np.empty((0, DIM)), np.array([0.5]), "rewards"),
}


@pytest.mark.parametrize("name", POLICY_NAMES)
@pytest.mark.parametrize("case", sorted(BAD_UPDATE_INPUTS))
def test_bad_update_input_names_the_field_and_changes_nothing(name, case):
    contexts, rewards, field = BAD_UPDATE_INPUTS[case]
    policy = make_policy(name, DIM)
    with pytest.raises(ValueError, match=field):
        policy.update(contexts, rewards)
    assert policy.n_observations == 0


def invalid_value(value: object) -> object:
    """A value of the same kind as a field's default that no policy accepts."""
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, int):
        return -1
    if isinstance(value, float):
        return float("nan")
    if isinstance(value, tuple):
        return (0,)
    return "no-such-option"


@pytest.mark.parametrize(
    ("name", "field"),
    [
        (name, f.name)
        for name in POLICY_NAMES
        for f in dataclasses.fields(POLICIES[name])
        if f.name not in ("context_dim", "seed")
    ],
)
def test_every_hyperparameter_is_validated_by_name(name, field):
    default = POLICIES[name].__dataclass_fields__[field].default
    with pytest.raises(ValueError, match=field):
        make_policy(name, DIM, **{field: invalid_value(default)})


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_context_dim_and_seed_are_validated(name):
    with pytest.raises(ValueError, match="context_dim"):
        make_policy(name, 0)
    with pytest.raises(ValueError, match="seed"):
        make_policy(name, DIM, seed=-1)


def test_make_policy_lists_valid_names_and_hyperparameters():
    with pytest.raises(ValueError, match="eenet.*linucb.*random"):
        make_policy("ucb", DIM)
    with pytest.raises(ValueError, match="alpha"):
        make_policy("linucb", DIM, alhpa=1.0)
    assert set(POLICY_NAMES) == {
        "eenet",
        "neural_ucb",
        "linucb",
        "lints",
        "egreedy",
        "egreedy_constrained",
        "egreedy_neural",
        "random",
    }
    for name, cls in POLICIES.items():
        assert cls.name == name
        assert isinstance(make_policy(name, DIM), cls)


#: What ``bandits`` may use of ``agent_models``: the one validation template, the
#: optional-dependency helper and the bounded ``.npz`` reader (none imports anything of the
#: package's env side).
BANDITS_MAY_IMPORT = {"policysim_infra.validation", "policysim_infra.extras", "policysim_infra.npz"}


def test_bandits_package_does_not_import_socialenv():
    """No module of ``bandits`` imports the environment side (anywhere, even lazily), and its
    module-level imports are the standard library, NumPy, torch, ``bandits`` itself and
    :data:`BANDITS_MAY_IMPORT`."""
    package = Path(bandits.__file__).parent
    allowed_top_level = set(sys.stdlib_module_names) | {"bandits", "numpy", "torch"}
    for source in package.glob("*.py"):
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            for module in imported_modules(node):
                if module in BANDITS_MAY_IMPORT:
                    continue
                assert module.split(".")[0] not in {
                    "socialenv",
                    "agent_models",
                    "baselines",
                    "policysim",
                }, f"{source.name} imports {module}"
        for node in tree.body:
            for module in imported_modules(node):
                assert module.split(".")[0] in allowed_top_level or module in BANDITS_MAY_IMPORT, (
                    f"{source.name} imports {module}"
                )


def imported_modules(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return []
