"""Slates with at most ``per_group`` arms per group (one exposure level per user, a few
recommended slots per user).

A bandit ranks arms independently. When several arms describe the same entity and only one
of them can take effect — PolicySim-Exposure-v0's arms are (user, level) pairs and a second
arm on the same user is discarded (it scores 0) — the top-``budget`` arms of a policy whose
score is dominated by the user's features are mostly duplicates: on 1,000 users, LinUCB's
slates of 20 named 9 distinct users on average, so 11 slots were wasted.

:func:`select_one_per_group` asks the policy itself for its best arms, keeps the best arm of
each new group, forbids the groups already used, and asks again for the slots still empty.
It works with any policy of the :class:`bandits.base.Policy` interface (and keeps each
policy's own exploration: ε-greedy still explores, Thompson sampling still samples), because
it only calls ``select``.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from agent_models.validation import config_error


class SelectsArms(Protocol):
    """Anything with the ``select`` of :class:`bandits.base.Policy`."""

    def select(
        self, contexts: np.ndarray, mask: np.ndarray | None = None, budget: int = 1
    ) -> np.ndarray: ...


def _groups_and_allowed(contexts: np.ndarray, mask: np.ndarray | None,
                        groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(K,) groups and a (K,) bool copy of the mask (all True for None), both checked."""
    n_arms = np.asarray(contexts).shape[0]
    groups = np.asarray(groups)
    if groups.shape != (n_arms,):
        raise ValueError(f"groups must have shape (K,) = ({n_arms},); got {groups.shape}")
    allowed = np.ones(n_arms, bool) if mask is None else np.asarray(mask, bool).copy()
    if allowed.shape != (n_arms,):
        raise ValueError(f"mask must have shape (K,) = ({n_arms},); got {allowed.shape}")
    return groups, allowed


def select_per_group(
    policy: SelectsArms,
    contexts: np.ndarray,
    mask: np.ndarray | None,
    budget: int,
    groups: np.ndarray,
    per_group: int = 1,
) -> np.ndarray:
    """Up to ``budget`` allowed arms, at most ``per_group`` of each group, in the order the
    policy ranked them (:func:`select_one_per_group` with a capacity per group).

    A policy that ranks purely by its ``scores`` (a :class:`bandits.base.ScoredPolicy` that does
    not override ``_select``) is scored once and each group's best arms are kept; any other
    policy is asked repeatedly, as in :func:`select_one_per_group`.

    Returns:
        (m,) int64 distinct arm indices, m = min(budget, allowed arms within the caps).
    """
    from bandits.base import ScoredPolicy

    if isinstance(per_group, bool) or not isinstance(per_group, int | np.integer) or per_group < 1:
        raise config_error("per_group", per_group, "an integer >= 1")
    groups, allowed = _groups_and_allowed(contexts, mask, groups)
    if isinstance(policy, ScoredPolicy) and type(policy)._select is ScoredPolicy._select:
        index = np.flatnonzero(allowed)
        if len(index) == 0 or budget <= 0:
            return np.zeros(0, np.int64)
        # score every arm: a policy may score by arm position (graph policies map arm k to
        # its user), so it must see the round's full (K, D) contexts
        score = np.asarray(policy.scores(np.asarray(contexts)), np.float64)[index]
        tie = policy._rng.random(len(index))
        order = np.lexsort((tie, -score, groups[index]))
        ranked, ranked_group = index[order], groups[index][order]
        rank = np.arange(len(ranked)) - np.searchsorted(ranked_group, ranked_group)
        keep = rank < per_group
        kept, kept_score, kept_tie = ranked[keep], score[order][keep], tie[order][keep]
        best = np.lexsort((kept_tie, -kept_score))[:budget]
        return kept[best].astype(np.int64)
    chosen: list[int] = []
    used: dict[int, int] = {}
    while len(chosen) < budget and allowed.any():
        need = min(budget - len(chosen), int(allowed.sum()))
        for arm in np.asarray(policy.select(contexts, allowed, need), np.int64):
            group = int(groups[arm])
            if used.get(group, 0) < per_group and len(chosen) < budget and allowed[arm]:
                used[group] = used.get(group, 0) + 1
                chosen.append(int(arm))
                allowed[arm] = False
        full = np.fromiter((g for g, c in used.items() if c >= per_group), np.int64)
        allowed &= ~np.isin(groups, full)
    return np.asarray(chosen, np.int64)


def select_one_per_group(
    policy: SelectsArms,
    contexts: np.ndarray,
    mask: np.ndarray | None,
    budget: int,
    groups: np.ndarray,
) -> np.ndarray:
    """Up to ``budget`` allowed arms of distinct groups, in the order the policy ranked them.

    Repeats: ``picks = policy.select(contexts, allowed, need)``; walk ``picks`` best first and
    keep each arm whose group is not used yet; remove the used groups from ``allowed``. Every
    call keeps at least its first pick, so there are at most ``budget`` calls.

    Args:
        policy: any object with ``select(contexts, mask, budget)``.
        contexts: (K, D) arm contexts, passed through to the policy.
        mask: (K,) bool of allowed arms, or None for all.
        budget: the number of arms wanted (>= 0).
        groups: (K,) int group of each arm (e.g. its user); arms of one group exclude each
            other.

    Returns:
        (m,) int64 distinct arm indices of distinct groups, m = min(budget, number of groups
        with an allowed arm).

    Raises:
        ValueError: if ``groups`` or ``mask`` does not have shape (K,).
    """
    groups, allowed = _groups_and_allowed(contexts, mask, groups)
    chosen: list[int] = []
    used: set[int] = set()
    while len(chosen) < budget and allowed.any():
        available = np.unique(groups[allowed]).size
        need = min(budget - len(chosen), available)
        for arm in np.asarray(policy.select(contexts, allowed, need), np.int64):
            group = int(groups[arm])
            if group not in used and len(chosen) < budget:
                used.add(group)
                chosen.append(int(arm))
        allowed &= ~np.isin(groups, np.fromiter(used, np.int64, len(used)))
    return np.asarray(chosen, np.int64)


