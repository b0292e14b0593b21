"""EE-Net on learned graph contexts: the fixed label propagation of the arm user's context
(PolicySim Eq. 8) replaced by a :class:`bandits.graph.GraphContextEncoder` trained end to end
with EE-Net's exploitation network."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from numbers import Integral
from typing import Any, ClassVar

import numpy as np
import torch

from bandits._checks import check_bool, check_choice, check_float, check_int
from bandits.eenet import EENet
from bandits.graph import (
    ENCODERS,
    GraphContextEncoder,
    GraphSnapshot,
    disjoint_union,
    neighbourhood,
    snapshot_from_data,
    threads_for,
)
from bandits.networks import to_tensor, torch_generator
from policysim_infra.validation import check


class GraphReplay:
    """Bounded replay of graph-bandit observations.

    An observation is (round snapshot, node of the arm user in it, the rest of the arm context
    (T,), reward). A round's snapshot is the neighbourhood of that round's updated users (what
    the encoder reads to embed them), shared by the round's observations. At most
    ``capacity`` observations and ``snapshot_capacity`` snapshots are kept; the oldest go
    first, together with the observations that refer to them.
    """

    def __init__(self, tail_dim: int, capacity: int, snapshot_capacity: int) -> None:
        self.capacity, self.snapshot_capacity = capacity, snapshot_capacity
        self.snapshots: dict[int, GraphSnapshot] = {}
        self.snapshot_id = torch.zeros(0, dtype=torch.int64)
        self.node = torch.zeros(0, dtype=torch.int64)
        self.tail = torch.zeros(0, tail_dim)
        self.reward = torch.zeros(0)
        self._next_id = 0

    def __len__(self) -> int:
        return int(self.reward.shape[0])

    def add_round(
        self, snapshot: GraphSnapshot, node: torch.Tensor, tail: torch.Tensor, reward: torch.Tensor
    ) -> None:
        """node (n,) positions in ``snapshot``, tail (n, T), reward (n,)."""
        sid = self._next_id
        self._next_id += 1
        self.snapshots[sid] = snapshot
        self.snapshot_id = torch.cat([self.snapshot_id, torch.full((len(node),), sid)])
        self.node = torch.cat([self.node, node])
        self.tail = torch.cat([self.tail, tail])
        self.reward = torch.cat([self.reward, reward])
        keep = torch.ones(len(self), dtype=torch.bool)
        keep[: max(0, len(self) - self.capacity)] = False
        while len(self.snapshots) > self.snapshot_capacity:
            oldest = min(self.snapshots)
            del self.snapshots[oldest]
            keep &= self.snapshot_id != oldest
        self._keep(keep)
        referenced = set(self.snapshot_id.tolist())
        for stale in [s for s in self.snapshots if s not in referenced]:
            del self.snapshots[stale]

    def _keep(self, keep: torch.Tensor) -> None:
        self.snapshot_id, self.node = self.snapshot_id[keep], self.node[keep]
        self.tail, self.reward = self.tail[keep], self.reward[keep]

    def sample(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """Row indices: all rows if at most ``batch_size``, else ``batch_size`` drawn with
        replacement."""
        if len(self) <= batch_size:
            return torch.arange(len(self))
        return torch.randint(len(self), (batch_size,), generator=generator)

    def batch_graph(self, rows: torch.Tensor, hops: int) -> tuple[GraphSnapshot, torch.Tensor]:
        """The disjoint union of the ``hops``-neighbourhoods of the users of ``rows`` in their
        snapshots, and (len(rows),) each row's user's node in it."""
        ids = self.snapshot_id[rows]
        distinct = torch.unique(ids)
        parts, positions = [], torch.empty(len(rows), dtype=torch.int64)
        for sid in distinct.tolist():
            here = torch.nonzero(ids == sid).reshape(-1)
            sub, position = neighbourhood(self.snapshots[sid], self.node[rows[here]], hops)
            parts.append((here, sub, position))
        union, offsets = disjoint_union([sub for _, sub, _ in parts])
        for (here, _, position), offset in zip(parts, offsets.tolist(), strict=True):
            positions[here] = position + offset
        return union, positions

    def state(self) -> dict[str, Any]:
        return {
            "snapshots": {sid: g.state() for sid, g in self.snapshots.items()},
            "snapshot_id": self.snapshot_id.clone(),
            "node": self.node.clone(),
            "tail": self.tail.clone(),
            "reward": self.reward.clone(),
            "next_id": self._next_id,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.snapshots = {
            int(s): GraphSnapshot.from_state(g) for s, g in state["snapshots"].items()
        }
        self.snapshot_id, self.node = state["snapshot_id"].clone(), state["node"].clone()
        self.tail, self.reward = state["tail"].clone(), state["reward"].clone()
        self._next_id = int(state["next_id"])


@dataclass(eq=False)
class GraphEENet(EENet):
    """EE-Net whose arm-user context is a learned graph embedding (registered "eenet_gnn").

    Round protocol (the runner does this)::

        policy.observe_graph(env.unwrapped.graph_data())   # x (N, F), edge_index, arm_user (K,)
        chosen = policy.select(contexts, mask, budget)     # contexts (K, D)
        policy.update(contexts[chosen], rewards)

    The first F columns of each arm context (F = ``graph.x.shape[1]``: the arm user's
    label-propagated context, Eq. 8) are replaced by z_u = encoder(graph)[u] for the arm's user
    u = ``graph.arm_user[k]`` (e = ``embedding_dim`` columns, zero-padded to F); the other
    D − F columns are kept. EE-Net then runs unchanged on
    x' = [z_u ⊕ x[F:]]: f1(x') estimates the reward; f2 reads the pooled gradient of f1 with
    respect to f1's parameters at x' (the encoder output is f1's input) and predicts
    r − f1(x') + 1; score = f1 + exploration_weight·(f2 − 1).

    Training after each ``update``: f1 and the encoder take ``train_steps`` joint Adam steps on
    mini-batches of ``batch_size`` replayed observations, each re-embedded from the graph of
    its own round (stored as the neighbourhood of that round's updated users, bounded by
    ``snapshot_capacity`` rounds and ``buffer_size`` observations), so the gradient of the
    squared error reaches the encoder; f2 trains as in :class:`bandits.eenet.EENet`.

    ``update`` must come after the ``observe_graph`` / ``select`` of the round whose arms it
    scores: its context rows are matched to that observation's arms to find their users.

    Attributes (besides :class:`bandits.eenet.EENet`'s):
        encoder: "sage" (GraphSAGE, mean aggregation) or "gcn". Default "sage".
        encoder_hidden: the encoder's hidden width. Default 64.
        encoder_learning_rate: Adam step size of the encoder. Default 1e-3.
        use_stance: append the users' smoothed stance S (``graph.stance``) to the node
            features, so the encoder can aggregate the stance of the accounts a user reads.
            Default True.
        user_context_dim: F, the number of leading context columns replaced; None (default)
            takes ``graph.x.shape[1]`` from the first ``observe_graph``.
        embedding_dim: e <= F, the encoder's output width: the first e of the F columns hold
            the embedding and the other F − e are set to 0 (f1's input keeps length D). None
            (default) = F. A small e gives f1 fewer user columns to fit from few rewards.
        snapshot_capacity: rounds of graph snapshots kept for replay. Default 50.
        full_graph_max_nodes: at scoring time the encoder runs on the whole graph up to this
            many nodes, else on the arm users' neighbourhood (same values). Default 20,000.
    """

    encoder: str = "sage"
    encoder_hidden: int = 64
    encoder_learning_rate: float = 1e-3
    use_stance: bool = True
    user_context_dim: int | None = None
    embedding_dim: int | None = None
    snapshot_capacity: int = 50
    full_graph_max_nodes: int = 20_000

    name: ClassVar[str] = "eenet_gnn"

    def _check_hyperparameters(self) -> None:
        super()._check_hyperparameters()
        check_choice(self, "encoder", ENCODERS)
        check_int(self, "encoder_hidden", minimum=1)
        check_float(self, "encoder_learning_rate", minimum=0.0, exclusive_minimum=True)
        check_bool(self, "use_stance")
        if self.user_context_dim is not None:
            value = self.user_context_dim
            check(
                not isinstance(value, bool)
                and isinstance(value, Integral)
                and 1 <= value <= self.context_dim,
                "user_context_dim",
                f"None or an integer in [1, context_dim={self.context_dim}]",
                value,
            )
            self.user_context_dim = int(value)
        if self.embedding_dim is not None:
            value, bound = self.embedding_dim, self.user_context_dim or self.context_dim
            check(
                not isinstance(value, bool) and isinstance(value, Integral) and 1 <= value <= bound,
                "embedding_dim",
                f"None or an integer in [1, {bound}] (at most the user_context_dim)",
                value,
            )
            self.embedding_dim = int(value)
        check_int(self, "snapshot_capacity", minimum=1)
        check_int(self, "full_graph_max_nodes", minimum=1)

    # ------------------------------------------------------------------ state

    def _reset(self) -> None:
        super()._reset()
        self._graph: GraphSnapshot | None = None
        self._arm_user: torch.Tensor | None = None
        self._embedding: torch.Tensor | None = None
        self._observed_rows: dict[bytes, int] = {}
        self._graph_encoder: GraphContextEncoder | None = None
        self._joint_optimizer: torch.optim.Optimizer | None = None
        self._replay: GraphReplay | None = None
        self._user_dim: int | None = None
        self._embedding_dim: int | None = None
        if self.user_context_dim is not None:
            self._build_encoder(self.user_context_dim)

    def _build_encoder(self, user_dim: int) -> None:
        """The encoder (F + use_stance -> e), its joint optimiser with f1 and the replay."""
        if self.embedding_dim is not None and self.embedding_dim > user_dim:
            raise ValueError(
                f"embedding_dim={self.embedding_dim} exceeds the {user_dim} user-context columns"
            )
        self._user_dim = user_dim
        self._embedding_dim = self.embedding_dim or user_dim
        self._graph_encoder = GraphContextEncoder(
            user_dim + int(self.use_stance),
            self._embedding_dim,
            self.encoder_hidden,
            self.encoder,
            torch_generator(self.seed, 3),
        )
        self._joint_optimizer = torch.optim.Adam(
            [
                {"params": list(self._exploitation.model.parameters()), "lr": self.learning_rate},
                {
                    "params": list(self._graph_encoder.parameters()),
                    "lr": self.encoder_learning_rate,
                },
            ]
        )
        self._replay = GraphReplay(
            self.context_dim - user_dim, self.buffer_size, self.snapshot_capacity
        )

    @property
    def graph_encoder(self) -> GraphContextEncoder | None:
        """The encoder (None until the first ``observe_graph`` when user_context_dim is None)."""
        return self._graph_encoder

    # ------------------------------------------------------------------ graph input

    def observe_graph(self, graph: Any) -> None:
        """Take the current follow graph: a ``torch_geometric.data.Data`` (or any object) with
        ``x`` (N, F), ``edge_index`` (2, E) (followee → follower), ``arm_user`` (K,) (the user of
        each arm of the coming ``select``, −1 for padding) and, with ``use_stance``,
        ``stance`` (N,)."""
        snapshot = snapshot_from_data(graph, self.use_stance)
        user_dim = snapshot.x.shape[1] - int(self.use_stance)
        if self._graph_encoder is None:
            if user_dim > self.context_dim:
                raise ValueError(
                    f"graph.x has {user_dim} features per node, more than context_dim="
                    f"{self.context_dim} columns to replace"
                )
            self._build_encoder(user_dim)
        elif user_dim != self._user_dim:
            raise ValueError(
                f"graph.x must have {self._user_dim} features per node; got {user_dim}"
            )
        arm_user = torch.as_tensor(np.asarray(graph.arm_user), dtype=torch.int64).reshape(-1)
        if arm_user.numel() and int(arm_user.max()) >= snapshot.num_nodes:
            raise ValueError(f"graph.arm_user refers to nodes outside 0..{snapshot.num_nodes - 1}")
        self._graph, self._arm_user = snapshot, arm_user
        self._embedding = None
        self._observed_rows = {}

    def _current_embedding(self) -> torch.Tensor:
        """(K, F) encoder embedding of each arm's user in the observed graph, zero-padded from e
        to F columns (0 for padding arms)."""
        if self._embedding is None:
            assert self._graph is not None and self._arm_user is not None
            assert self._graph_encoder is not None
            valid = self._arm_user >= 0
            embedding = torch.zeros(len(self._arm_user), self._user_dim or 0)
            if valid.any():
                with torch.no_grad(), threads_for(self._graph.edge_index.shape[1]):
                    embedding[valid, : self._embedding_dim] = self._graph_encoder.embed(
                        self._graph, self._arm_user[valid], self.full_graph_max_nodes
                    )
            self._embedding = embedding
        return self._embedding

    def graph_contexts(self, contexts: np.ndarray) -> np.ndarray:
        """(K, D) arm contexts of the observed round -> (K, D) with the first F columns replaced
        by the encoder's embedding of each arm's user (what f1 and f2 see)."""
        if self._graph is None or self._arm_user is None:
            raise RuntimeError(
                f"{type(self).__name__} needs the graph: call observe_graph(graph) before "
                "select / scores (the runner does it each round)"
            )
        contexts = self._validated_contexts(contexts, "contexts")
        if contexts.shape[0] != len(self._arm_user):
            raise ValueError(
                f"contexts have {contexts.shape[0]} arms but the observed graph's arm_user has "
                f"{len(self._arm_user)}"
            )
        if not self._observed_rows:
            self._observed_rows = {row.tobytes(): k for k, row in enumerate(contexts)}
        out = contexts.copy()
        out[:, : self._user_dim] = self._current_embedding().numpy()
        out[self._arm_user.numpy() < 0] = 0.0
        return out

    # ------------------------------------------------------------------ policy API

    def select(
        self, contexts: np.ndarray, mask: np.ndarray | None = None, budget: int = 1
    ) -> np.ndarray:
        """As :meth:`bandits.base.Policy.select`, on the graph contexts of the observed round."""
        with threads_for(self._graph.edge_index.shape[1] if self._graph is not None else 0):
            return super().select(self.graph_contexts(contexts), mask, budget)

    def inclusion_probabilities(
        self, contexts: np.ndarray, mask: np.ndarray | None = None, budget: int = 1
    ) -> tuple[np.ndarray, str]:
        """As :meth:`bandits.base.Policy.inclusion_probabilities`, on the graph contexts."""
        with threads_for(self._graph.edge_index.shape[1] if self._graph is not None else 0):
            return super().inclusion_probabilities(self.graph_contexts(contexts), mask, budget)

    def is_deterministic(self, contexts: np.ndarray, mask: np.ndarray | None = None) -> bool:
        """As :meth:`bandits.base.Policy.is_deterministic`, on the graph contexts."""
        return super().is_deterministic(self.graph_contexts(contexts), mask)

    def deterministic_select(
        self, contexts: np.ndarray, mask: np.ndarray | None = None, budget: int = 1
    ) -> np.ndarray | None:
        """As :meth:`bandits.base.Policy.deterministic_select`, on the graph contexts."""
        return super().deterministic_select(self.graph_contexts(contexts), mask, budget)

    def scores(self, contexts: np.ndarray) -> np.ndarray:
        """(K, D) raw arm contexts of the observed round -> (K,) EE-Net scores."""
        return self._scores(self.graph_contexts(contexts))

    def exploitation_and_gradient_features(
        self, contexts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`EENet.exploitation_and_gradient_features`, on the graph contexts."""
        return super().exploitation_and_gradient_features(self.graph_contexts(contexts))

    def _arms_of(self, contexts: np.ndarray) -> torch.Tensor:
        """(n,) positions in the observed round of the (n, D) raw context rows."""
        if not self._observed_rows and self._graph is not None:
            raise RuntimeError("update() before select(): select the round's arms first")
        missing = [i for i, row in enumerate(contexts) if row.tobytes() not in self._observed_rows]
        if missing:
            raise ValueError(
                f"update() got context rows {missing[:5]} that are not arms of the last observed "
                "round; a graph policy learns only from the arms of the round it just observed"
            )
        return torch.tensor(
            [self._observed_rows[row.tobytes()] for row in contexts], dtype=torch.int64
        )

    def _update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        with threads_for(self._graph.edge_index.shape[1] if self._graph is not None else 0):
            self._update_on_graph(contexts, rewards)

    def _update_on_graph(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        arms = self._arms_of(contexts)
        users = self._arm_user[arms]
        if (users < 0).any():
            raise ValueError("update() got padding arms (arm_user = -1)")
        targets = torch.from_numpy(rewards.astype(np.float32))
        inputs = to_tensor(contexts).clone()
        inputs[:, : self._user_dim] = self._current_embedding()[arms]
        with torch.no_grad():
            values, pooled = self._features(inputs)
        self._exploration.buffer.add(pooled, targets - values + 1.0)
        distinct, inverse = torch.unique(users, return_inverse=True)
        sub, position = neighbourhood(self._graph, distinct, self._graph_encoder.hops)
        self._replay.add_round(sub, position[inverse], inputs[:, self._user_dim :].clone(), targets)
        self._fit_exploitation()
        self._exploration.fit(self.train_steps, self.batch_size, self._generator)
        self._embedding = None

    def _fit_exploitation(self) -> float:
        """``train_steps`` joint Adam steps of f1 and the encoder; the last mini-batch loss."""
        loss_value = float("nan")
        model, encoder = self._exploitation.model, self._graph_encoder
        with torch.enable_grad():
            for _ in range(self.train_steps):
                rows = self._replay.sample(self.batch_size, self._generator)
                union, node = self._replay.batch_graph(rows, encoder.hops)
                self._joint_optimizer.zero_grad(set_to_none=True)
                embedding = encoder(union.x, union.edge_index)[node]
                padding = torch.zeros(len(rows), self._user_dim - self._embedding_dim)
                inputs = torch.cat([embedding, padding, self._replay.tail[rows]], dim=1)
                loss = torch.mean((model(inputs) - self._replay.reward[rows]) ** 2)
                loss.backward()
                self._joint_optimizer.step()
                loss_value = loss.item()
        return loss_value

    # ------------------------------------------------------------------ persistence

    def _state(self) -> dict[str, Any]:
        state = super()._state()
        built = self._graph_encoder is not None
        state["graph"] = {
            "user_dim": self._user_dim,
            "encoder": {k: v.detach().clone() for k, v in self._graph_encoder.state_dict().items()}
            if built
            else None,
            "optimizer": copy.deepcopy(self._joint_optimizer.state_dict()) if built else None,
            "replay": self._replay.state() if built else None,
            "observed": None
            if self._graph is None
            else {
                "graph": self._graph.state(),
                "arm_user": self._arm_user.clone(),
                "rows": dict(self._observed_rows),
            },
        }
        return state

    def _load_state(self, learned: dict[str, Any]) -> None:
        super()._load_state(learned)
        graph = learned["graph"]
        if graph["user_dim"] is not None:
            if self._graph_encoder is None or self._user_dim != graph["user_dim"]:
                self._build_encoder(int(graph["user_dim"]))
            self._graph_encoder.load_state_dict(graph["encoder"])
            self._joint_optimizer.load_state_dict(copy.deepcopy(graph["optimizer"]))
            self._replay.load_state(graph["replay"])
        observed = graph["observed"]
        if observed is not None:
            self._graph = GraphSnapshot.from_state(observed["graph"])
            self._arm_user = observed["arm_user"].clone()
            self._observed_rows = dict(observed["rows"])
            self._embedding = None


__all__ = ["GraphEENet", "GraphReplay"]
