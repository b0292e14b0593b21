"""Building blocks of the policies: batched gradients, pooling, Z, ridge, replay, synthetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bandits import EENet, LinUCB, NeuralUCB
from bandits.networks import (
    MLP,
    DiagonalGradientCovariance,
    GradientPooling,
    ReplayBuffer,
    gradient_factors,
    pooled_gradients_loop,
    pooled_gradients_vmap,
    torch_generator,
)
from bandits.ridge import OnlineRidge
from bandits.synthetic import SyntheticBandit, run_policy


def full_gradient(model: MLP, x: torch.Tensor) -> torch.Tensor:
    """The flattened gradient by one plain backward pass (the reference code's way)."""
    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        model(x).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


# (D, pool block size, hidden sizes): aligned (D % B == 0, the D = 800 case), unaligned,
# blocks wider than a row, deeper networks.
GEOMETRIES = [(40, 8, (16,)), (10, 4, (8,)), (13, 7, (5,)), (37, 50, (16, 8)), (6, 1000, (4,))]


@pytest.mark.parametrize(("dim", "block", "hidden"), GEOMETRIES)
def test_eenet_fast_vmap_and_per_arm_loop_give_the_same_scores(dim, block, hidden):
    rng = np.random.default_rng(0)
    contexts = rng.standard_normal((64, dim)).astype(np.float32)
    results = {}
    for method in ("factored", "vmap", "loop"):
        policy = EENet(
            dim,
            seed=3,
            hidden_sizes=hidden,
            pool_block_size=block,
            gradient_method=method,
            gradient_memory_mb=0.05,  # forces several chunks
            # the zero-output initialisation needs one hidden layer of even width
            initialization="symmetric" if len(hidden) == 1 and hidden[0] % 2 == 0 else "default",
        )
        policy.update(contexts[:8], np.linspace(0.0, 1.0, 8))
        values, pooled = policy.exploitation_and_gradient_features(contexts)
        results[method] = (values, pooled, policy.scores(contexts))
    for method in ("vmap", "loop"):
        for fast, reference in zip(results["factored"], results[method], strict=True):
            np.testing.assert_allclose(fast, reference, rtol=1e-5, atol=1e-6)


def test_pooled_gradient_is_the_block_mean_of_the_flat_gradient():
    model = MLP(13, (5,), torch_generator(0, 0))
    pooling = GradientPooling(model, block_size=7)
    contexts = torch.randn(9, 13)
    factors = gradient_factors(model, contexts, chunk_size=4)
    pooled = pooling.from_factors(contexts, factors)
    assert pooled.shape == (9, -(-model.n_parameters // 7))
    for row, x in enumerate(contexts):
        flat = full_gradient(model, x).numpy()
        padded = np.concatenate([flat, np.zeros(pooling.n_blocks * 7 - flat.size)])
        expected = padded.reshape(-1, 7).mean(1)  # skimage block_reduce(…, np.mean), cval 0
        np.testing.assert_allclose(pooled[row].numpy(), expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(factors.values.numpy(), model(contexts).detach().numpy(), rtol=1e-6)


def test_eenet_at_paper_size_has_51k_parameters_and_1027_pooled_inputs():
    policy = EENet(800)
    assert policy._exploitation.model.n_parameters == 800 * 64 + 64 + 64 + 1
    assert policy.n_exploration_inputs == 1027


def test_vmap_and_loop_references_agree_on_values():
    model = MLP(12, (6,), torch_generator(1, 0))
    pooling = GradientPooling(model, block_size=5)
    contexts = torch.randn(7, 12)
    values_v, pooled_v = pooled_gradients_vmap(model, pooling, contexts, chunk_size=3)
    values_l, pooled_l = pooled_gradients_loop(model, pooling, contexts)
    torch.testing.assert_close(values_v, values_l)
    torch.testing.assert_close(pooled_v, pooled_l)


def test_neural_ucb_diagonal_bonus_matches_the_full_gradient_formula():
    model = MLP(12, (7, 3), torch_generator(0, 1))
    covariance = DiagonalGradientCovariance(model, regularization=0.5)
    observed, candidates = torch.randn(5, 12), torch.randn(20, 12)
    covariance.add(observed, gradient_factors(model, observed, chunk_size=2))
    fast = covariance.gradient_norms(candidates, gradient_factors(model, candidates, chunk_size=6))
    z = 0.5 + sum(full_gradient(model, x) ** 2 for x in observed)
    naive = torch.stack([(full_gradient(model, x) ** 2 / z).sum() for x in candidates])
    torch.testing.assert_close(fast, naive, rtol=1e-5, atol=1e-6)


def test_neural_ucb_bonus_shrinks_where_data_was_seen():
    policy = NeuralUCB(4, exploration=1.0, train_steps=0)
    seen = np.tile(np.array([[1.0, 0.0, 0.0, 0.0]], np.float32), (30, 1))
    unseen = np.array([[0.0, 0.0, 0.0, 1.0]], np.float32)
    before = policy.scores(np.vstack([seen[:1], unseen]))
    policy.update(seen, np.full(30, 0.5))
    after = policy.scores(np.vstack([seen[:1], unseen]))
    assert after[0] - before[0] < after[1] - before[1]


def test_online_ridge_matches_the_closed_form():
    rng = np.random.default_rng(0)
    x, r = rng.standard_normal((50, 4)).astype(np.float32), rng.uniform(size=50)
    ridge = OnlineRidge(4, regularization=2.0, fit_intercept=True)
    ridge.update(x[:20], r[:20])
    ridge.update(x[20:], r[20:])
    design = np.hstack([x.astype(np.float64), np.ones((50, 1))])
    a = 2.0 * np.eye(5) + design.T @ design
    np.testing.assert_allclose(ridge.A_inv, np.linalg.inv(a), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(ridge.theta, np.linalg.solve(a, design.T @ r), rtol=1e-8)
    queries = rng.standard_normal((7, 4)).astype(np.float32)
    design_q = np.hstack([queries.astype(np.float64), np.ones((7, 1))])
    np.testing.assert_allclose(ridge.predict(queries), design_q @ ridge.theta, rtol=1e-5)
    expected = np.einsum("kd,de,ke->k", design_q, np.linalg.inv(a), design_q)
    np.testing.assert_allclose(ridge.variance(queries), expected, rtol=1e-4)


def test_linucb_explores_unseen_directions():
    policy = LinUCB(3, alpha=1.0, fit_intercept=False)
    policy.update(np.tile([[1.0, 0.0, 0.0]], (20, 1)), np.full(20, 0.6))
    scores = policy.scores(np.array([[1.0, 0, 0], [0, 1.0, 0]], np.float32))
    assert scores[1] > scores[0]  # 0 + bonus 1.0 beats ~0.6 + small bonus


def test_replay_buffer_keeps_the_latest_pairs():
    buffer = ReplayBuffer(feature_dim=2, capacity=5)
    for start in (0, 3, 6):
        rows = torch.arange(start, start + 3, dtype=torch.float32)
        buffer.add(rows[:, None].repeat(1, 2), rows)
    assert len(buffer) == 5
    inputs, targets = buffer.sample(batch_size=10, generator=torch_generator(0, 0))
    assert sorted(targets.tolist()) == [4.0, 5.0, 6.0, 7.0, 8.0]
    assert torch.equal(inputs[:, 0], targets)
    buffer.add(torch.zeros(7, 2), torch.zeros(7))  # larger than capacity: keep the last 5
    assert len(buffer) == 5 and buffer.sample(5, torch_generator(0, 0))[1].eq(0).all()


def test_synthetic_rewards_lie_in_unit_interval_with_the_stated_mean():
    for shape in ("linear", "cosine"):
        bandit = SyntheticBandit(context_dim=5, n_arms=50, reward=shape, noise=0.1, seed=3)
        contexts = np.vstack([bandit.sample_contexts() for _ in range(40)])
        np.testing.assert_allclose(np.linalg.norm(contexts, axis=1), 1.0, rtol=1e-6)
        mean = bandit.expected_rewards(contexts)
        assert mean.min() >= 0.1 and mean.max() <= 0.9
        draws = np.stack([bandit.sample_rewards(contexts) for _ in range(200)])
        assert draws.min() >= 0.0 and draws.max() <= 1.0
        assert np.abs(draws.mean(0) - mean).max() < 0.03


def test_synthetic_regret_is_zero_for_the_oracle_and_deterministic_per_seed():
    class Oracle(LinUCB):
        def _scores(self, contexts):
            return bandit.expected_rewards(contexts)

    bandit = SyntheticBandit(context_dim=4, n_arms=8, reward="cosine", seed=1)
    trace = run_policy(Oracle(4), bandit, n_rounds=30, budget=2)
    assert trace.cumulative_regret == pytest.approx(0.0, abs=1e-12)
    first = run_policy(LinUCB(4), SyntheticBandit(4, 8, seed=2), n_rounds=20)
    second = run_policy(LinUCB(4), SyntheticBandit(4, 8, seed=2), n_rounds=20)
    np.testing.assert_array_equal(first.regret, second.regret)


def test_synthetic_bandit_validates_its_fields():
    with pytest.raises(ValueError, match="reward"):
        SyntheticBandit(reward="quadratic")
    with pytest.raises(ValueError, match="noise"):
        SyntheticBandit(noise=0.2)
    with pytest.raises(ValueError, match="n_arms"):
        SyntheticBandit(n_arms=0)
