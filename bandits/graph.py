"""Learnable message passing over the follow graph (torch-geometric), for graph bandits.

PolicySim's arm context starts with the arm user's context propagated by fixed label
propagation (Eq. 8: C ← α·C + (1 − α)·D⁻¹A·C, K = 2 hops). :class:`GraphContextEncoder`
replaces that fixed operator by two trainable message-passing layers (GraphSAGE by default,
or GCN), in the spirit of the graph neural bandits the paper cites (e.g. GNB, Qi et al. 2023):
the encoder is trained end to end with the bandit's reward network.

Graphs come as :class:`GraphSnapshot` (node features and edges as tensors, independent of
``socialenv``); :func:`neighbourhood` cuts the part of a graph a 2-layer encoder reads for a
set of users, so that a policy stores only what it needs to recompute their embeddings.

``torch_geometric`` is imported inside the functions that need it (it takes seconds to import).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from policysim_infra.validation import check

ENCODERS = ("sage", "gcn")

#: Below this many edges, :func:`threads_for` runs the graph work on one torch thread: on a
#: busy 2-core machine a two-layer SAGE forward + backward on 5,000 nodes / 60,000 edges took
#: 19 ms on one thread and 300-660 ms on two (thread pools spin when the cores are shared).
SINGLE_THREAD_EDGES = 200_000


@contextmanager
def threads_for(num_edges: int) -> Iterator[None]:
    """Run what happens inside on one torch thread when the graph has fewer than
    :data:`SINGLE_THREAD_EDGES` edges (restoring the thread count afterwards)."""
    threads = torch.get_num_threads()
    small = num_edges < SINGLE_THREAD_EDGES and threads > 1
    if small:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if small:
            torch.set_num_threads(threads)


def adjacency_t(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """(N, N) sparse CSR A^T with A^T[i, j] = 1 for every edge j → i (repeated edges count
    once): the operand torch-geometric's convs aggregate with one sparse product, 2-3x
    faster on CPU than scattering over ``edge_index`` and deterministic."""
    indices = torch.stack([edge_index[1], edge_index[0]])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        warnings.filterwarnings("ignore", message="Sparse invariant checks")
        adjacency = torch.sparse_coo_tensor(
            indices, torch.ones(indices.shape[1]), (num_nodes, num_nodes), check_invariants=False
        ).coalesce()
        return torch.sparse_coo_tensor(
            adjacency.indices(),
            torch.ones(adjacency.indices().shape[1]),
            (num_nodes, num_nodes),
            is_coalesced=True,
            check_invariants=False,
        ).to_sparse_csr()


@dataclass
class GraphSnapshot:
    """A directed graph with node features.

    Attributes:
        x: (N, F) float32 node features.
        edge_index: (2, E) int64; messages flow from ``edge_index[0]`` to ``edge_index[1]``
            (PolicySim: followee → follower, so a user aggregates the accounts it reads).
    """

    x: torch.Tensor
    edge_index: torch.Tensor

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    def state(self) -> dict[str, torch.Tensor]:
        return {"x": self.x.clone(), "edge_index": self.edge_index.clone()}

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> GraphSnapshot:
        return cls(state["x"].clone(), state["edge_index"].clone())


def neighbourhood(
    graph: GraphSnapshot, nodes: torch.Tensor, hops: int
) -> tuple[GraphSnapshot, torch.Tensor]:
    """The ``hops``-hop in-neighbourhood of ``nodes`` (every node from which a message reaches
    them in ≤ hops steps) with all edges among those nodes, relabelled 0..M−1.

    Args:
        graph: the full graph (N nodes).
        nodes: (n,) int64 node ids (repeats allowed).
        hops: radius; a 2-layer GraphSAGE reads 2 hops exactly, a 2-layer GCN needs 3 for its
            degree normalisation to match the full graph.

    Returns:
        The subgraph (M nodes) and (n,) the position of each of ``nodes`` in it.
    """
    from torch_geometric.utils import k_hop_subgraph

    subset, edge_index, mapping, _ = k_hop_subgraph(
        nodes,
        hops,
        graph.edge_index,
        relabel_nodes=True,
        num_nodes=graph.num_nodes,
        flow="source_to_target",
    )
    return GraphSnapshot(graph.x[subset], edge_index), mapping


def disjoint_union(graphs: list[GraphSnapshot]) -> tuple[GraphSnapshot, torch.Tensor]:
    """One graph made of ``graphs`` side by side; returns it and (len(graphs),) the offset of
    each graph's node 0 in it."""
    sizes = torch.tensor([g.num_nodes for g in graphs], dtype=torch.int64)
    offsets = torch.cumsum(sizes, 0) - sizes
    x = torch.cat([g.x for g in graphs])
    edge_index = torch.cat(
        [g.edge_index + o for g, o in zip(graphs, offsets.tolist(), strict=True)], dim=1
    )
    return GraphSnapshot(x, edge_index), offsets


