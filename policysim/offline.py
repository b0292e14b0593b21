"""Offline-RL export: record a run's episodes as a Minari dataset.

    policysim run --policy egreedy --record datasets/          # CLI
    run(RunConfig(..., record="datasets/"))                    # Python

writes the dataset ``policysim-rec/egreedy-v0`` (``policysim-<env>/<policy>-v0``, or
``record_id``) under ``datasets/``, which Minari reads back with

    MINARI_DATASETS_PATH=datasets python -c "import minari; d = minari.load_dataset('policysim-rec/egreedy-v0')"

Each episode holds the Dict observations (T + 1 of them, the arm contexts and the mask; the
optional user, response and graph arrays as configured — a ``spaces.Graph`` observation
cannot be stored and is refused), the (T, budget) slates, rewards, terminations and
truncations, and per-step infos with a fixed layout (Minari needs every step's info to have
the same keys and shapes; the reset info is the first entry, zeros where nothing happened):

    round (int64), arm_indices / arm_applied / arm_rewards (budget,), propensity (budget,)
    float64 (the logging policy's inclusion probability of each slot's arm, NaN for an empty
    slot; :meth:`bandits.base.Policy.select_with_propensities`), and ``metric_<name>``
    (float64) for each platform metric of the first step (NaN at reset, and for a metric a
    later step lacks).

The dataset stores the env's spec (id, kwargs, ``max_episode_steps``) so that
``dataset.recover_environment()`` rebuilds the env; Minari drops a spec whose kwargs are not
JSON (e.g. ``users=`` a Brain object), and the dataset then loads without it.

The episodes are built as Minari ``EpisodeBuffer``\\ s and written with
``minari.create_dataset_from_buffers`` in Minari's Arrow format (pyarrow). Minari's
``DataCollector`` wrapper would need its ``create`` extra (jax, for tree maps over the
Dict observation) and HDF5 (h5py) by default; building the buffers here needs neither.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from policysim_infra.extras import require

#: Minari storage format used for the export (Arrow: pyarrow, which Minari's arrow extra needs).
DATA_FORMAT = "arrow"


def default_dataset_id(env_id: str, policy: str) -> str:
    """``policysim-rec/<policy>-v0`` for PolicySim-Rec-v0 (``policysim-exposure/...`` for
    Exposure)."""
    short = env_id.removeprefix("PolicySim-").split("-v")[0].lower()
    return f"policysim-{short}/{policy}-v0"


@contextlib.contextmanager
def datasets_path(directory: str | Path) -> Iterator[Path]:
    """Point Minari's ``MINARI_DATASETS_PATH`` at ``directory`` for the duration."""
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(directory)
    try:
        yield directory
    finally:
        if previous is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = previous


def check_dataset_free(directory: str | Path, dataset_id: str) -> None:
    """Raise ValueError if ``directory`` already holds the dataset ``dataset_id`` (or the id is
    not a valid Minari id)."""
    require("minari", "rl", "recording a Minari dataset")
    from minari.dataset.minari_dataset import parse_dataset_id

    try:
        parse_dataset_id(dataset_id)
    except Exception as err:  # noqa: BLE001 - minari raises various types for a bad id
        raise ValueError(
            f"record_id={dataset_id!r} is not a Minari dataset id "
            f"((namespace/)(env_name/)name-v<version>): {err}"
        ) from err
    if (Path(directory) / dataset_id).exists():
        raise ValueError(
            f"dataset {dataset_id!r} already exists in {directory}: choose another "
            "record_id or folder"
        )


