"""The learnable graph encoder, the graph EE-Net, and one-arm-per-group slates."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from bandits.slate import select_one_per_group

pytest.importorskip("torch_geometric")

N_NODES, USER_DIM, TAIL_DIM, N_ARMS = 40, 6, 4, 12
CONTEXT_DIM = USER_DIM + TAIL_DIM


def random_graph(seed: int, arm_user: np.ndarray | None = None):
    """A Data like ``PolicySimEnv.graph_data()``: x (N, F), edge_index (2, E) without repeats
    or self-loops, stance (N,), arm_user (K,)."""
    from torch_geometric.data import Data

    rng = np.random.default_rng(seed)
    edges = {(int(a), int(b)) for a, b in rng.integers(0, N_NODES, (2, 160)).T if a != b}
    edge_index = torch.tensor(sorted(edges), dtype=torch.int64).T
    if arm_user is None:
        arm_user = np.repeat(rng.choice(N_NODES, N_ARMS // 3, replace=False), 3)
    return Data(
        x=torch.from_numpy(rng.standard_normal((N_NODES, USER_DIM)).astype(np.float32)),
        edge_index=edge_index,
        stance=torch.from_numpy(rng.uniform(-1, 1, N_NODES).astype(np.float32)),
        arm_user=torch.from_numpy(np.asarray(arm_user, np.int64)),
        num_nodes=N_NODES,
    )


def arm_contexts(graph, seed: int) -> np.ndarray:
    """(K, D): [a stand-in for the propagated user context | arm features]."""
    rng = np.random.default_rng(seed + 100)
    user = graph.arm_user.numpy()
    contexts = np.concatenate(
        [graph.x.numpy()[np.maximum(user, 0)], rng.standard_normal((len(user), TAIL_DIM))], axis=1
    ).astype(np.float32)
    contexts[user < 0] = 0.0
    return contexts


def make_policy(seed: int = 0, **kwargs):
    from bandits.graph_eenet import GraphEENet

    return GraphEENet(context_dim=CONTEXT_DIM, seed=seed, **kwargs)


def play(policy, n_rounds: int, budget: int = 3) -> tuple[list[np.ndarray], list[np.ndarray]]:
    picks, scores = [], []
    for t in range(n_rounds):
        graph = random_graph(t)
        contexts = arm_contexts(graph, t)
        policy.observe_graph(graph)
        scores.append(policy.scores(contexts))
        chosen = policy.select(contexts, None, budget)
        picks.append(chosen)
        rewards = np.random.default_rng(t).uniform(0, 1, budget)
        policy.update(contexts[chosen], rewards)
    return picks, scores


# ------------------------------------------------------------------------------ encoder


@pytest.mark.parametrize("conv", ["sage", "gcn"])
def test_encoder_shapes_and_neighbourhood_embedding_is_exact(conv: str) -> None:
    from bandits.graph import GraphContextEncoder, snapshot_from_data

    graph = random_graph(0)
    snapshot = snapshot_from_data(graph, use_stance=True)
    assert snapshot.x.shape == (N_NODES, USER_DIM + 1)
    encoder = GraphContextEncoder(
        USER_DIM + 1, USER_DIM, hidden_dim=16, conv=conv, generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        full = encoder(snapshot.x, snapshot.edge_index)
        assert full.shape == (N_NODES, USER_DIM)
        nodes = torch.tensor([3, 7, 7, 19])
        whole = encoder.embed(snapshot, nodes)
        local = encoder.embed(snapshot, nodes, full_graph_max_nodes=1)  # neighbourhood path
    assert whole.shape == (4, USER_DIM)
    torch.testing.assert_close(whole, full[nodes])
    torch.testing.assert_close(local, full[nodes], rtol=1e-5, atol=1e-5)


def test_encoder_matches_edge_index_message_passing() -> None:
    """The sparse-adjacency forward equals torch-geometric's own edge_index propagation."""
    from bandits.graph import GraphContextEncoder

    graph = random_graph(1)
    encoder = GraphContextEncoder(USER_DIM, 5, 8, "sage", torch.Generator().manual_seed(1))
    with torch.no_grad():
        hidden = torch.relu(encoder.conv1(graph.x, graph.edge_index))
        expected = encoder.conv2(hidden, graph.edge_index)
        torch.testing.assert_close(
            encoder(graph.x, graph.edge_index), expected, rtol=1e-5, atol=1e-6
        )


def test_encoder_rejects_bad_arguments() -> None:
    from bandits.graph import GraphContextEncoder

    with pytest.raises(ValueError, match="conv='gat' is not allowed: one of"):
        GraphContextEncoder(4, 4, conv="gat")
    with pytest.raises(ValueError, match="hidden_dim=0 is not allowed: an integer >= 1"):
        GraphContextEncoder(4, 4, hidden_dim=0)


