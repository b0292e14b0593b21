"""A native Gymnasium vector env of the PolicySim envs (``vectorization_mode="vector_entry_point"``).

    envs = gym.make_vec("PolicySim-Rec-v0", num_envs=16, vectorization_mode="vector_entry_point",
                        num_users=1000)
    obs, info = envs.reset(seed=0)         # sub-env i starts from seed 0 + i
    obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())

:class:`PolicySimVectorEnv` holds N sub-envs (the env class itself, no wrapper stack) and steps
them one after another in one process. It follows Gymnasium's :class:`~gymnasium.vector.VectorEnv`
API: batched spaces, ``metadata["autoreset_mode"]`` (``NEXT_STEP`` by default, as
``SyncVectorEnv``; ``SAME_STEP`` or ``DISABLED`` with ``autoreset_mode=``), and ``info`` as a
dict of arrays with ``_key`` masks, the same structure ``SyncVectorEnv`` returns.

Seeding is per sub-env: ``reset(seed=s)`` resets sub-env i with seed ``s + i`` (a list seeds each
one), and an autoreset draws the next episode from that sub-env's own stream. Each sub-env is
therefore bit for bit the single env of its seed: ``gym.make(env_id).reset(seed=s + i)`` stepped
with the same actions (and ``reset()`` after each truncation) returns the same observations,
rewards and infos (``tests/socialenv/test_vector_env.py`` checks it against the single env and
against ``SyncVectorEnv``).

What it saves over ``SyncVectorEnv``: the wrapper stack of every sub-env, the per-env recursive
``_add_info`` (the infos are batched key by key), and the deep copy of the observation.
What it does not do (yet): batch the round's kernels across the N worlds; a sub-env's round
costs what a single env's round costs (``benchmarks/vector_env.py``, mode ``native``).

Every core: ``workers=W`` splits the sub-envs into W contiguous blocks, each stepped by its own
process (:mod:`socialenv.envs.vector_workers`) into one shared-memory observation batch. A
sub-env is built and seeded as above whichever worker holds it, so the results are the same
for every W, bit for bit (``tests/socialenv/test_vector_env.py``). The workers start with
``context`` ("spawn" by default), so a script that builds the env with workers needs the
``if __name__ == "__main__":`` guard, as with Gymnasium's ``AsyncVectorEnv``. Unlike
``AsyncVectorEnv`` (one process per sub-env, each observation pickled back), W is the number
of cores to use, not N. ``call``, ``get_attr`` and ``set_attr`` reach the sub-envs in their
workers (arguments and results are pickled); ``envs`` is then empty.

SB3: :class:`baselines.sb3_vector.SB3VecEnv` adapts it to ``stable_baselines3``'s ``VecEnv``
(SB3's same-step reset, ``terminal_observation`` in the info of an ended episode, infos as a
list of dicts).
"""

from __future__ import annotations

from collections.abc import Sequence
from copy import deepcopy
from enum import Enum
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from socialenv.envs.base import PolicySimEnv
from socialenv.envs.registration import ENV_IDS

if TYPE_CHECKING:
    from socialenv.envs.vector_workers import WorkerPool

try:
    from gymnasium.vector import AutoresetMode
except ImportError:  # gymnasium 1.0 has no enum (its vector envs reset on the next step)

    class AutoresetMode(Enum):  # type: ignore[no-redef]
        """Gymnasium >= 1.1's ``gymnasium.vector.AutoresetMode``."""

        NEXT_STEP = "NextStep"
        SAME_STEP = "SameStep"
        DISABLED = "Disabled"


_AUTORESET_MODES = {mode.value: mode for mode in AutoresetMode}