class EpisodeRecorder:
    """Collects episodes of a PolicySim env as Minari ``EpisodeBuffer``\\ s.

    Call :meth:`reset` after ``env.reset`` and :meth:`step` after every ``env.step``.
    """

    def __init__(self, observation_space: Any, budget: int) -> None:
        from gymnasium import spaces

        if isinstance(observation_space, spaces.Dict) and any(
            isinstance(s, spaces.Graph) for s in observation_space.spaces.values()
        ):
            raise ValueError(
                "graph_observation=True cannot be recorded: Minari cannot store a "
                "spaces.Graph observation; record without it"
            )
        self.budget = int(budget)
        self._finished: list[dict[str, Any]] = []
        self._events: list[dict[str, Any]] = []
        self._metric_keys: tuple[str, ...] | None = None
        self._current: dict[str, Any] | None = None

    def _info(self, info: dict[str, Any], propensity: np.ndarray | None) -> dict[str, Any]:
        b = self.budget
        metrics = info.get("metrics")
        if metrics is not None and self._metric_keys is None:
            self._metric_keys = tuple(sorted(metrics))
        keys = self._metric_keys or ()
        return {
            "round": np.int64(info.get("round", 0)),
            "arm_indices": np.asarray(info.get("arm_indices", np.full(b, -1)), np.int64),
            "arm_applied": np.asarray(info.get("arm_applied", np.zeros(b, bool)), np.bool_),
            "arm_rewards": np.asarray(info.get("arm_rewards", np.zeros(b)), np.float32),
            "propensity": np.full(b, np.nan)
            if propensity is None
            else np.asarray(propensity, np.float64),
            **{
                f"metric_{k}": np.float64(metrics.get(k, np.nan)) if metrics else np.float64(np.nan)
                for k in keys
            },
        }

    def reset(self, obs: dict[str, Any], info: dict[str, Any], seed: int | None) -> None:
        """Start an episode from the reset observation (an unfinished one is dropped)."""
        self._apply({"seed": seed, "obs": obs, "info": self._info(info, None)})

    def step(
        self,
        action: np.ndarray,
        obs: dict[str, Any],
        reward: float,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
        propensity: np.ndarray | None = None,
    ) -> None:
        """One step; the episode is stored when it terminates or is truncated."""
        if self._current is None:
            raise RuntimeError("call reset() before step()")
        self._apply(
            {
                "action": np.asarray(action, np.int64),
                "obs": obs,
                "reward": float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
                "info": self._info(info, propensity),
            }
        )

    def _apply(self, event: dict[str, Any]) -> None:
        self._events.append(event)
        if "action" not in event:
            self._current = {
                "seed": event["seed"],
                "observations": [event["obs"]],
                "actions": [],
                "rewards": [],
                "terminations": [],
                "truncations": [],
                "infos": [event["info"]],
            }
            return
        episode = self._current
        if episode is None:
            raise ValueError("a recorded step comes before any reset")
        episode["actions"].append(event["action"])
        episode["observations"].append(event["obs"])
        episode["rewards"].append(float(event["reward"]))
        episode["terminations"].append(bool(event["terminated"]))
        episode["truncations"].append(bool(event["truncated"]))
        episode["infos"].append(event["info"])
        if event["terminated"] or event["truncated"]:
            self._current = None
            for step_info in episode[
                "infos"
            ]:  # the reset info of the first episode came before the keys
                for key in self._metric_keys or ():
                    step_info.setdefault(f"metric_{key}", np.float64(np.nan))
            self._finished.append(episode)

    @property
    def episodes(self) -> list[Any]:
        """The finished episodes as Minari ``EpisodeBuffer``\\ s."""
        require("minari", "rl", "recording a Minari dataset")
        from minari.data_collector import EpisodeBuffer

        buffers = []
        for i, episode in enumerate(self._finished):
            infos = episode["infos"]
            observations = {
                key: [o[key] for o in episode["observations"]] for key in episode["observations"][0]
            }
            buffers.append(
                EpisodeBuffer(
                    id=i,
                    seed=episode["seed"],
                    observations=observations,
                    actions=episode["actions"],
                    rewards=episode["rewards"],
                    terminations=episode["terminations"],
                    truncations=episode["truncations"],
                    infos={key: [s[key] for s in infos] for key in infos[0]},
                )
            )
        return buffers

    def state_dict(self) -> dict[str, Any]:
        """What was recorded so far, data only: ``events`` (resets and steps, an append-only
        list) and the metric names."""
        return {
            "events": self._events,
            "metric_keys": None if self._metric_keys is None else list(self._metric_keys),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        keys = state["metric_keys"]
        self._metric_keys = None if keys is None else tuple(str(k) for k in keys)
        self._events, self._finished, self._current = [], [], None
        for event in state["events"]:
            self._apply(event)

    def write(
        self,
        directory: str | Path,
        dataset_id: str,
        env: Any,
        algorithm_name: str | None = None,
        description: str | None = None,
    ) -> Path:
        """Write the recorded episodes as the Minari dataset ``dataset_id`` under
        ``directory``; returns the dataset's folder. An existing dataset of that id is refused.
        The dataset is written in a staging folder and moved into place whole, so its folder
        exists only once complete (a full disk leaves no partial dataset)."""
        import shutil

        minari = require("minari", "rl", "recording a Minari dataset")
        if not self._finished:
            raise ValueError("no finished episode was recorded")
        base = getattr(env, "unwrapped", env)
        check_dataset_free(directory, dataset_id)
        final = Path(directory).resolve() / dataset_id
        staging = Path(directory).resolve() / f".staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            with datasets_path(staging) as root, warnings.catch_warnings():
                # Minari asks for author / email / code permalink, which matter when publishing a
                # dataset; a local recording has none
                warnings.filterwarnings("ignore", message=r".*is set to None.*")
                minari.create_dataset_from_buffers(
                    dataset_id,
                    self.episodes,
                    env=base.spec,
                    observation_space=base.observation_space,
                    action_space=base.action_space,
                    algorithm_name=algorithm_name,
                    description=description,
                    data_format=DATA_FORMAT,
                    requirements=["policysim"],
                )
            written = root / dataset_id
            for item in sorted(root.rglob("*")):  # namespace metadata beside the dataset
                target = Path(directory).resolve() / item.relative_to(root)
                if item.is_file() and written not in item.parents and not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(item, target)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(written, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return final
