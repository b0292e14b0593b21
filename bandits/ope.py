"""Off-policy evaluation (OPE) of slate policies from logged rounds, at the arm level.

A logged round holds the K candidate arms (contexts and mask), the slate the logging policy
picked, the propensity of each picked arm (its inclusion probability, from
:meth:`bandits.base.Policy.select_with_propensities`) and each slot's reward. The value of a
policy is its expected step reward, ``sum of the slate's slot rewards / budget``.

**Assumption (additive slates).** The reward of an arm depends on the arm and its context,
not on which other arms share the slate. Then, with p0(a) and pe(a) the logging and target
policies' inclusion probabilities in a round,

    E_target[Σ_{a ∈ slate} r_a] = Σ_a pe(a)·E[r_a] = E_logging[Σ_{a ∈ slate} pe(a)/p0(a)·r_a],

which gives the arm-level (Horvitz–Thompson) estimators below, for any slate size and any
selection rule. In PolicySim this holds approximately: arms of one slate reach different
users (Exposure slates name each user once), but they share the round's platform dynamics,
and the policy's actions shape later rounds' contexts, which OPE treats as given (a contextual
bandit view: the estimate is the value of the target's immediate decisions on the logged
contexts).

Estimators (T rounds, budget B, w = pe/p0 of each logged arm):

- IPS: (1/T) Σ_t (1/B) Σ_{a ∈ S_t} w_a r_a.
- SNIPS: the IPS sum divided by Σ_t Σ_a w_a / Σ_t Σ_a pe(a) (under the logging policy
  E[Σ_a w_a] = Σ_a pe(a), the target's expected picks: k_t, the logged count, unless the
  target leaves slots to a null arm), which trades a small bias for a lower variance.
- A target with a null arm (``null_reward``) leaves slots empty; each empty slot is worth
  ``empty_slot_value`` (:func:`estimate`), added exactly since Σ_a pe(a) is known.
- DR: (1/T) Σ_t (1/B) [Σ_a pe(a) q̂(x_a) + Σ_{a ∈ S_t} w_a (r_a − q̂(x_a))], with q̂ a ridge
  reward model cross-fitted over logged episodes (fit on the other episodes).

Why not the Open Bandit Pipeline: its current release (obp 0.5.x) requires Python < 3.11, and
on 3.11 pip falls back to obp 0.4.1 (2021); its estimators take one action per position with
action distributions summing to one, not inclusion probabilities of a slate with masked arms.
The estimators here are a few lines each; ``tests/bandits/test_ope.py`` checks them against obp
0.4.1's IPW/SNIPW/DR on single-arm slates when obp is installed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bandits.base import PROPENSITY_METHODS
from bandits.ridge import OnlineRidge
from policysim_infra.validation import did_you_mean

ESTIMATORS: tuple[str, ...] = ("ips", "snips", "dr")
#: ``logged_rounds.npz`` members: name -> (ndim, allowed dtype kinds); the first eight are required.
LOG_MEMBERS: dict[str, tuple[int, str]] = {
    "contexts": (3, "f"),
    "mask": (2, "b"),
    "arms": (2, "iu"),
    "propensities": (2, "f"),
    "rewards": (2, "f"),
    "applied": (2, "b"),
    "episode": (1, "iu"),
    "method": (1, "U"),
    "groups": (1, "iu"),
    "per_group": (0, "iu"),
}
#: Largest total of array bytes :meth:`LoggedRounds.load` reads (a file may also not expand
#: more than ``policysim_infra.npz.MAX_EXPANSION`` times its size on disk).
MAX_LOG_BYTES = 64 * 1024**3


@dataclass
class LoggedRounds:
    """Logged bandit feedback of T rounds (one file per run: ``logged_rounds.npz``).

    Attributes:
        contexts: (T, K, D) float32 arm contexts of each round.
        mask: (T, K) bool, the arms the policy could pick.
        arms: (T, B) int64 picked arm per slot, -1 for an empty slot.
        propensities: (T, B) float64 inclusion probability of each picked arm (NaN if empty).
        rewards: (T, B) float32 per-slot rewards (0 for empty or not applied slots).
        applied: (T, B) bool, the slot's arm took effect.
        episode: (T,) int64 index of the (seed, episode) each round belongs to.
        method: (T,) str, how the propensities were obtained (``PROPENSITY_METHODS``).
        groups: (K,) int64 arm groups when the slate holds at most ``per_group`` arms per
            group (e.g. per sampled user), else None.
        per_group: arms of one group the slate may hold.
    """

    contexts: np.ndarray
    mask: np.ndarray
    arms: np.ndarray
    propensities: np.ndarray
    rewards: np.ndarray
    applied: np.ndarray
    episode: np.ndarray
    method: np.ndarray
    groups: np.ndarray | None = None
    per_group: int = 1

    def __post_init__(self) -> None:
        self.per_group = int(np.asarray(self.per_group))
        t, k = self.mask.shape
        b = self.arms.shape[1]
        expected = {
            "contexts": (t, k),
            "arms": (t, b),
            "propensities": (t, b),
            "rewards": (t, b),
            "applied": (t, b),
            "episode": (t,),
            "method": (t,),
        }
        for name, shape in expected.items():
            if getattr(self, name).shape[: len(shape)] != shape:
                raise ValueError(
                    f"{name} must have shape {shape}...; got {getattr(self, name).shape}"
                )
        filled = self.arms >= 0
        p = self.propensities[filled]
        if np.any(~(p > 0) | (p > 1 + 1e-9)):
            raise ValueError("propensities of picked arms must lie in (0, 1]")
        if np.any(self.arms[filled] >= k):
            raise ValueError(f"arms must be -1 (empty) or an arm index < K={k}")
        for name in ("contexts", "rewards"):
            if not np.isfinite(getattr(self, name)).all():
                raise ValueError(
                    f"{name} holds NaN or infinite values (the estimates would be NaN)"
                )
        unknown = sorted(set(np.unique(self.method).tolist()) - set(PROPENSITY_METHODS) - {""})
        if unknown:
            raise ValueError(
                f"method holds {unknown[:3]}: not allowed: one of {PROPENSITY_METHODS} "
                "(or '' for a round with nothing picked)"
            )

    @property
    def budget(self) -> int:
        return int(self.arms.shape[1])

    @property
    def num_rounds(self) -> int:
        return int(self.arms.shape[0])

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        arrays = {
            k: getattr(self, k)
            for k in ("contexts", "mask", "arms", "propensities", "rewards", "applied", "episode")
        }
        arrays["method"] = self.method.astype(str)
        if self.groups is not None:
            arrays["groups"] = self.groups
            arrays["per_group"] = np.asarray(self.per_group)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:  # written whole or not at all (a full disk leaves the previous file)
            with tmp.open("wb") as fh:
                np.savez_compressed(fh, **arrays)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    @classmethod
    def load(cls, path: str | Path) -> LoggedRounds:
        """Read ``logged_rounds.npz`` (or a run folder holding one). Nothing is unpickled."""
        path = Path(path)
        if path.is_dir():
            path = path / "logged_rounds.npz"
        if not path.exists():
            raise FileNotFoundError(
                f"{path} does not exist (runs log it unless log_propensities=False)"
            )
        from policysim_infra.npz import NpzReader

        with NpzReader(
            path,
            max_bytes=MAX_LOG_BYTES,
            members=LOG_MEMBERS,
            required=list(LOG_MEMBERS)[:8],
            check=_check_log_headers,
            what="logged rounds",
        ) as reader:
            arrays = reader.read_all()
        try:
            return cls(**arrays)
        except ValueError as err:
            raise ValueError(f"logged rounds {path}: {err}") from None

    @classmethod
    def concatenate(cls, logs: list[LoggedRounds]) -> LoggedRounds:
        """One log of several (episodes renumbered so they stay distinct)."""
        if not logs:
            raise ValueError("logs must hold at least one LoggedRounds")
        offset, episodes = 0, []
        for log in logs:
            episodes.append(log.episode + offset)
            offset += int(log.episode.max()) + 1 if log.num_rounds else 0
        cat = {
            k: np.concatenate([getattr(log, k) for log in logs])
            for k in ("contexts", "mask", "arms", "propensities", "rewards", "applied", "method")
        }
        return cls(
            **cat,
            episode=np.concatenate(episodes),
            groups=logs[0].groups,
            per_group=logs[0].per_group,
        )


def _check_log_headers(headers: dict[str, tuple[tuple[int, ...], np.dtype]]) -> None:
    """The ``.npy`` headers of a ``logged_rounds.npz`` agree (T rounds, K arms, budget B)."""
    for name, (shape, dtype) in headers.items():
        ndim, kinds = LOG_MEMBERS[name]
        if len(shape) != ndim or dtype.kind not in kinds:
            raise ValueError(
                f"array {name!r}: shape {shape} of {dtype} is not allowed: {ndim} dimensions "
                f"of dtype kind {kinds!r}"
            )
    t, k = headers["mask"][0]
    b = headers["arms"][0][1]
    expected = {
        "contexts": (t, k),
        "arms": (t, b),
        "propensities": (t, b),
        "rewards": (t, b),
        "applied": (t, b),
        "episode": (t,),
        "method": (t,),
        "groups": (k,),
    }
    for name, want in expected.items():
        if name in headers and headers[name][0][: len(want)] != want:
            raise ValueError(f"array {name!r}: shape {headers[name][0]} is not allowed: {want}...")
    if ("groups" in headers) != ("per_group" in headers):
        raise ValueError("arrays 'groups' and 'per_group' come together")


class RoundLogger:
    """Collects :class:`LoggedRounds` round by round (the runner's writer)."""

    def __init__(self, groups: np.ndarray | None = None, per_group: int = 1) -> None:
        self.groups = groups
        self.per_group = per_group
        self._rows: list[dict[str, Any]] = []
        self._episode = -1

    def start_episode(self) -> None:
        """The rounds added next belong to a new episode."""
        self._episode += 1

    def add(
        self,
        contexts: np.ndarray,
        mask: np.ndarray,
        arms: np.ndarray,
        propensities: np.ndarray,
        method: str,
        slot_rewards: np.ndarray,
        applied: np.ndarray,
    ) -> None:
        """One round: ``arms`` (B,) with -1 (or any index >= K) for empty slots, the
        propensity of each picked arm (NaN for empty slots), the env's per-slot rewards."""
        arms = np.asarray(arms, np.int64).copy()
        arms[(arms < 0) | (arms >= contexts.shape[0])] = -1
        self._rows.append(
            {
                "contexts": np.asarray(contexts, np.float32),
                "mask": np.asarray(mask, bool),
                "arms": arms,
                "propensities": np.where(arms >= 0, propensities, np.nan),
                "rewards": np.asarray(slot_rewards, np.float32),
                "applied": np.asarray(applied, bool),
                "episode": np.int64(max(self._episode, 0)),
                "method": str(method),
            }
        )

    def __len__(self) -> int:
        return len(self._rows)

    def state_dict(self) -> dict[str, Any]:
        """The rounds logged so far (``rows``, an append-only list of per-round dicts), the
        episode counter and the groups, for a checkpoint."""
        return {
            "episode": self._episode,
            "rows": self._rows,
            "groups": self.groups,
            "per_group": self.per_group,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` (the rounds are checked as a :class:`LoggedRounds`)."""
        self.groups, self.per_group = state["groups"], int(state["per_group"])
        self._episode = int(state["episode"])
        rows = list(state["rows"])
        fields = {
            "contexts",
            "mask",
            "arms",
            "propensities",
            "rewards",
            "applied",
            "episode",
            "method",
        }
        if not all(isinstance(row, dict) and set(row) == fields for row in rows):
            raise ValueError(f"logged rows must be dicts of {sorted(fields)}")
        self._rows = rows
        if rows:
            self.rounds()  # shapes, propensities, finite values

    def rounds(self) -> LoggedRounds:
        if not self._rows:
            raise ValueError("no round was logged")
        return LoggedRounds(
            **{
                k: np.stack([r[k] for r in self._rows])
                for k in ("contexts", "mask", "arms", "propensities", "rewards", "applied")
            },
            episode=np.asarray([r["episode"] for r in self._rows], np.int64),
            method=np.asarray([r["method"] for r in self._rows]),
            groups=self.groups,
            per_group=self.per_group,
        )


def target_inclusion(policy: Any, logged: LoggedRounds) -> np.ndarray:
    """(T, K) inclusion probabilities of a fixed target ``policy`` (anything with
    ``inclusion_probabilities(contexts, mask, budget)``) on the logged rounds, with the number
    of arms the logging policy picked as the budget of each round (and, when the log has
    groups, at most ``per_group`` arms per group, the slate :func:`bandits.slate.select_per_group`
    builds). The policy does not learn here; evaluate a learning policy by freezing a copy."""
    return target_inclusion_and_methods(policy, logged)[0]


def target_inclusion_and_methods(
    policy: Any, logged: LoggedRounds
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`target_inclusion` and the (T,) method of each round's probabilities
    (:data:`bandits.base.PROPENSITY_METHODS`; "" for a round where nothing was picked)."""
    from bandits.slate import per_group_inclusion

    out = np.zeros(logged.mask.shape)
    methods = np.full(logged.num_rounds, "", dtype=object)
    for t in range(logged.num_rounds):
        k = int((logged.arms[t] >= 0).sum())
        if k == 0:
            continue
        if logged.groups is not None:
            out[t], methods[t] = per_group_inclusion(
                policy,
                logged.contexts[t],
                logged.mask[t],
                logged.budget,
                logged.groups,
                logged.per_group,
            )
        else:
            out[t], methods[t] = policy.inclusion_probabilities(
                logged.contexts[t], logged.mask[t], k
            )
    return out, methods.astype(str)


@dataclass
class OPEEstimate:
    """An estimate of a policy's value (mean step reward) and the half-width of its 95%
    t-interval over episodes: ``ci95`` is None (printed "n/a") with fewer than two episodes,
    where no interval can be computed."""

    estimator: str
    value: float
    ci95: float | None
    per_episode: np.ndarray = field(repr=False)

    def __str__(self) -> str:
        interval = (
            "(95% CI n/a: fewer than two episodes)" if self.ci95 is None else f"± {self.ci95:.4f}"
        )
        return f"{self.estimator}: {self.value:.4f} {interval}"


def _per_episode(contrib: np.ndarray, episode: np.ndarray) -> np.ndarray:
    ids, inverse = np.unique(episode, return_inverse=True)
    return np.bincount(inverse, weights=contrib, minlength=len(ids)) / np.bincount(
        inverse, minlength=len(ids)
    )


def _ci95(values: np.ndarray) -> float | None:
    if len(values) < 2:
        return None
    from scipy import stats

    return float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))


def _weights(target: np.ndarray, logged: LoggedRounds) -> np.ndarray:
    """(T, B) pe(a)/p0(a) of each logged arm, 0 for empty slots."""
    filled = logged.arms >= 0
    rows = np.broadcast_to(np.arange(logged.num_rounds)[:, None], logged.arms.shape)
    pe = target[rows[filled], logged.arms[filled]]
    w = np.zeros(logged.arms.shape)
    w[filled] = pe / logged.propensities[filled]
    return w


def cross_fitted_rewards(
    logged: LoggedRounds, regularization: float = 1.0, folds: int = 5
) -> np.ndarray:
    """(T, K) q̂(x) for every arm of every round: a ridge regression of slot rewards on the
    picked arms' contexts, fit on the episodes outside the round's fold (all episodes if
    there is only one)."""
    episodes = np.unique(logged.episode)
    folds = max(1, min(folds, len(episodes)))
    fold_of = {int(e): i % folds for i, e in enumerate(episodes)}
    round_fold = np.asarray([fold_of[int(e)] for e in logged.episode])
    d = logged.contexts.shape[2]
    q = np.zeros(logged.mask.shape)
    filled = logged.arms >= 0
    for fold in range(folds):
        train = (round_fold != fold) if folds > 1 else np.ones(logged.num_rounds, bool)
        model = OnlineRidge(d, regularization, True)
        rows, slots = np.nonzero(filled & train[:, None])
        if len(rows):
            model.update(
                logged.contexts[rows, logged.arms[rows, slots]].astype(np.float64),
                logged.rewards[rows, slots].astype(np.float64),
            )
        test = np.flatnonzero(round_fold == fold)
        if len(test):
            flat = logged.contexts[test].reshape(-1, d).astype(np.float64)
            q[test] = np.clip(model.predict(flat), 0.0, 1.0).reshape(len(test), -1)
    return q


def estimate(
    target: np.ndarray,
    logged: LoggedRounds,
    estimator: str = "dr",
    reward_model: np.ndarray | None = None,
    empty_slot_value: float = 0.0,
) -> OPEEstimate:
    """The value of the target policy whose (T, K) inclusion probabilities on the logged
    rounds are ``target`` (:func:`target_inclusion`).

    Args:
        target: (T, K) target inclusion probabilities.
        logged: the logging policy's rounds.
        estimator: "ips", "snips" or "dr" (see the module docstring).
        reward_model: (T, K) q̂ for DR; default :func:`cross_fitted_rewards`.
        empty_slot_value: the reward of a slot the target leaves empty (its null arm, e.g.
            0.5 on a PolicySim env's objective-form scale, where the platform's own choice
            fills it). The target's expected empty slots, B − Σ_a pe(a), are known exactly,
            so they add ``empty_slot_value`` × that / B to each round without weighting.
            Default 0: an empty slot earns nothing.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(
            f"estimator={estimator!r} is not allowed: use one of {ESTIMATORS}"
            f"{did_you_mean(estimator, ESTIMATORS)}"
        )
    target = np.asarray(target, np.float64)
    if target.shape != logged.mask.shape:
        raise ValueError(f"target must have shape (T, K) = {logged.mask.shape}; got {target.shape}")
    w = _weights(target, logged)
    rewards = np.where(logged.arms >= 0, logged.rewards, 0.0).astype(np.float64)
    b = logged.budget
    if estimator == "ips":
        contrib = (w * rewards).sum(axis=1) / b
    elif estimator == "snips":
        scale = target.sum() / max(w.sum(), 1e-12)  # E_logging[Σ w] = Σ pe: the target's picks
        contrib = scale * (w * rewards).sum(axis=1) / b
    else:
        q = (
            cross_fitted_rewards(logged)
            if reward_model is None
            else np.asarray(reward_model, np.float64)
        )
        filled = logged.arms >= 0
        q_logged = np.zeros(w.shape)
        rows, slots = np.nonzero(filled)
        q_logged[rows, slots] = q[rows, logged.arms[rows, slots]]
        direct = (target * q).sum(axis=1)
        contrib = (direct + (w * (rewards - q_logged)).sum(axis=1)) / b
    if empty_slot_value:
        contrib = contrib + empty_slot_value * (b - target.sum(axis=1)) / b
    per_episode = _per_episode(contrib, logged.episode)
    return OPEEstimate(estimator, float(contrib.mean()), _ci95(per_episode), per_episode)


def evaluate(
    policy: Any,
    logged: LoggedRounds,
    estimators: tuple[str, ...] = ESTIMATORS,
    empty_slot_value: float | None = None,
) -> dict[str, OPEEstimate]:
    """Every estimator's value of a fixed ``policy`` on ``logged``. ``empty_slot_value``
    (:func:`estimate`) defaults to the policy's ``null_reward`` (its null arm), else 0."""
    if empty_slot_value is None:
        empty_slot_value = getattr(policy, "null_reward", None) or 0.0
    target = target_inclusion(policy, logged)
    return {name: estimate(target, logged, name, None, empty_slot_value) for name in estimators}


__all__ = [
    "ESTIMATORS",
    "LoggedRounds",
    "OPEEstimate",
    "RoundLogger",
    "cross_fitted_rewards",
    "estimate",
    "evaluate",
    "target_inclusion",
    "target_inclusion_and_methods",
]
