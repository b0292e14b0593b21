"""Shared machinery of the PolicySim envs: config, simulation, observation, save/load."""

from __future__ import annotations

import pickle
from abc import abstractmethod
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agent_models.factory import make_brain
from socialenv import kernels
from socialenv.config import EnvConfig
from socialenv.simulation import RoundResult, Simulation, Stream

SAVE_FORMAT_VERSION = 1


def _positions(values: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Index in ``values`` (distinct) of each entry of ``items`` (a subset of ``values``)."""
    order = np.argsort(values)
    return order[np.searchsorted(values, items, sorter=order)]


class PolicySimEnv(gym.Env[dict[str, Any], np.ndarray]):
    """Base class: one step = one platform round; subclasses define arms, contexts, rewards."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}
    #: Number of scalar features appended to each arm's context.
    num_arm_features: int

    def __init__(self, render_mode: str | None = None, seed: int | None = None, **kwargs: Any) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r} is not allowed: use one of {self.metadata['render_modes']} or None"
            )
        self.render_mode = render_mode
        kwargs = {**self.default_kwargs(), **kwargs}
        self.config = EnvConfig.from_kwargs(**kwargs)
        self.brain = make_brain(self.config.users, llm=self.config.llm, surrogate=self.config.surrogate)
        self.sim = Simulation(self.config, self.brain, self.config.feed_recommender,
                              self.config.exposure_control)
        self._default_seed = seed
        #: ``seed=`` given to the constructor seeds the first reset that names no seed.
        self._pending_seed = seed
        self._latent_dim = self._probe_latent_dim()
        self.num_arms = self._num_arms()
        self.context_dim = 2 * self._latent_dim + self.num_arm_features + self._extra_context_dim()
        obs_spaces: dict[str, spaces.Space] = {
            "arms": spaces.Box(-np.inf, np.inf, (self.num_arms, self.context_dim), np.float32),
            "action_mask": spaces.MultiBinary(self.num_arms),
        }
        n = self._num_users()
        if self.config.observe_users:
            obs_spaces["user_context"] = spaces.Box(-np.inf, np.inf, (n, 2 * self._latent_dim), np.float32)
            obs_spaces["stance"] = spaces.Box(-1.0, 1.0, (n,), np.float32)
        if self.config.graph_observation:
            obs_spaces["graph"] = spaces.Graph(
                node_space=spaces.Box(-np.inf, np.inf, (2 * self._latent_dim,), np.float32),
                edge_space=spaces.Box(0.0, 1.0, (1,), np.float32),
            )
        self.observation_space = spaces.Dict(obs_spaces)
        #: Action value meaning "leave this slot empty"; a slate of only this is no intervention.
        self.no_op = self.num_arms
        #: Arms per sampled user that can take effect, and the slate length.
        self.per_user = self._per_user()
        self.slate_size = self._slate_size()
        if self.config.action_format == "slate":
            self.action_space = spaces.MultiDiscrete(np.full(self.slate_size, self.num_arms + 1, np.int64))
        else:
            self.action_space = spaces.Box(-1.0, 1.0, (self.num_arms,), np.float32)
        self._arms: dict[str, np.ndarray] | None = None
        self._last_result: RoundResult | None = None

    # ------------------------------------------------------------------ subclass interface
    @classmethod
    def default_kwargs(cls) -> dict[str, Any]:
        return {}

    @abstractmethod
    def _num_arms(self) -> int: ...

    @abstractmethod
    def _arms_per_user(self) -> int:
        """Arms of one sampled user (consecutive arm indices)."""

    def _per_user(self) -> int:
        """How many of one user's arms can take effect in a round."""
        return 1

    def _slate_size(self) -> int:
        return (self.num_arms // self._arms_per_user()) * self._per_user()

    def arm_groups(self) -> np.ndarray:
        """(K,) the sampled user (0..U-1) each arm belongs to; at most ``per_user`` arms of a
        group take effect in a round."""
        return np.arange(self.num_arms, dtype=np.int64) // self._arms_per_user()

    def _extra_context_dim(self) -> int:
        return 0

    @abstractmethod
    def _sample_arms(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Candidate arms of the coming round; must hold "mask" (K,) bool."""

    @abstractmethod
    def _arm_contexts(self, arms: dict[str, np.ndarray], arm_user_context: np.ndarray) -> np.ndarray:
        """(K, context_dim) float32; ``arm_user_context`` (K, 2d) is each arm's user's
        propagated context."""

    @abstractmethod
    def _apply_action(self, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Act on the platform with the distinct valid arms ``chosen``; returns the arms that
        took effect and the injected (user, post) pairs for the round (may be empty)."""

    @abstractmethod
    def _arm_rewards(self, applied: np.ndarray, result: RoundResult) -> tuple[np.ndarray, dict[str, float]]:
        """(len(applied),) rewards in [0, 1] and extra metrics for ``info``."""

    # ------------------------------------------------------------------ helpers
    def _num_users(self) -> int:
        scenario = self.config.scenario
        return scenario.num_users if hasattr(scenario, "num_users") else self.config.num_users

    def _probe_latent_dim(self) -> int:
        if self.brain.embedding_dim is not None:
            return int(self.brain.embedding_dim)
        scenario = self.config.scenario
        if hasattr(scenario, "latent_dim"):
            return int(scenario.latent_dim)
        if isinstance(scenario, str) and scenario.endswith(".npz"):
            with np.load(scenario) as arrays:
                return int(arrays["latent"].shape[1])
        from socialenv.scenarios import PopulationConfig

        return PopulationConfig().latent_dim

    def _observe(self) -> dict[str, Any]:
        sim = self.sim
        self._arms = self._sample_arms(sim.rng(sim.round, Stream.ARMS))
        arm_users = np.maximum(self._arms["user"], 0)
        if self.config.observe_users or self.config.graph_observation:
            user_context = sim.user_context()
            arm_context = user_context[arm_users]
        else:
            distinct, inverse = kernels.unique_inverse(arm_users)
            arm_context = sim.user_context(distinct)[inverse]
        obs: dict[str, Any] = {
            "arms": self._arm_contexts(self._arms, arm_context),
            "action_mask": self._arms["mask"].astype(np.int8),
        }
        if self.config.observe_users:
            obs["user_context"] = user_context.astype(np.float32)
            obs["stance"] = sim.users.stance.copy()
        if self.config.graph_observation:
            src, dst = sim.graph.src, sim.graph.dst
            out_degree = np.bincount(src, minlength=len(user_context))
            obs["graph"] = spaces.GraphInstance(
                nodes=user_context.astype(np.float32),
                edges=(1.0 / out_degree[src]).astype(np.float32)[:, None],
                edge_links=np.stack([src, dst], axis=1).astype(np.int64),
            )
        return obs

    def _check_action(self, action: Any) -> np.ndarray:
        """The (slate_size,) slate of arm indices (``no_op`` = empty) for a valid action."""
        if self.config.action_format == "scores":
            return self.slate_from_scores(action)
        try:
            arr = np.asarray(action)
        except Exception as err:  # noqa: BLE001 - anything unconvertible is a bad action
            raise ValueError(f"action must be an array of {self.slate_size} arm indices: {err}") from err
        if arr.shape != (self.slate_size,):
            raise ValueError(
                f"action has shape {arr.shape}; expected ({self.slate_size},): one arm index "
                f"per slate slot (slate_size={self.slate_size})"
            )
        if not np.issubdtype(arr.dtype, np.integer):
            if (np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr))
                    and np.all(np.mod(arr, 1) == 0)):
                if arr.min() < 0 or arr.max() > self.num_arms:
                    bad = arr.min() if arr.min() < 0 else arr.max()
                    raise ValueError(
                        f"action holds arm index {bad!r}; allowed: 0..{self.num_arms - 1}, or "
                        f"{self.num_arms} for an empty slot"
                    )
                arr = arr.astype(np.int64)
            else:
                raise ValueError(f"action must hold integer arm indices, got dtype {arr.dtype}")
        if arr.min() < 0 or arr.max() > self.num_arms:
            raise ValueError(
                f"action holds arm index {int(arr.min() if arr.min() < 0 else arr.max())}; "
                f"allowed: 0..{self.num_arms - 1}, or {self.num_arms} for an empty slot"
            )
        return arr.astype(np.int64)

    def slate_from_scores(self, scores: Any) -> np.ndarray:
        """The slate a score action stands for: each user's ``per_user`` best-scored allowed
        arms (ties broken by arm index), padded with ``no_op`` to ``slate_size``.

        Args:
            scores: (K,) finite real scores, one per arm (masked arms are ignored; only the
                order within a user matters, so values outside the Box bounds are accepted).
        """
        if self._arms is None:
            raise RuntimeError("call reset() before step()")
        try:
            arr = np.asarray(scores, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"action must be {self.num_arms} real scores, one per arm: {err}") from err
        if arr.shape != (self.num_arms,):
            raise ValueError(f"action has shape {arr.shape}; expected ({self.num_arms},): one score per arm")
        if not np.all(np.isfinite(arr)):
            raise ValueError("action scores must be finite (no NaN or inf)")
        allowed = np.flatnonzero(self._arms["mask"])
        group = self.arm_groups()[allowed]
        order = np.lexsort((allowed, -arr[allowed], group))
        ranked, ranked_group = allowed[order], group[order]
        rank = np.arange(len(ranked)) - np.searchsorted(ranked_group, ranked_group)
        chosen = ranked[rank < self.per_user]
        slate = np.full(self.slate_size, self.no_op, np.int64)
        slate[: len(chosen)] = chosen
        return slate

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is None and self._pending_seed is not None:
            seed = self._pending_seed
        self._pending_seed = None
        super().reset(seed=seed)
        episode_seed = int(self.np_random.integers(0, 2**31 - 1))
        self.sim.reset(episode_seed)
        self._last_result = None
        return self._observe(), {"round": 0, "seed": episode_seed}

    def step(self, action: Any):
        if self._arms is None:
            raise RuntimeError("call reset() before step()")
        if self.sim.round >= self.config.rounds:
            raise RuntimeError("episode is over (truncated): call reset()")
        slate = self._check_action(action)
        filled = slate != self.no_op
        first = kernels.first_occurrence(slate)
        first_use = np.zeros(len(slate), bool)
        first_use[first] = True
        candidate = filled & first_use
        candidate[candidate] = self._arms["mask"][slate[candidate]]
        over_cap = self._over_cap(slate, candidate)
        candidate &= ~over_cap
        applied_arms, injected = self._apply_action(slate[candidate])
        result = self.sim.run_round(*injected)
        self._last_result = result
        rewards, extra = self._arm_rewards(applied_arms, result)
        applied = np.zeros(len(slate), bool)
        slot_rewards = np.zeros(len(slate), np.float32)
        if len(applied_arms):
            slot = np.flatnonzero(candidate)[_positions(slate[candidate], applied_arms)]
            applied[slot] = True
            slot_rewards[slot] = rewards
        reward = self._step_reward(slot_rewards, applied)
        truncated = self.sim.round >= self.config.rounds
        obs = self._observe()
        info = {
            "round": result.round,
            "arm_indices": slate,
            "arm_applied": applied,
            "arm_rewards": slot_rewards,
            "empty_slots": int((~filled).sum()),
            "duplicate_arms": int((filled & ~first_use).sum()),
            "over_user_cap": int(over_cap.sum()),
            "invalid_arms": int((filled & first_use).sum() - applied.sum() - over_cap.sum()),
            "metrics": {**result.metrics, **extra},
            "brain": dict(result.output.stats),
        }
        return obs, reward, False, truncated, info

    def _over_cap(self, slate: np.ndarray, candidate: np.ndarray) -> np.ndarray:
        """(S,) bool: candidate slots beyond their user's ``per_user`` arms (in slate order)."""
        over = np.zeros(len(slate), bool)
        slots = np.flatnonzero(candidate)
        if len(slots) == 0:
            return over
        group = self.arm_groups()[slate[slots]]
        order = np.argsort(group, kind="stable")
        sorted_group = group[order]
        rank = np.empty(len(slots), np.int64)
        rank[order] = np.arange(len(slots)) - np.searchsorted(sorted_group, sorted_group)
        over[slots[rank >= self.per_user]] = True
        return over

    def _step_reward(self, slot_rewards: np.ndarray, applied: np.ndarray) -> float:
        """The step's reward: the slate's rewards summed over its slots / ``slate_size``."""
        return float(slot_rewards.sum() / self.slate_size)

    def graph_data(self):
        """The current follow graph as a ``torch_geometric.data.Data``: ``x`` (N, 2d) unpropagated
        user context [profile ⊕ memory embedding], ``edge_index`` (2, E) with messages flowing
        from the followee (row 0) to the follower (row 1), ``stance`` (N,), and ``arm_user``
        (K,) the user of each arm of the current observation (-1 for padding)."""
        import torch
        from torch_geometric.data import Data

        sim = self.sim
        x = np.concatenate([sim.users.latent, sim.users.memory_latent], axis=1)
        edge_index = np.stack([sim.graph.dst, sim.graph.src])
        arm_user = self._arms["user"] if self._arms is not None else np.zeros(0, np.int64)
        return Data(
            x=torch.from_numpy(x.astype(np.float32)),
            edge_index=torch.from_numpy(edge_index.astype(np.int64)),
            stance=torch.from_numpy(sim.users.stance.copy()),
            arm_user=torch.from_numpy(arm_user.copy()),
            num_nodes=len(x),
        )

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        if self._last_result is None:
            return f"round {self.sim.round}: no step yet"
        m = self._last_result.metrics
        return (
            f"round {self._last_result.round}: stance {m['stance_mean']:+.3f} ± {m['stance_std']:.3f}, "
            f"toxicity {m['toxicity']:.4f}, cross {m['cross_interaction_ratio']:.3f}, "
            f"misinformed {m['misinformation_ratio']:.1%}"
        )

    def close(self) -> None:
        self.brain.close()

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the whole env state (config, world, brain, RNG) to ``path`` (a pickle: load
        only files you trust). ``load_env(path)`` resumes the exact trajectory."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "version": SAVE_FORMAT_VERSION,
            "env_id": self.spec.id if self.spec is not None else None,
            "class": f"{type(self).__module__}:{type(self).__qualname__}",
            "config": self.config,
            "default_seed": self._default_seed,
            "np_random_state": self.np_random.bit_generator.state,
            "sim": self.sim.state_dict(),
            "env": self._env_state(),
        }
        with path.open("wb") as fh:
            pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)
        return path

    def _env_state(self) -> dict[str, Any]:
        return {"arms": self._arms}

    def _load_env_state(self, state: dict[str, Any]) -> None:
        self._arms = state["arms"]

    @classmethod
    def load(cls, path: str | Path) -> PolicySimEnv:
        """Rebuild an env saved with :meth:`save`, ready to continue with ``step``."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"saved env {path} does not exist")
        with path.open("rb") as fh:
            state = pickle.load(fh)
        if not isinstance(state, dict) or state.get("version") != SAVE_FORMAT_VERSION:
            raise ValueError(f"{path} is not a PolicySim env save (format version {SAVE_FORMAT_VERSION})")
        import importlib

        module, qualname = state["class"].split(":")
        env_cls = getattr(importlib.import_module(module), qualname)
        config = state["config"]
        kwargs = {f: getattr(config, f) for f in config.__dataclass_fields__}
        env = env_cls(seed=state["default_seed"], **kwargs)
        env.reset(seed=0)
        env.np_random.bit_generator.state = state["np_random_state"]
        env.sim.load_state_dict(state["sim"])
        env._load_env_state(state["env"])
        return env


def load_env(path: str | Path) -> PolicySimEnv:
    """Load an env saved with ``env.save(path)`` (works through ``env.unwrapped.save``)."""
    return PolicySimEnv.load(path)
