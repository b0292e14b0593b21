"""Shared machinery of the PolicySim envs: config, simulation, observation, save/load."""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from agent_models.factory import make_brain
from policysim_infra.buffers import ReusedArrays
from policysim_infra.validation import UnknownKeywordError, check_keys
from socialenv.core import kernels
from socialenv.core.config import EnvConfig
from socialenv.core.lever import Lever, LeverConfig, shift_post_ids
from socialenv.core.pages import huge_pages, small_pages
from socialenv.core.simulation import RoundResult, Simulation, Stream
from socialenv.envs.sizing import warn_if_too_large


class PolicySimEnv(gym.Env[dict[str, Any], np.ndarray]):
    """Base class: one step = one platform round; subclasses define arms, contexts, rewards.

    ## Arguments

    Every PolicySim env takes these keyword arguments (``gym.make(env_id, **kwargs)``; the
    fields of :class:`~socialenv.core.config.EnvConfig` plus ``render_mode`` and ``seed``), and
    each env's own table lists the rest: the fields of its lever config, which ``lever=``
    takes at once (a dict or the config) and each of which is also a keyword of its own.
    Every value is checked when the env is built; an unknown keyword (another env's lever
    argument among them) is refused with the list of allowed ones.

    | argument | default | description |
    |---|---|---|
    | render_mode | None | "ansi" (one line of the last round's metrics) or "rgb_array" (a stance histogram frame) |
    | seed | None | seeds the first ``reset()`` that names no seed |
    | num_users | 1000 | population size of a built-in scenario, in [10, 10⁶] |
    | rounds | 10 | rounds per episode (one ``step`` = one round) |
    | lever | None | the env's lever settings: its lever config or a dict of its fields (the env's own table; None: the defaults) |
    | action_format | "slate" | "slate" (``MultiDiscrete`` arm indices) or "scores" (``Box``, one score per arm) |
    | users | "surrogate" | the population: "surrogate", "llm", an opinion-dynamics model name, or a ``Brain`` |
    | llm | None | the LLM agents' settings (``users="llm"``): a dict of :class:`agent_models.llm.config.LLMConfig` fields |
    | surrogate | None | the surrogate's settings: a dict of :class:`agent_models.surrogate.SurrogateConfig` fields, or the path of a fitted file (``policysim fit``) |
    | classifier | ClassifierConfig() | the platform's misinformation classifier: ``recall``, ``false_positive_rate`` |
    | recommender | RecommenderConfig() | the built-in feed: channel sizes, window, candidate retrieval |
    | reward | RewardConfig() | the reward's form ("objective" or the paper's Eq. 9 / Eq. 10), weights and step reward ("objective" or Rec's "slots") |
    | context | ContextConfig() | context propagation over the follow graph (Eq. 8): ``alpha``, ``hops`` |
    | stance_ema | 0.8 | β of Eq. 2 (stance smoothing), in [0, 1) |
    | memory_ema | 0.5 | weight of the old memory embedding when a user engages, in [0, 1) |
    | observe_users | False | add "user_context" (N, 2d) and "stance" (N,) to the observation |
    | graph_observation | False | add "graph" (a ``spaces.Graph`` of the follow graph) to the observation |
    | observe_response | False | add the reactions to the previous slate to the observation |
    | feed_recommender | None | a :class:`socialenv.core.platform.Recommender` building the feeds instead of the default |
    | exposure_control | None | a :class:`socialenv.core.platform.ExposureControl` filtering the feeds |
    | activity | None | None (scenario activity probabilities), "hawkes" or a dict of ``HawkesConfig`` fields |
    | events | None | scenario events added to the scenario's own: a list of dicts or a .yaml/.json file |

    The nested settings (``classifier``, ``recommender``, ``reward``, ``context``) take a dict
    of their fields or the config object; see :mod:`socialenv.core.config` for every field.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 1}
    #: Number of scalar features appended to each arm's context.
    num_arm_features: int
    #: The env's lever (its ``config_class`` is the env's lever config).
    lever_class: ClassVar[type[Lever]] = Lever
    #: The layout of the arms, which rule-based policies read ("rec": (user, post) arms,
    #: "exposure": (author, level) arms, "moderation": (post, action) arms).
    arm_kind: ClassVar[str] = ""
    #: whether ``reward={"step": "slots"}`` (the arms' summed changes as the step reward) exists
    slot_step: ClassVar[bool] = False

    def __init__(
        self, render_mode: str | None = None, seed: int | None = None, **kwargs: Any
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r} is not allowed: use one of {self.metadata['render_modes']} or None"
            )
        self.render_mode = render_mode
        kwargs = {**self.default_kwargs(), **kwargs}
        self._check_keywords(kwargs)
        config_class = self.lever_class.config_class
        own = {k: kwargs.pop(k) for k in config_class.field_names() if k in kwargs}
        kwargs["lever"] = config_class.from_spec(kwargs.get("lever"), **own)
        self.config = EnvConfig.from_kwargs(**kwargs)
        if self.config.reward.step == "slots" and not (
            self.slot_step and self.config.reward.form == "objective"
        ):
            raise ValueError(
                f"reward.step='slots' is not allowed here ({type(self).__name__}, "
                f"reward.form={self.config.reward.form!r}): it is PolicySim-Rec-v0's with "
                "reward.form='objective'; use reward.step='objective'"
            )
        self.brain = make_brain(
            self.config.users, llm=self.config.llm, surrogate=self.config.surrogate
        )
        #: the env's lever: what its policy controls on the platform
        self.lever = self.lever_class(self.config.lever)
        self.sim = Simulation(
            self.config,
            self.brain,
            self.config.feed_recommender,
            self.config.exposure_control,
            lever=self.lever,
        )
        self.sim.post_id_holders.append(self._remap_arm_posts)
        #: arm-context matrices handed out again once the caller has dropped them (the
        #: observation a caller keeps never changes)
        self._context_arrays = ReusedArrays(keep=2)
        self._default_seed = seed
        #: ``seed=`` given to the constructor seeds the first reset that names no seed.
        self._pending_seed = seed
        self._latent_dim = self._probe_latent_dim()
        self.num_arms = self._num_arms()
        self.context_dim = 2 * self._latent_dim + self.num_arm_features + self._extra_context_dim()
        low, high = self._context_bounds()
        obs_spaces: dict[str, spaces.Space] = {
            "arms": row_bounds_box(low, high, self.num_arms),
            "action_mask": spaces.MultiBinary(self.num_arms),
        }
        n = self._num_users()
        if self.config.observe_users:
            obs_spaces["user_context"] = spaces.Box(
                -1.0, 1.0, (n, 2 * self._latent_dim), np.float32
            )
            obs_spaces["stance"] = spaces.Box(-1.0, 1.0, (n,), np.float32)
        if self.config.graph_observation:
            obs_spaces["graph"] = spaces.Graph(
                node_space=spaces.Box(-1.0, 1.0, (2 * self._latent_dim,), np.float32),
                edge_space=spaces.Box(0.0, 1.0, (1,), np.float32),
            )
        if self.config.observe_response:
            obs_spaces.update(response_spaces(self._slate_size(), *self.reward_bounds()))
        self.observation_space = spaces.Dict(obs_spaces)
        #: Action value meaning "leave this slot empty"; a slate of only this is no intervention.
        self.no_op = self.num_arms
        #: Arms per sampled user that can take effect, and the slate length.
        self.per_user = self._per_user()
        self.slate_size = self._slate_size()
        if self.config.action_format == "slate":
            self.action_space = spaces.MultiDiscrete(
                np.full(self.slate_size, self.num_arms + 1, np.int64)
            )
        else:
            self.action_space = spaces.Box(-1.0, 1.0, (self.num_arms,), np.float32)
        warn_if_too_large(self)
        self._arms: dict[str, np.ndarray] | None = None
        self._last_result: RoundResult | None = None
        self._last_reward: float | None = None
        self._response = empty_response(self.slate_size)
        self._tracer = None

    @property
    def spec(self) -> EnvSpec | None:
        """The spec ``gym.make`` set, with ``max_episode_steps`` = ``rounds`` (the env's own
        truncation) unless a ``TimeLimit`` said otherwise."""
        return self.__dict__.get("_spec")

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        if value is not None and value.max_episode_steps is None:
            value = dataclasses.replace(value, max_episode_steps=self.config.rounds)
        self.__dict__["_spec"] = value

    @property
    def lever_config(self) -> LeverConfig:
        """The env's lever settings (``config.lever``)."""
        return self.config.lever

    @classmethod
    def _check_keywords(cls, kwargs: dict[str, Any]) -> None:
        """Refuse keywords that are neither shared settings nor this env's lever fields,
        saying which env's lever an argument belongs to."""
        from socialenv.envs.registration import lever_owner

        allowed = sorted(
            {f.name for f in dataclasses.fields(EnvConfig)}
            | set(cls.lever_class.config_class.field_names())
        )
        try:
            check_keys(kwargs, allowed, "kwargs", "env argument(s)", keyword=True)
        except UnknownKeywordError as err:
            owners = {
                key: owner
                for key in sorted(set(kwargs) - set(allowed))
                if (owner := lever_owner(key))
            }
            if not owners:
                raise
            belongs = "; ".join(
                f"{key!r} belongs to {owner}'s lever" for key, owner in owners.items()
            )
            raise UnknownKeywordError(f"{err} ({belongs}, not this env's)") from None

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
    def _arm_contexts(
        self, arms: dict[str, np.ndarray], user_rows: np.ndarray, arm_row: np.ndarray
    ) -> np.ndarray:
        """(K, context_dim) float32; arm k's user's propagated context is
        ``user_rows[arm_row[k]]`` (``user_rows`` (R, 2d), ``arm_row`` (K,)). Written into
        :meth:`_context_matrix` (every element), it costs no fresh pages per step."""

    def _context_matrix(self, arms: int, width: int) -> np.ndarray:
        """An uninitialised (arms, width) float32 matrix for the arm contexts: one of the last
        steps' that the caller has dropped (no fresh pages), in huge pages, or a new one."""
        return huge_pages(self._context_arrays.empty)((arms, width), np.float32)

    def _apply_action(self, chosen: np.ndarray) -> np.ndarray:
        """Act on the platform with the distinct valid arms ``chosen``, through the lever
        (:meth:`Simulation.apply_policy` with the chosen arms' columns); returns the arms
        that took effect."""
        choice = {key: value[chosen] for key, value in self._arms.items() if key != "mask"}
        return chosen[self.sim.apply_policy(choice)]

    @abstractmethod
    def _arm_rewards(
        self, applied: np.ndarray, result: RoundResult
    ) -> tuple[np.ndarray, dict[str, float]]:
        """(len(applied),) rewards in :meth:`reward_bounds` and extra metrics for ``info``."""

    def _arm_signals(self) -> dict[str, np.ndarray]:
        """Per-arm measurements of the last round beside the reward, by ``info`` key: each a
        (len(applied),) array in the order of :meth:`_arm_rewards`' arms, put in slate order
        (0 for slots not applied) like ``info["arm_rewards"]``. Default: none."""
        return {}

    def reward_bounds(self) -> tuple[float, float]:
        """The range of an arm's reward (``info["arm_rewards"]``, ``response_reward``)."""
        return 0.0, 1.0

    def arm_cost_key(self) -> str | None:
        """The ``info`` key of the per-arm cost a constrained policy learns
        (:class:`bandits.constrained.ConstrainedEpsilonGreedy`), or None where the env
        reports none. Default: none."""
        return None

    def null_arm_reward(self) -> float | None:
        """The arm reward of leaving a slot empty (``no_op``: the platform's own choice
        stands), or None where the reward form defines none. In the objective form every
        env credits an arm 0.5 + 0.5·(its contribution against the default), so the null
        arm is worth 0.5; the paper's Eq. 9 / Eq. 10 rewards have no such zero point. A
        bandit given it (``null_reward``, :class:`bandits.ridge.RidgePolicy`) fills a slot
        only with an arm it expects to do better than the platform."""
        return None if self.config.reward.form == "paper" else 0.5

    def _feature_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(F,) lower and upper bounds of the ``num_arm_features`` scalar features (finite where
        the feature is bounded; override in subclasses, ±inf by default)."""
        return np.full(self.num_arm_features, -np.inf), np.full(self.num_arm_features, np.inf)

    def _arm_responded(
        self, applied: np.ndarray, result: RoundResult, rewards: np.ndarray
    ) -> np.ndarray:
        """(len(applied),) bool: whether the population responded to each applied arm (for the
        ``observe_response`` observation); by default, whether its reward is positive."""
        del applied, result
        return rewards > 0

    # ------------------------------------------------------------------ helpers
    def _pad_to_constant_norm(
        self, names: Sequence[str], bounds: dict[str, tuple[float, float]], unit_blocks: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(F,) bounds of the feature columns ``names`` from ``bounds``; the ``norm_pad``
        column's upper bound is the arm contexts' common norm (``unit_blocks`` unit-norm
        embedding blocks plus every other column at its largest square), kept in
        ``self._context_norm``."""
        low, high = (
            np.asarray(v, np.float64) for v in zip(*(bounds[n] for n in names), strict=True)
        )
        pad = list(names).index("norm_pad")
        others = np.maximum(low**2, high**2)
        others[pad] = 0.0
        self._context_norm = float(np.sqrt(unit_blocks + others.sum()))
        high[pad] = self._context_norm
        return low, high

    def _context_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(D,) bounds of an arm context: unit-norm embeddings and their graph averages lie in
        [-1, 1]; the scalar features have the subclass's :meth:`_feature_bounds`."""
        embedding = 2 * self._latent_dim + self._extra_context_dim()
        low, high = self._feature_bounds()
        if low.shape != (self.num_arm_features,) or high.shape != (self.num_arm_features,):
            raise ValueError(
                f"{type(self).__name__}._feature_bounds must return two arrays of shape "
                f"({self.num_arm_features},); got {low.shape} and {high.shape}"
            )
        return (
            np.concatenate([np.full(embedding, -1.0), low]).astype(np.float32),
            np.concatenate([np.full(embedding, 1.0), high]).astype(np.float32),
        )

    def _num_users(self) -> int:
        scenario = self.config.scenario
        return scenario.num_users if hasattr(scenario, "num_users") else self.config.num_users

    def expected_active_users(self) -> float:
        """Expected number of users active in a round: the sum of the scenario's activity
        probabilities (a built-in scenario: ``num_users`` × the mean of its Beta activity
        distribution). Hawkes activity bursts above it are capped by :meth:`lever_capacity`."""
        scenario = self.config.scenario
        if isinstance(scenario, str) and scenario.endswith(".npz"):
            from socialenv.scenarios.scenario import Scenario

            scenario = Scenario.load(scenario)
        if hasattr(scenario, "activity"):
            return float(np.sum(scenario.activity))
        from socialenv.scenarios.builtin import PopulationConfig

        a, b = PopulationConfig().activity_beta
        return self.config.num_users * a / (a + b)

    def lever_capacity(self, fixed: int | None) -> int:
        """Users of the lever the observation holds room for: ``fixed`` if given (the
        ``candidate_users`` / ``exposure_users`` override), else ``lever_share`` × (expected
        active users + 3 standard deviations), so that the observation has a fixed size."""
        if fixed is not None:
            return int(fixed)
        if "_expected_active" not in self.__dict__:  # the config is frozen: once per env
            self._expected_active = self.expected_active_users()
        expected = self._expected_active
        return max(
            1, int(np.ceil(self.lever_config.lever_share * (expected + 3 * np.sqrt(expected))))
        )

    def lever_take(self, available: int, active: int, fixed: int | None) -> int:
        """Users the policy governs this round: ``fixed`` (or ``lever_share`` × the round's
        ``active`` users, at least one), at most the capacity and the ``available`` ones."""
        if fixed is not None:
            return min(int(fixed), available)
        wanted = max(1, int(round(self.lever_config.lever_share * active))) if active else 0
        return min(wanted, self.lever_capacity(None), available)

    def _probe_latent_dim(self) -> int:
        if self.brain.embedding_dim is not None:
            return int(self.brain.embedding_dim)
        scenario = self.config.scenario
        if hasattr(scenario, "latent_dim"):
            return int(scenario.latent_dim)
        if isinstance(scenario, str) and scenario.endswith(".npz"):
            from socialenv.scenarios.scenario import Scenario

            return Scenario.load(scenario).latent_dim
        from socialenv.scenarios.builtin import PopulationConfig

        return PopulationConfig().latent_dim

    def _observe(self) -> dict[str, Any]:
        sim = self.sim
        self._arms = self._sample_arms(sim.rng(sim.round, Stream.ARMS))
        arm_users = np.maximum(self._arms["user"], 0)
        if self.config.observe_users or self.config.graph_observation:
            user_context = sim.user_context()
            user_rows, arm_row = user_context, arm_users
        else:
            distinct, arm_row = kernels.unique_inverse(arm_users)
            user_rows = sim.user_context(distinct)
        obs: dict[str, Any] = {
            "arms": self._arm_contexts(self._arms, user_rows, arm_row),
            "action_mask": self._arms["mask"].astype(np.int8),
        }
        if self.config.observe_users:
            obs["user_context"] = user_context.astype(np.float32)
            obs["stance"] = sim.users.stance.copy()
        if self.config.observe_response:
            obs.update({key: value.copy() for key, value in self._response.items()})
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
            raise ValueError(
                f"action must be an array of {self.slate_size} arm indices: {err}"
            ) from err
        if arr.shape != (self.slate_size,):
            raise ValueError(
                f"action has shape {arr.shape}; expected ({self.slate_size},): one arm index "
                f"per slate slot (slate_size={self.slate_size})"
            )
        if not np.issubdtype(arr.dtype, np.integer):
            if (
                np.issubdtype(arr.dtype, np.floating)
                and np.all(np.isfinite(arr))
                and np.all(np.mod(arr, 1) == 0)
            ):
                out_of_range = (arr < 0) | (arr > self.num_arms)
                if out_of_range.any():
                    raise ValueError(
                        f"action holds arm index {arr[out_of_range][0]!r}; allowed: "
                        f"0..{self.num_arms - 1}, or {self.num_arms} for an empty slot"
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
        arms (ties broken by arm index), padded with ``no_op`` to ``slate_size``. Where these
        are more than ``slate_size`` (Moderation: one per post, ``budget`` slots), the
        ``slate_size`` best-scored of them, kept in arm-group order.

        Args:
            scores: (K,) finite real scores, one per arm (masked arms are ignored; only the
                order within a user matters, so values outside the Box bounds are accepted).
        """
        if self._arms is None:
            raise RuntimeError("call reset() before step()")
        try:
            if np.iscomplexobj(scores):
                raise ValueError("complex scores are not allowed (real numbers only)")
            arr = np.asarray(scores, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"action must be {self.num_arms} real scores, one per arm: {err}"
            ) from err
        if arr.shape != (self.num_arms,):
            raise ValueError(
                f"action has shape {arr.shape}; expected ({self.num_arms},): one score per arm"
            )
        if not np.all(np.isfinite(arr)):
            raise ValueError("action scores must be finite (no NaN or inf)")
        allowed = np.flatnonzero(self._arms["mask"])
        group = self.arm_groups()[allowed]
        order = np.lexsort((allowed, -arr[allowed], group))
        ranked, ranked_group = allowed[order], group[order]
        rank = np.arange(len(ranked)) - np.searchsorted(ranked_group, ranked_group)
        chosen = ranked[rank < self.per_user]
        if len(chosen) > self.slate_size:
            best = np.lexsort((chosen, -arr[chosen]))[: self.slate_size]
            chosen = chosen[np.sort(best)]
        slate = np.full(self.slate_size, self.no_op, np.int64)
        slate[: len(chosen)] = chosen
        return slate

    def _remap_arm_posts(self, cut: int) -> None:
        """After a compaction (:meth:`Simulation.compact_posts`, which calls this): this
        observation's arms keep pointing at the same posts."""
        if self._arms is not None and "post" in self._arms:
            self._arms["post"] = shift_post_ids(self._arms["post"], cut)

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._check_open()
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0
        ):
            raise ValueError(f"seed={seed!r} is not allowed: an integer >= 0 or None")
        if options is not None and (not isinstance(options, dict) or options):
            raise ValueError(
                f"options={options!r} is not allowed: this env takes no reset options "
                "(None or {})"
            )
        if seed is None and self._pending_seed is not None:
            seed = self._pending_seed
        self._pending_seed = None
        super().reset(seed=seed)
        episode_seed = int(self.np_random.integers(0, 2**31 - 1))
        self.sim.reset(episode_seed)
        if self._tracer is not None:
            self._tracer.start_episode(self.sim)
        self._last_result = None
        self._last_reward = None
        self._response = empty_response(self.slate_size)
        # the first observation allocates the arms' contexts and the kept user-context
        # table: in small pages, like the world the reset built (socialenv.core.pages)
        return small_pages(self._observe)(), {"round": 0, "seed": episode_seed}

    def step(self, action: Any):
        self._check_open()
        if self._arms is None:
            raise RuntimeError("call reset() before step()")
        if self.sim.round >= self.config.rounds:
            raise RuntimeError("episode is over (truncated): call reset()")
        slate = self._check_action(action)
        self.sim.compact_posts()  # bounds memory over long episodes, between rounds
        filled, first_use, candidate, over_cap = kernels.slate_slots(
            slate, self._arms["mask"], self.arm_groups(), self.per_user, self.no_op
        )
        applied_arms = self._apply_action(slate[candidate])
        if self._tracer is not None:
            self._tracer.before_round(self.sim)
        result = self.sim.run_round()
        if self._tracer is not None:
            self._tracer.after_round(self.sim, result)
            if self.sim.round >= self.config.rounds and self._tracer.path is not None:
                self._tracer.write(env_meta=self.trace_meta())
        self._last_result = result
        rewards, extra = self._arm_rewards(applied_arms, result)
        applied = np.zeros(len(slate), bool)
        slot_rewards = np.zeros(len(slate), np.float32)
        if len(applied_arms):
            slot = np.flatnonzero(candidate)[kernels.index_of(slate[candidate], applied_arms)]
            applied[slot] = True
            slot_rewards[slot] = rewards
        reward = self._step_reward(slot_rewards, applied)
        self._last_reward = reward
        arm_signals = {}
        for name, values in self._arm_signals().items():
            arm_signals[name] = np.zeros(len(slate), np.float32)
            if len(applied_arms):
                arm_signals[name][slot] = values
        if self.config.observe_response:
            responded = np.zeros(len(slate), bool)
            if len(applied_arms):
                responded[slot] = self._arm_responded(applied_arms, result, rewards)
            self._response = {
                "response_applied": applied.astype(np.int8),
                "response_reward": slot_rewards,
                "response_reacted": responded.astype(np.int8),
            }
        truncated = self.sim.round >= self.config.rounds
        obs = self._observe()
        info = {
            "round": result.round,
            "arm_indices": slate,
            "arm_applied": applied,
            "arm_rewards": slot_rewards,
            **arm_signals,
            "empty_slots": int((~filled).sum()),
            "duplicate_arms": int((filled & ~first_use).sum()),
            "over_user_cap": int(over_cap.sum()),
            "invalid_arms": int((filled & first_use).sum() - applied.sum() - over_cap.sum()),
            "metrics": {**result.metrics, **extra},
            "brain": dict(result.output.stats),
        }
        return obs, reward, False, truncated, info

    def _step_reward(self, slot_rewards: np.ndarray, applied: np.ndarray) -> float:
        """The step's reward: the slate's rewards summed over its slots / ``slate_size``."""
        return float(slot_rewards.sum() / self.slate_size)

    # ------------------------------------------------------------------ researcher tools
    def trace(
        self, path: str | Path | None = None, format: str = "parquet", recorder: Any = None
    ) -> Any:
        """Record a behaviour trace of the coming rounds (:mod:`socialenv.fitting.trace`): returns the
        :class:`~socialenv.fitting.trace.TraceRecorder` (``recorder``: one to continue, e.g. across the
        envs of several seeds); with ``path`` the trace folder is (re)written at the end of every
        episode, else call ``recorder.write(path, env.trace_meta())``."""
        from socialenv.fitting.trace import TraceRecorder

        self._tracer = recorder if recorder is not None else TraceRecorder(path, format)
        if self._arms is not None and self.sim.round == 0:
            self._tracer.start_episode(self.sim)
        return self._tracer

    def trace_meta(self) -> dict[str, Any]:
        """What a trace records about the env it came from (its provenance)."""
        from dataclasses import asdict

        from agent_models.surrogate import SurrogateBrain

        users = self.config.users
        scenario = self.config.scenario
        meta: dict[str, Any] = {
            "env_id": self._registered_id(),
            "population": users if isinstance(users, str) else type(users).__name__,
            "brain": type(self.brain).__name__,
            "scenario": scenario if isinstance(scenario, str) else type(scenario).__name__,
            "num_users": int(len(self.sim.users.opinion)),
            "rounds": int(self.config.rounds),
            # the lever's size, so that a fitted surrogate can replay the trace's platform
            "env_kwargs": {
                name: getattr(self.lever_config, name)
                for name in self.lever_config.field_names()
                if isinstance(getattr(self.lever_config, name), int | float | dict)
            },
        }
        if type(self.brain) is SurrogateBrain:
            meta["surrogate"] = asdict(self.brain.config)
        return meta

    def inject_event(self, event: dict[str, Any]) -> dict[str, Any]:
        """Add a scenario event mid-run (a dict as in :mod:`socialenv.mechanisms.events`); without
        ``round`` / ``when`` it fires in the next round played. Returns the normalized event."""
        if self._arms is None:
            raise RuntimeError("call reset() before inject_event()")
        return self.sim.events.inject(event, self.sim.round)

    def interview(self, user_ids: Any, question: str, **kwargs: Any) -> list[dict[str, Any]]:
        """Ask users a question without changing any state; see :func:`socialenv.envs.interview.interview`."""
        from socialenv.envs.interview import interview

        return interview(self, user_ids, question, **kwargs)

    def survey(self, questions: Any, sample: Any = 20, seed: int = 0, **kwargs: Any) -> Any:
        """Run a questionnaire over a sample of users and return a table; see
        :func:`socialenv.envs.interview.survey`."""
        from socialenv.envs.interview import survey

        return survey(self, questions, sample=sample, seed=seed, **kwargs)

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

    def action_masks(self) -> np.ndarray:
        """(slate_size · (K + 1),) bool: the valid values of every slot of the ``MultiDiscrete``
        slate, slot after slot, as sb3-contrib's ``MaskablePPO`` reads them: slot j may hold any
        arm of the current ``action_mask`` or the no-op K (always allowed). Slots are masked
        independently, so a slate may still repeat an arm (the repeat scores 0)."""
        if self._arms is None:
            raise RuntimeError("call reset() before action_masks()")
        per_slot = np.append(self._arms["mask"].astype(bool), True)
        return np.tile(per_slot, self.slate_size)

    def render(self) -> str | np.ndarray | None:
        """``"ansi"``: one line of the last round's metrics; ``"rgb_array"``: a (480, 640, 3)
        uint8 frame with the stance histogram and the round's metrics
        (:func:`socialenv.envs.render.render_frame`); None without a render mode."""
        if self.render_mode == "rgb_array":
            from socialenv.envs.render import render_env

            return render_env(self)
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
        self._closed = True

    def _check_open(self) -> None:
        if getattr(self, "_closed", False):
            raise RuntimeError("the env is closed: make a new one (gym.make) instead of reusing it")

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the whole env state (config, world, brain, RNG) to ``path``, a data-only
        checkpoint (:mod:`socialenv.envs.checkpoint`: arrays + JSON, no pickle, secrets left out).
        ``load_env(path)`` resumes the exact trajectory. A config value that is not data (a
        Brain, recommender or exposure-control instance) is not stored: pass it again to
        ``load_env(path, users=...)``."""
        from socialenv.envs.checkpoint import write_checkpoint

        return write_checkpoint(path, "env", self.checkpoint_state(), objects="placeholder")

    def checkpoint_state(self) -> dict[str, Any]:
        """The tree :meth:`save` writes (for embedding an env in a larger checkpoint)."""
        return {
            "env_id": self._registered_id(),
            "config": self.config,
            "default_seed": self._default_seed,
            "np_random_state": self.np_random.bit_generator.state,
            "sim": self.sim.state_dict(),
            "env": self._env_state(),
        }

    def _registered_id(self) -> str:
        from socialenv.envs.registration import ENV_IDS, env_class

        ids = [env_id for env_id in ENV_IDS if env_class(env_id) is type(self)]
        if self.spec is not None and self.spec.id in ids:
            return self.spec.id
        if not ids:
            raise ValueError(
                f"{type(self).__qualname__} is not a registered PolicySim env "
                f"({sorted(ENV_IDS)}); only those can be saved"
            )
        return ids[0]

    def _env_state(self) -> dict[str, Any]:
        return {"arms": self._arms, "response": self._response}

    def _load_env_state(self, state: dict[str, Any]) -> None:
        self._arms = state["arms"]
        self._response = state.get("response", empty_response(self.slate_size))

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> PolicySimEnv:
        """Rebuild an env saved with :meth:`save`, ready to continue with ``step``.

        The file's format and version are checked before anything else is read; the env class
        comes from the package's registry (:data:`socialenv.envs.registration.ENV_IDS`), never
        from the file. ``overrides`` replace config fields (needed for values that were
        objects, e.g. ``users=MyBrain()``)."""
        from socialenv.envs.checkpoint import read_checkpoint

        return cls.from_checkpoint_state(read_checkpoint(path, "env"), path, **overrides)

    @classmethod
    def from_checkpoint_state(cls, state: Any, path: str | Path, **overrides: Any) -> PolicySimEnv:
        """The env of a decoded :meth:`checkpoint_state` tree read from ``path``."""
        from socialenv.envs.checkpoint import (
            CheckpointError,
            code_references,
            fill_placeholders,
            refusal,
        )
        from socialenv.envs.registration import ENV_IDS, env_class

        required = {"env_id", "config", "default_seed", "np_random_state", "sim", "env"}
        if not isinstance(state, dict) or not required <= set(state):
            raise CheckpointError(
                f"{path} is not a PolicySim env checkpoint: it lacks "
                f"{sorted(required - set(state) if isinstance(state, dict) else required)}"
            )
        env_id = state["env_id"]
        if env_id not in ENV_IDS:
            raise CheckpointError(f"{path}: env id {env_id!r} is not one of {sorted(ENV_IDS)}")
        if not isinstance(state["config"], EnvConfig):
            raise CheckpointError(f"{path}: config is not an EnvConfig")
        risky = code_references(state["config"])
        if risky and "llm" not in overrides:
            raise refusal(path, risky, "pass the LLM config again, load_env(path, llm=...)")
        env_cls = env_class(env_id)
        qualname = env_cls.__qualname__
        if not issubclass(env_cls, cls):
            raise CheckpointError(
                f"{path} holds a {env_id} env ({qualname}), not a {cls.__name__}: "
                f"load it with {qualname}.load or load_env"
            )
        kwargs = fill_placeholders(
            state["config"], overrides, lambda name: f"load_env(path, {name}=...)"
        )
        if isinstance(kwargs.get("lever"), dict):  # saved before the envs had lever configs
            own = env_cls.lever_class.config_class.field_names()
            kwargs["lever"] = {k: v for k, v in kwargs["lever"].items() if k in own}
        env = env_cls(seed=state["default_seed"], **kwargs)
        try:
            env.reset(seed=0)
            env.np_random.bit_generator.state = state["np_random_state"]
            env.sim.load_state_dict(state["sim"])
            env._load_env_state(state["env"])
            saved_round = env.sim.round
            if (
                isinstance(saved_round, bool)
                or not isinstance(saved_round, int | np.integer)
                or not 0 <= saved_round <= env.config.rounds
            ):
                raise ValueError(
                    f"sim.round={saved_round!r} is not allowed: an integer in "
                    f"[0, rounds={env.config.rounds}]"
                )
            env.sim.check_round_starts()
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            raise CheckpointError(
                f"{path}: the saved state does not fit the env: {type(err).__name__}: {err}"
            ) from err
        return env


def row_bounds_box(low: np.ndarray, high: np.ndarray, rows: int) -> spaces.Box:
    """``spaces.Box(broadcast_to(low, (rows, D)), broadcast_to(high, (rows, D)), float32)``
    built from the (D,) bounds alone: its ``low``, ``high``, ``bounded_below`` and
    ``bounded_above`` are read-only (rows, D) views of one row each. Same values, same checks
    (``contains``, ``sample``, ``==``), but no (rows, D) arrays to fill and scan: 0.5 GB and
    seconds of env construction at 1M users (K = 391,240 arms)."""
    row = spaces.Box(low[None, :], high[None, :], dtype=np.float32)
    shape = (rows, row.shape[1])
    row._shape = shape
    for name in ("low", "high", "bounded_below", "bounded_above"):
        setattr(row, name, np.broadcast_to(getattr(row, name), shape))
    return row


def response_spaces(budget: int, low: float = 0.0, high: float = 1.0) -> dict[str, spaces.Space]:
    """The ``observe_response=True`` observation keys: per slot of the previous round's slate,
    whether its arm took effect, its reward (in [``low``, ``high``]), and whether the
    population reacted to it."""
    return {
        "response_applied": spaces.MultiBinary(budget),
        "response_reward": spaces.Box(low, high, (budget,), np.float32),
        "response_reacted": spaces.MultiBinary(budget),
    }


def empty_response(budget: int) -> dict[str, np.ndarray]:
    """The response before the first step of an episode: no slate, all zeros."""
    return {
        "response_applied": np.zeros(budget, np.int8),
        "response_reward": np.zeros(budget, np.float32),
        "response_reacted": np.zeros(budget, np.int8),
    }


def load_env(path: str | Path, **overrides: Any) -> PolicySimEnv:
    """Load an env saved with ``env.save(path)`` (works through ``env.unwrapped.save``);
    ``overrides`` replace config fields (see :meth:`PolicySimEnv.load`)."""
    return PolicySimEnv.load(path, **overrides)