class PolicySimVectorEnv(VectorEnv):
    """N PolicySim sub-envs of one id, stepped in one process (see the module docstring).

    Args:
        env_id: a PolicySim env id (``PolicySim-Rec-v0``, ``PolicySim-Exposure-v0``,
            ``PolicySim-Moderation-v0``).
        num_envs: the number of sub-envs, >= 1.
        autoreset_mode: ``AutoresetMode`` or its value ("NextStep", "SameStep", "Disabled").
        copy: return a copy of the batched observation (True, as ``SyncVectorEnv``) or the
            buffer the next step overwrites (False).
        seed: seeds the first ``reset()`` that names no seed (sub-env i: ``seed + i``).
        workers: processes that step the sub-envs, each a contiguous block of them, in
            parallel (1: all in this process). Results do not depend on it.
        context: the ``multiprocessing`` start method of the workers ("spawn", the default,
            "forkserver" or "fork").
        **env_kwargs: the env's own arguments (``render_mode`` included), the same for every
            sub-env.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        seed: int | None = None,
        workers: int = 1,
        context: str | None = None,
        **env_kwargs: Any,
    ) -> None:
        if env_id not in ENV_IDS:
            raise ValueError(f"env_id={env_id!r} is not allowed: one of {sorted(ENV_IDS)}")
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r} is not allowed: an integer >= 1")
        if isinstance(autoreset_mode, str):
            if autoreset_mode not in _AUTORESET_MODES:
                raise ValueError(
                    f"autoreset_mode={autoreset_mode!r} is not allowed: one of "
                    f"{sorted(_AUTORESET_MODES)} or a gymnasium.vector.AutoresetMode"
                )
            autoreset_mode = _AUTORESET_MODES[autoreset_mode]
        if not isinstance(autoreset_mode, AutoresetMode):
            raise ValueError(
                f"autoreset_mode={autoreset_mode!r} is not allowed: a gymnasium.vector.AutoresetMode"
            )
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0
        ):
            raise ValueError(f"seed={seed!r} is not allowed: an integer >= 0 or None")
        if (
            isinstance(workers, bool)
            or not isinstance(workers, int | np.integer)
            or not 1 <= workers <= num_envs
        ):
            raise ValueError(
                f"workers={workers!r} is not allowed: an integer from 1 to num_envs={num_envs}"
            )
        # make_vec passes the spec's max_episode_steps; the env truncates after ``rounds`` itself
        env_kwargs.pop("max_episode_steps", None)
        self.env_id = env_id
        self.num_envs = int(num_envs)
        self.copy = copy
        self.autoreset_mode = autoreset_mode
        #: the sub-envs; empty when ``workers`` > 1 (they live in the worker processes)
        self.envs: list[PolicySimEnv] = []
        env_class = load_env_creator(ENV_IDS[env_id])
        spec = gym.spec(env_id)
        # with workers, one env is built here only for its spaces (no world before a reset)
        for _ in range(self.num_envs if workers == 1 else 1):
            env = env_class(**env_kwargs)
            env.spec = spec
            self.envs.append(env)
        first = self.envs[0]
        self.render_mode = first.render_mode
        self.metadata = {**first.metadata, "autoreset_mode": autoreset_mode}
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._pool: WorkerPool | None = None
        if workers > 1:
            from socialenv.envs.vector_workers import WorkerPool

            first.close()
            self.envs = []
            self._pool = WorkerPool(
                env_id,
                self.num_envs,
                int(workers),
                autoreset_mode.value,
                env_kwargs,
                self.single_observation_space,
                PolicySimVectorEnv,
                context,
            )
            self._observations = self._pool.observations
        else:
            self._observations = create_empty_array(
                self.single_observation_space, n=self.num_envs, fn=np.zeros
            )
        self._env_obs: list[Any] = [None] * self.num_envs
        self._rewards = np.zeros(self.num_envs, np.float64)
        self._terminations = np.zeros(self.num_envs, np.bool_)
        self._truncations = np.zeros(self.num_envs, np.bool_)
        self._autoreset_envs = np.zeros(self.num_envs, np.bool_)
        self._pending_seed = seed

    # ------------------------------------------------------------------ gym.vector API
    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-envs (``options={"reset_mask": (N,) bool}``: only those): seed ``s``
        resets sub-env i with ``s + i``; a list gives each sub-env its seed (None: its own
        stream); None resets each from its own stream (after the constructor's ``seed``)."""
        if seed is None and self._pending_seed is not None:
            seed = self._pending_seed
        self._pending_seed = None
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, int | np.integer) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(
                    f"seed has {len(seeds)} entries; expected num_envs={self.num_envs} "
                    "(one per sub-env), an integer or None"
                )
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if mask is None:
            mask = np.ones(self.num_envs, np.bool_)
        else:
            mask = np.asarray(mask)
            if mask.dtype != np.bool_ or mask.shape != (self.num_envs,):
                raise ValueError(
                    f"options['reset_mask'] must be a ({self.num_envs},) bool array; got "
                    f"dtype {mask.dtype}, shape {mask.shape}"
                )
        if self._pool is not None:
            infos = self._pool.reset(seeds, mask, options or None)
            self._clear(mask)
        else:
            infos = self._reset_envs(seeds, mask, options or None)
        obs = deepcopy(self._observations) if self.copy else self._observations
        return obs, batch_infos(infos, self.num_envs)

    def _reset_envs(
        self, seeds: Sequence[int | None], mask: np.ndarray, options: dict[str, Any] | None
    ) -> list[tuple[int, dict[str, Any]]]:
        """Reset the sub-envs of ``mask`` in this process; their ``(index, info)``."""
        infos: list[tuple[int, dict[str, Any]]] = []
        for i in map(int, np.flatnonzero(mask)):
            self._env_obs[i], info = self.envs[i].reset(seed=seeds[i], options=options)
            infos.append((i, info))
        self._clear(mask)
        self._observations = concatenate(
            self.single_observation_space, self._env_obs, self._observations
        )
        return infos

    def _clear(self, mask: np.ndarray) -> None:
        self._rewards[mask] = 0.0
        self._terminations[mask] = False
        self._truncations[mask] = False
        self._autoreset_envs[mask] = False

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env with its action (row i of ``actions``); a sub-env whose episode
        ended resets as ``autoreset_mode`` says (``NEXT_STEP``: on this step, with reward 0
        and the reset's info; ``SAME_STEP``: at once, its last observation and info in
        ``info["final_obs"]``, ``info["final_info"]``)."""
        obs, rewards, terminations, truncations, infos = self.step_each(actions)
        finals = [
            (i, {"final_obs": info.pop("final_obs"), "final_info": info.pop("final_info")})
            for i, info in enumerate(infos)
            if "final_obs" in info
        ]
        info = batch_infos(list(enumerate(infos)), self.num_envs)
        if finals:
            info = {**info, **_final_infos(finals, self.num_envs)}
        return obs, rewards, terminations, truncations, info

    def step_each(
        self, actions: Any
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """:meth:`step` with the infos unbatched: a list of each sub-env's own info dict (with
        ``final_obs`` and ``final_info`` for an episode that ended under ``SAME_STEP``), the
        form SB3's ``VecEnv`` wants."""
        if self._pool is not None:
            rewards, terminations, truncations, infos = self._pool.step(
                list(iterate(self.action_space, actions))
            )
            self._rewards[:], self._terminations[:], self._truncations[:] = (
                rewards,
                terminations,
                truncations,
            )
            self._autoreset_envs = self._terminations | self._truncations
        else:  # sets the flags itself, as each worker's block does
            infos = self._step_envs(list(iterate(self.action_space, actions)))
        return (
            deepcopy(self._observations) if self.copy else self._observations,
            self._rewards.copy(),
            self._terminations.copy(),
            self._truncations.copy(),
            infos,
        )

    def _step_envs(self, actions: list[Any]) -> list[dict[str, Any]]:
        """Step (or autoreset) every sub-env of this process with its action; their infos."""
        mode = self.autoreset_mode
        infos: list[dict[str, Any]] = []
        for i, (env, action) in enumerate(zip(self.envs, actions, strict=True)):
            if mode is AutoresetMode.NEXT_STEP and self._autoreset_envs[i]:
                self._env_obs[i], info = env.reset()
                self._rewards[i] = 0.0
                self._terminations[i] = False
                self._truncations[i] = False
            else:
                if mode is AutoresetMode.DISABLED and self._autoreset_envs[i]:
                    raise RuntimeError(
                        f"sub-env {i}'s episode is over: with autoreset_mode=DISABLED call "
                        "reset(options={'reset_mask': ...}) before stepping it"
                    )
                (
                    self._env_obs[i],
                    self._rewards[i],
                    self._terminations[i],
                    self._truncations[i],
                    info,
                ) = env.step(action)
                if mode is AutoresetMode.SAME_STEP and (
                    self._terminations[i] or self._truncations[i]
                ):
                    final = {"final_obs": self._env_obs[i], "final_info": info}
                    self._env_obs[i], info = env.reset()
                    info = {**info, **final}
            infos.append(info)
        self._observations = concatenate(
            self.single_observation_space, self._env_obs, self._observations
        )
        self._autoreset_envs = self._terminations | self._truncations
        return infos

    def render(self) -> tuple[Any, ...] | None:
        """Each sub-env's frame (``render_mode`` as the single env)."""
        if self.render_mode is None:
            return None
        return self.call("render")

    def close_extras(self, **kwargs: Any) -> None:
        if self._pool is not None:
            self._pool.close()
        for env in self.envs:
            env.close()

    # ------------------------------------------------------------------ sub-env access
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each sub-env's attribute ``name`` (called with the arguments if it is callable), as
        ``SyncVectorEnv.call``; with workers, the results travel back pickled."""
        return tuple(self.call_at(range(self.num_envs), name, *args, **kwargs))

    def call_at(self, indices: Sequence[int], name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """:meth:`call` on the sub-envs at ``indices`` only."""
        indices = self._checked_indices(indices)
        if self._pool is not None:
            return self._pool.call(indices, name, args, kwargs)
        results = []
        for i in indices:
            value = getattr(self.envs[i], name)
            results.append(value(*args, **kwargs) if callable(value) else value)
        return results

    def get_attr(self, name: str, indices: Sequence[int] | None = None) -> tuple[Any, ...]:
        """Each sub-env's attribute ``name`` (of the sub-envs at ``indices``: all by default)."""
        indices = self._checked_indices(range(self.num_envs) if indices is None else indices)
        if self._pool is not None:
            return tuple(self._pool.get_attr(indices, name))
        return tuple(getattr(self.envs[i], name) for i in indices)

    def set_attr(self, name: str, values: Any, indices: Sequence[int] | None = None) -> None:
        """Set ``name`` on each sub-env (at ``indices``: all by default): one value for all, or
        a list with one per sub-env."""
        indices = self._checked_indices(range(self.num_envs) if indices is None else indices)
        if not isinstance(values, list | tuple):
            values = [values] * len(indices)
        if len(values) != len(indices):
            raise ValueError(f"values has {len(values)} entries; expected {len(indices)}")
        if self._pool is not None:
            self._pool.set_attr(indices, name, list(values))
            return
        for i, value in zip(indices, values, strict=True):
            setattr(self.envs[i], name, value)

    def _checked_indices(self, indices: Sequence[int]) -> list[int]:
        out = [int(i) for i in indices]
        if any(not 0 <= i < self.num_envs for i in out):
            raise ValueError(
                f"indices={out!r} is not allowed: integers from 0 to {self.num_envs - 1}"
            )
        return out