# ------------------------------------------------------------------------------ policy


def test_graph_contexts_replace_the_user_columns_only() -> None:
    policy = make_policy()
    arm_user = np.array([5, 5, 9, 9, -1, 12], np.int64)
    graph = random_graph(0, arm_user)
    contexts = arm_contexts(graph, 0)
    policy.observe_graph(graph)
    replaced = policy.graph_contexts(contexts)
    assert replaced.shape == contexts.shape
    np.testing.assert_array_equal(
        replaced[arm_user >= 0, USER_DIM:], contexts[arm_user >= 0, USER_DIM:]
    )
    from bandits.graph import snapshot_from_data

    snapshot = snapshot_from_data(graph, use_stance=True)
    with torch.no_grad():
        embedding = policy.graph_encoder(snapshot.x, snapshot.edge_index).numpy()
    np.testing.assert_allclose(
        replaced[[0, 2, 5], :USER_DIM], embedding[[5, 9, 12]], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_array_equal(replaced[0, :USER_DIM], replaced[1, :USER_DIM])
    assert not replaced[4].any()  # padding arm
    mask = arm_user >= 0
    chosen = policy.select(contexts, mask, 2)
    assert len(set(chosen.tolist())) == 2 and mask[chosen].all()


def test_a_smaller_embedding_is_zero_padded() -> None:
    policy = make_policy(embedding_dim=2)
    graph = random_graph(0)
    contexts = arm_contexts(graph, 0)
    policy.observe_graph(graph)
    replaced = policy.graph_contexts(contexts)
    assert policy.graph_encoder.out_dim == 2
    assert replaced[:, :2].any() and not replaced[:, 2:USER_DIM].any()
    chosen = policy.select(contexts, None, 2)
    policy.update(contexts[chosen], np.array([0.2, 0.8]))
    with pytest.raises(ValueError, match=r"embedding_dim=\d+ is not allowed: None or an integer"):
        make_policy(embedding_dim=CONTEXT_DIM + 1)


def test_gradients_reach_the_encoder() -> None:
    policy = make_policy(train_steps=1)
    graph = random_graph(0)
    contexts = arm_contexts(graph, 0)
    policy.observe_graph(graph)
    before = {k: v.clone() for k, v in policy.graph_encoder.state_dict().items()}
    chosen = policy.select(contexts, None, 4)
    policy.update(contexts[chosen], np.array([1.0, 0.0, 1.0, 0.0]))
    for name, parameter in policy.graph_encoder.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
        assert not torch.equal(parameter.detach(), before[name]), name
    assert len(policy._replay) == 4


def test_deterministic_under_a_seed() -> None:
    picks_a, scores_a = play(make_policy(seed=3), 4)
    picks_b, scores_b = play(make_policy(seed=3), 4)
    for a, b in zip(picks_a, picks_b, strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(scores_a, scores_b, strict=True):
        np.testing.assert_array_equal(a, b)
    _, scores_c = play(make_policy(seed=4), 1)
    assert not np.array_equal(scores_a[0], scores_c[0])


def test_state_dict_resumes_exactly() -> None:
    from bandits.graph_eenet import GraphEENet

    policy = make_policy(seed=1)
    play(policy, 2)
    state = policy.state_dict()
    clone = GraphEENet.from_state_dict(state)
    graph = random_graph(9)
    contexts = arm_contexts(graph, 9)
    for p in (policy, clone):
        p.observe_graph(graph)
    np.testing.assert_array_equal(policy.scores(contexts), clone.scores(contexts))
    chosen = policy.select(contexts, None, 2)
    np.testing.assert_array_equal(chosen, clone.select(contexts, None, 2))
    for p in (policy, clone):
        p.update(contexts[chosen], np.array([0.3, 0.9]))
    np.testing.assert_array_equal(policy.scores(contexts), clone.scores(contexts))


def test_replay_is_bounded() -> None:
    policy = make_policy(buffer_size=5, snapshot_capacity=2)
    play(policy, 4, budget=3)
    assert len(policy._replay) <= 5 and len(policy._replay.snapshots) <= 2
    assert set(policy._replay.snapshot_id.tolist()) <= set(policy._replay.snapshots)


def test_errors_name_the_problem() -> None:
    policy = make_policy()
    graph = random_graph(0)
    contexts = arm_contexts(graph, 0)
    with pytest.raises(RuntimeError, match="observe_graph"):
        policy.select(contexts, None, 1)
    policy.observe_graph(graph)
    with pytest.raises(ValueError, match="arm_user has"):
        policy.select(contexts[:-1], None, 1)
    policy.select(contexts, None, 1)
    with pytest.raises(ValueError, match="not arms of the last observed round"):
        policy.update(contexts[:1] + 1.0, np.array([0.5]))
    with pytest.raises(ValueError, match="encoder='gat' is not allowed: one of"):
        make_policy(encoder="gat")
    from socialenv.envs.policy_registry import make_run_policy

    class Env:
        context_dim, no_op = CONTEXT_DIM, N_ARMS

    with pytest.raises(
        ValueError, match=r"hyperparameters=\['hidden'\] is not allowed: unknown hyper-parameter"
    ):
        make_run_policy("eenet_gnn", Env(), 0, hidden=3)


def test_bandits_import_neither_socialenv_nor_torch_geometric() -> None:
    code = (
        "import sys, bandits, bandits.graph, bandits.graph_eenet, bandits.slate; "
        "print('socialenv' in sys.modules, 'torch_geometric' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_runs_in_the_runner_on_rec() -> None:
    from policysim.runner import RunConfig, run
    from socialenv.envs.policy_registry import policy_names

    assert "eenet_gnn" in policy_names()
    result = run(
        RunConfig(
            env_id="PolicySim-Rec-v0",
            policy="eenet_gnn",
            seeds=(0,),
            env_kwargs={"num_users": 150, "rounds": 3, "candidate_users": 20, "budget": 2},
            out_dir=None,
            plots=False,
            progress=False,
        )
    )
    assert len(result.rows) == 3
    assert all(0.0 <= row["reward"] <= 1.0 for row in result.rows)


# ------------------------------------------------------------------------------ slates


class Ranked:
    """Picks the allowed arms with the largest fixed score; counts its calls."""

    def __init__(self, scores: np.ndarray) -> None:
        self.scores, self.calls = scores, 0

    def select(self, contexts, mask=None, budget=1):
        self.calls += 1
        score = np.where(mask, self.scores, -np.inf) if mask is not None else self.scores
        return np.argsort(-score, kind="stable")[:budget]


def test_one_arm_per_group_keeps_the_policy_order() -> None:
    groups = np.repeat(np.arange(4), 3)  # 4 users x 3 levels
    scores = np.array([9, 8, 7, 1, 0, 2, 6, 5, 4, 3, 3.5, 3.2])
    policy = Ranked(scores)
    picks = select_one_per_group(policy, np.zeros((12, 2)), None, 3, groups)
    np.testing.assert_array_equal(picks, [0, 6, 10])
    mask = np.ones(12, bool)
    mask[[0, 1, 2]] = False  # user 0 unavailable
    picks = select_one_per_group(Ranked(scores), np.zeros((12, 2)), mask, 5, groups)
    np.testing.assert_array_equal(picks, [6, 10, 5])  # only 3 users left


def test_one_arm_per_group_with_real_policies() -> None:
    from bandits import make_policy as make_bandit

    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(8), 5)
    contexts = rng.standard_normal((40, 5)).astype(np.float32)
    for name in ("linucb", "egreedy", "lints", "random", "eenet"):
        policy = make_bandit(name, context_dim=5, seed=0)
        picks = select_one_per_group(policy, contexts, None, 6, groups)
        assert len(picks) == 6 and len(np.unique(groups[picks])) == 6, name


def test_runner_exposure_slates_name_each_user_once() -> None:
    import gymnasium as gym

    import socialenv  # noqa: F401
    from socialenv.envs.policy_registry import arm_groups, make_run_policy, select_action

    env = gym.make("PolicySim-Exposure-v0", num_users=150, rounds=2, exposure_users=20)
    base = env.unwrapped
    obs, _ = env.reset(seed=0)
    policy = make_run_policy("linucb", base, 0)
    groups = arm_groups(env)
    levels = len(base.lever_config.exposure_levels)
    np.testing.assert_array_equal(groups, np.arange(base.num_arms) // levels)
    rec = gym.make(
        "PolicySim-Rec-v0", num_users=150, candidate_users=4, candidates={"interest": 2, "fresh": 1}
    )
    np.testing.assert_array_equal(arm_groups(rec), np.repeat(np.arange(4), 3))
    action = select_action(policy, obs, env)
    assert action.shape == (base.slate_size,) == (20,)
    filled = action[action != base.no_op]
    assert len(filled) == 20 and len(np.unique(groups[filled])) == 20  # every user named once
    _, _, _, _, info = env.step(action)
    assert info["invalid_arms"] == 0 and info["over_user_cap"] == 0 and info["arm_applied"].all()
    env.close()