class GraphContextEncoder(nn.Module):
    """Two message-passing layers: (N, F) node features -> (N, out_dim) node embeddings.

        h = relu(conv1(x, E)),  z = conv2(h, E)

    conv = ``SAGEConv`` (mean aggregation of in-neighbours plus a root weight:
    W_r·x_i + W_n·mean_{j→i} x_j; Hamilton et al. 2017) or ``GCNConv`` (symmetric degree
    normalisation with self-loops; Kipf & Welling 2017). Weights are drawn
    U(−1/√fan_in, 1/√fan_in) and biases set to 0 from ``generator``, never from torch's
    global RNG, so the same generator state gives the same encoder.

    Args:
        in_dim: F, node feature length.
        out_dim: embedding length.
        hidden_dim: width of the hidden layer. Default 64.
        conv: "sage" or "gcn".
        generator: the ``torch.Generator`` the weights are drawn from.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden_dim: int = 64,
        conv: str = "sage",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        check(conv in ENCODERS, "conv", f"one of {ENCODERS}", conv)
        for name, value in (("in_dim", in_dim), ("out_dim", out_dim), ("hidden_dim", hidden_dim)):
            check(isinstance(value, int) and value >= 1, name, "an integer >= 1", value)
        from torch_geometric.nn import GCNConv, SAGEConv

        layer = SAGEConv if conv == "sage" else GCNConv
        self.conv = conv
        self.in_dim, self.out_dim, self.hidden_dim = in_dim, out_dim, hidden_dim
        self.conv1 = layer(in_dim, hidden_dim)
        self.conv2 = layer(hidden_dim, out_dim)
        generator = generator if generator is not None else torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, parameter in self.named_parameters():
                if parameter.dim() >= 2:
                    bound = 1.0 / math.sqrt(parameter.shape[1])
                    parameter.uniform_(-bound, bound, generator=generator)
                elif name.endswith("bias"):
                    parameter.zero_()

    @property
    def hops(self) -> int:
        """Radius of the neighbourhood the embedding of a node depends on, for
        :func:`neighbourhood` (GCN's degree normalisation reads one hop further)."""
        return 2 if self.conv == "sage" else 3

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """x (N, in_dim), edge_index (2, E) -> (N, out_dim). The graph is taken as simple:
        a repeated edge counts once."""
        adjacency = adjacency_t(edge_index, x.shape[0])
        with warnings.catch_warnings():  # GCN's normalisation rebuilds a CSR tensor
            warnings.filterwarnings("ignore", message="Sparse invariant checks")
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            hidden = torch.relu(self.conv1(x, adjacency))
            return self.conv2(hidden, adjacency)

    def embed(
        self, graph: GraphSnapshot, nodes: torch.Tensor, full_graph_max_nodes: int = 20_000
    ) -> torch.Tensor:
        """(n,) node ids -> (n, out_dim) embeddings, computed on the whole graph when it has at
        most ``full_graph_max_nodes`` nodes, else on the nodes' :func:`neighbourhood` (same
        values, cost independent of N)."""
        if graph.num_nodes <= full_graph_max_nodes:
            return self(graph.x, graph.edge_index)[nodes]
        sub, position = neighbourhood(graph, nodes, self.hops)
        return self(sub.x, sub.edge_index)[position]


def snapshot_from_data(data: Any, use_stance: bool) -> GraphSnapshot:
    """A :class:`GraphSnapshot` from a ``torch_geometric.data.Data`` with ``x`` (N, F) and
    ``edge_index`` (2, E); with ``use_stance`` and a ``stance`` (N,) attribute, the stance is
    appended as node feature F + 1."""
    x = torch.as_tensor(data.x, dtype=torch.float32)
    if x.dim() != 2:
        raise ValueError(f"graph.x must have shape (N, F); got {tuple(x.shape)}")
    edge_index = torch.as_tensor(data.edge_index, dtype=torch.int64)
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"graph.edge_index must have shape (2, E); got {tuple(edge_index.shape)}")
    if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= x.shape[0]):
        raise ValueError(f"graph.edge_index refers to nodes outside 0..{x.shape[0] - 1}")
    if use_stance:
        stance = getattr(data, "stance", None)
        if stance is None:
            raise ValueError("use_stance=True needs a graph with a 'stance' (N,) attribute")
        x = torch.cat([x, torch.as_tensor(stance, dtype=torch.float32).reshape(-1, 1)], dim=1)
    return GraphSnapshot(x.contiguous(), edge_index.contiguous())