def batch_infos(infos: list[tuple[int, dict[str, Any]]], num_envs: int) -> dict[str, Any]:
    """The vector info of the sub-env infos ``(index, info)``: the structure Gymnasium's
    ``VectorEnv._add_info`` builds (a nested dict of (N, ...) arrays, each key with a ``_key``
    (N,) bool mask of the sub-envs that had it), built key by key instead of env by env."""
    out: dict[str, Any] = {}
    keys: dict[str, None] = {}
    for _, info in infos:
        keys.update(dict.fromkeys(info))
    for key in keys:
        entries = [(i, info[key]) for i, info in infos if key in info]
        first = entries[0][1]
        if isinstance(first, dict) and all(isinstance(v, dict) for _, v in entries):
            out[key] = batch_infos(entries, num_envs)
        else:
            out[key] = _batch_values(entries, num_envs)
        mask = np.zeros(num_envs, np.bool_)
        mask[[i for i, _ in entries]] = True
        out[f"_{key}"] = mask
    return out


def _batch_values(entries: list[tuple[int, Any]], num_envs: int) -> np.ndarray:
    """(N, ...) array of the values at their sub-env index (zeros / None elsewhere); the
    dtype is the first value's, as ``VectorEnv._add_info``."""
    index, values = zip(*entries, strict=True)
    first = values[0]
    if type(first) in (int, float, bool) or isinstance(first, np.number):
        array = np.zeros(num_envs, dtype=type(first))
        array[list(index)] = values
    elif isinstance(first, np.ndarray):
        array = np.zeros((num_envs, *first.shape), dtype=first.dtype)
        for i, value in entries:
            array[i] = value
    else:
        array = np.full(num_envs, None, dtype=object)
        for i, value in entries:
            array[i] = value
    return array