def one_per_group_inclusion(
    policy: SelectsArms,
    contexts: np.ndarray,
    mask: np.ndarray | None,
    budget: int,
    groups: np.ndarray,
) -> tuple[np.ndarray, str]:
    """(K,) probability that :func:`select_one_per_group` includes each arm, and the method.

    "exact" for the random policy when every group has as many allowed arms (by symmetry
    the slate is then a uniform set of ``budget`` groups with a uniform arm in each);
    "deterministic" when the policy ranks the allowed arms without randomness
    (``policy.is_deterministic``), so every call of the repeated selection is; otherwise a
    Monte-Carlo estimate over re-draws of the policy's generator
    (:func:`bandits.base.monte_carlo_inclusion`), which leaves the policy's generator as it
    was.
    """
    from bandits.base import Policy, monte_carlo_inclusion

    n_arms = np.asarray(contexts).shape[0]
    allowed = np.ones(n_arms, bool) if mask is None else np.asarray(mask, bool)
    if budget == 0 or not allowed.any():
        return np.zeros(n_arms), "deterministic"
    exact = _uniform_one_per_group(policy, allowed, budget, groups)
    if exact is not None:
        return exact, "exact"
    if policy.is_deterministic(contexts, allowed):
        probs = np.zeros(n_arms)
        probs[select_one_per_group(policy, contexts, mask, budget, groups)] = 1.0
        return probs, "deterministic"
    if not isinstance(policy, Policy):
        raise TypeError(f"{type(policy).__name__} is not a bandits.Policy: its randomness "
                        "cannot be re-drawn for a Monte-Carlo propensity")
    return monte_carlo_inclusion(
        policy, lambda: select_one_per_group(policy, contexts, mask, budget, groups), n_arms
    ), "monte_carlo"


def _uniform_one_per_group(policy: SelectsArms, allowed: np.ndarray, budget: int,
                           groups: np.ndarray) -> np.ndarray | None:
    """Exact inclusion of :class:`bandits.random_policy.RandomPolicy` under
    :func:`select_one_per_group` when the non-empty groups have equal allowed counts, else None."""
    from bandits.random_policy import RandomPolicy

    if not isinstance(policy, RandomPolicy):
        return None
    _, group_index = np.unique(groups, return_inverse=True)
    sizes = np.bincount(group_index[allowed])
    sizes = sizes[sizes > 0]
    if len(np.unique(sizes)) != 1:
        return None
    chosen_groups = min(budget, len(sizes))
    return np.where(allowed, chosen_groups / len(sizes) / sizes[0], 0.0)


def per_group_inclusion(
    policy: SelectsArms,
    contexts: np.ndarray,
    mask: np.ndarray | None,
    budget: int,
    groups: np.ndarray,
    per_group: int = 1,
) -> tuple[np.ndarray, str]:
    """(K,) probability that :func:`select_per_group` includes each arm, and the method.

    "exact" for the random policy when the budget holds every group's share (each group then
    gets a uniform subset of min(per_group, allowed arms) of its arms); "deterministic" when
    the policy ranks the allowed arms without randomness (``policy.is_deterministic``);
    otherwise a Monte-Carlo estimate over re-draws of the policy's generator
    (:func:`bandits.base.monte_carlo_inclusion`), which leaves the generator as it was.
    """
    from bandits.base import Policy, monte_carlo_inclusion
    from bandits.random_policy import RandomPolicy

    n_arms = np.asarray(contexts).shape[0]
    groups = np.asarray(groups)
    allowed = np.ones(n_arms, bool) if mask is None else np.asarray(mask, bool)
    if budget == 0 or not allowed.any():
        return np.zeros(n_arms), "deterministic"
    if isinstance(policy, RandomPolicy):
        _, group_index = np.unique(groups, return_inverse=True)
        sizes = np.bincount(group_index[allowed], minlength=group_index.max() + 1)
        share = np.minimum(sizes, per_group)
        if budget >= share.sum():
            size = np.maximum(sizes[group_index], 1)
            return np.where(allowed, share[group_index] / size, 0.0), "exact"
    if policy.is_deterministic(contexts, allowed):
        probs = np.zeros(n_arms)
        probs[select_per_group(policy, contexts, allowed, budget, groups, per_group)] = 1.0
        return probs, "deterministic"
    if not isinstance(policy, Policy):
        raise TypeError(f"{type(policy).__name__} is not a bandits.Policy: its randomness "
                        "cannot be re-drawn for a Monte-Carlo propensity")
    return monte_carlo_inclusion(
        policy, lambda: select_per_group(policy, contexts, allowed, budget, groups, per_group), n_arms
    ), "monte_carlo"