def _final_infos(finals: list[tuple[int, dict[str, Any]]], num_envs: int) -> dict[str, Any]:
    """``final_obs`` (an object array of the ended episodes' last observations, as Gymnasium)
    and ``final_info`` (their batched infos), with their masks."""
    final_obs = np.full(num_envs, None, dtype=object)
    mask = np.zeros(num_envs, np.bool_)
    for i, entry in finals:
        final_obs[i] = entry["final_obs"]
        mask[i] = True
    final_info = batch_infos([(i, entry["final_info"]) for i, entry in finals], num_envs)
    return {
        "final_obs": final_obs,
        "_final_obs": mask,
        "final_info": final_info,
        "_final_info": mask.copy(),
    }


def rec_vector_env(num_envs: int, **kwargs: Any) -> PolicySimVectorEnv:
    """The ``vector_entry_point`` of ``PolicySim-Rec-v0``."""
    return PolicySimVectorEnv("PolicySim-Rec-v0", num_envs, **kwargs)


def exposure_vector_env(num_envs: int, **kwargs: Any) -> PolicySimVectorEnv:
    """The ``vector_entry_point`` of ``PolicySim-Exposure-v0``."""
    return PolicySimVectorEnv("PolicySim-Exposure-v0", num_envs, **kwargs)


def moderation_vector_env(num_envs: int, **kwargs: Any) -> PolicySimVectorEnv:
    """The ``vector_entry_point`` of ``PolicySim-Moderation-v0``."""
    return PolicySimVectorEnv("PolicySim-Moderation-v0", num_envs, **kwargs)
