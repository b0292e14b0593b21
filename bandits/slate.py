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

from collections.abc import Callable
from typing import Protocol

import numpy as np

from policysim_infra.validation import config_error


class SelectsArms(Protocol):
    """Anything with the ``select`` of :class:`bandits.base.Policy`."""

    def select(
        self, contexts: np.ndarray, mask: np.ndarray | None = None, budget: int = 1
    ) -> np.ndarray: ...


def _groups_and_allowed(
    contexts: np.ndarray, mask: np.ndarray | None, groups: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
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
    policy is asked repeatedly, as in :func:`select_one_per_group`. A policy with a null arm
    (:attr:`bandits.base.ScoredPolicy.score_floor`) never gets an arm scored below it: on the
    scored path those arms are dropped, on the repeated path a ``select`` that returns fewer
    arms than asked ends the slate.

    Returns:
        (m,) int64 distinct arm indices, m = min(budget, allowed arms within the caps), or
        fewer when the policy leaves slots to its null arm.
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
        if policy.score_floor is not None:
            worth = score >= policy.score_floor
            index, score, tie = index[worth], score[worth], tie[worth]
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
        picks = np.asarray(policy.select(contexts, allowed, need), np.int64)
        for arm in picks:
            group = int(groups[arm])
            if used.get(group, 0) < per_group and len(chosen) < budget and allowed[arm]:
                used[group] = used.get(group, 0) + 1
                chosen.append(int(arm))
                allowed[arm] = False
        if len(picks) < need:  # the policy left the other slots to its null arm
            break
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
        picks = np.asarray(policy.select(contexts, allowed, need), np.int64)
        for arm in picks:
            group = int(groups[arm])
            if group not in used and len(chosen) < budget:
                used.add(group)
                chosen.append(int(arm))
        if len(picks) < need:  # the policy left the other slots to its null arm
            break
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
    "deterministic" when no random draw can change any call of the repeated selection
    (:func:`deterministic_inclusion`); otherwise a Monte-Carlo estimate over re-draws of the
    policy's generator (:func:`bandits.base.monte_carlo_inclusion`). The policy's generator
    is left as it was.
    """
    from bandits.base import Policy, monte_carlo_inclusion

    n_arms = np.asarray(contexts).shape[0]
    allowed = np.ones(n_arms, bool) if mask is None else np.asarray(mask, bool)
    if budget == 0 or not allowed.any():
        return np.zeros(n_arms), "deterministic"
    exact = _uniform_one_per_group(policy, allowed, budget, groups)
    if exact is not None:
        return exact, "exact"
    probs = deterministic_inclusion(
        policy,
        contexts,
        allowed,
        groups,
        lambda p: select_one_per_group(p, contexts, allowed, budget, groups),
    )
    if probs is not None:
        return probs, _closed_form_method(probs)
    if not isinstance(policy, Policy):
        raise TypeError(
            f"{type(policy).__name__} is not a bandits.Policy: its randomness "
            "cannot be re-drawn for a Monte-Carlo propensity"
        )
    return monte_carlo_inclusion(
        policy, lambda: select_one_per_group(policy, contexts, mask, budget, groups), n_arms
    ), "monte_carlo"


def _uniform_one_per_group(
    policy: SelectsArms, allowed: np.ndarray, budget: int, groups: np.ndarray
) -> np.ndarray | None:
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

    When the budget holds every group's share (min(per_group, its allowed arms)), each group
    gets its share whatever the policy ranks across groups, so two kinds of policy have a
    closed form ("exact", or "deterministic" when it is all 0/1): the random policy (a uniform
    subset of each group) and a policy that takes each group's arms best score first with
    ties at random (:func:`ranks_groups_by_score`; :func:`top_share_inclusion` of its scores).
    Otherwise "deterministic" when no random draw can change the slate
    (:func:`deterministic_inclusion`), else a Monte-Carlo estimate over re-draws of the policy's
    generator (:func:`bandits.base.monte_carlo_inclusion`). The policy's generator is left as
    it was.
    """
    from bandits.base import Policy, monte_carlo_inclusion
    from bandits.random_policy import RandomPolicy

    n_arms = np.asarray(contexts).shape[0]
    groups = np.asarray(groups)
    allowed = np.ones(n_arms, bool) if mask is None else np.asarray(mask, bool)
    if budget == 0 or not allowed.any():
        return np.zeros(n_arms), "deterministic"
    _, group_index = np.unique(groups, return_inverse=True)
    scored = ranks_groups_by_score(policy)
    floor = getattr(policy, "score_floor", None)
    scores = None  # scored only where the closed form or a null arm's floor needs them
    eligible = allowed
    if scored and floor is not None:
        scores = _group_scores(policy, contexts, allowed)
        eligible = allowed & (np.nan_to_num(scores, nan=-np.inf) >= floor)
    sizes = np.bincount(group_index[eligible], minlength=group_index.max() + 1)
    share = np.minimum(sizes, per_group)
    if budget >= share.sum():
        if isinstance(policy, RandomPolicy):
            size = np.maximum(sizes[group_index], 1)
            return np.where(allowed, share[group_index] / size, 0.0), "exact"
        if scored:
            if not eligible.any():
                return np.zeros(n_arms), "deterministic"
            if scores is None:
                scores = _group_scores(policy, contexts, allowed)
            closed_form = top_share_inclusion(scores, eligible, group_index, share)
            return closed_form, _closed_form_method(closed_form)
    probs = deterministic_inclusion(
        policy,
        contexts,
        allowed,
        groups,
        lambda p: select_per_group(p, contexts, allowed, budget, groups, per_group),
    )
    if probs is not None:
        return probs, _closed_form_method(probs)
    if not isinstance(policy, Policy):
        raise TypeError(
            f"{type(policy).__name__} is not a bandits.Policy: its randomness "
            "cannot be re-drawn for a Monte-Carlo propensity"
        )
    return monte_carlo_inclusion(
        policy,
        lambda: select_per_group(policy, contexts, allowed, budget, groups, per_group),
        n_arms,
    ), "monte_carlo"


def _closed_form_method(probs: np.ndarray) -> str:
    """ "deterministic" for 0/1 inclusion probabilities, else "exact"."""
    return "deterministic" if np.all((probs == 0) | (probs == 1)) else "exact"


def ranks_groups_by_score(policy: SelectsArms) -> bool:
    """Whether :func:`select_per_group` takes each group's arms in the order of the policy's
    ``scores`` with ties broken uniformly at random: a :class:`bandits.base.ScoredPolicy` with
    deterministic scores whose ``_select`` is the plain top-k, or that declares
    ``score_order_within_groups``."""
    from bandits.base import ScoredPolicy

    if not isinstance(policy, ScoredPolicy) or policy.randomized_scores:
        return False
    return type(policy)._select is ScoredPolicy._select or policy.score_order_within_groups


def _group_scores(policy: SelectsArms, contexts: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """(K,) the scores :func:`select_per_group` ranks the allowed arms by (NaN elsewhere): of
    the full (K, D) contexts on its scored path, of the allowed arms' on its repeated path."""
    from bandits.base import ScoredPolicy

    if type(policy)._select is ScoredPolicy._select:
        return np.asarray(policy.scores(np.asarray(contexts)), np.float64)
    out = np.full(len(allowed), np.nan)
    out[allowed] = policy.scores(np.asarray(contexts)[allowed])
    return out


def top_share_inclusion(
    scores: np.ndarray, allowed: np.ndarray, group_index: np.ndarray, share: np.ndarray
) -> np.ndarray:
    """(K,) probability that each allowed arm is among the ``share[g]`` best ``scores`` (K,) of
    its group g (``group_index`` (K,) in 0..G-1), ties broken uniformly at random
    (:func:`bandits.base.top_k_inclusion` within each group); 0 for arms not ``allowed``."""
    index = np.flatnonzero(allowed)
    group, score = group_index[index], np.asarray(scores, np.float64)[index]
    order = np.lexsort((-score, group))
    group, score = group[order], score[order]
    start = np.searchsorted(group, group)  # position of the group's best arm
    cut = score[start + share[group] - 1]  # the group's share-th best score
    above, at_cut = score > cut, score == cut
    n_groups = len(share)
    n_above = np.bincount(group, weights=above, minlength=n_groups)[group]
    n_at_cut = np.bincount(group, weights=at_cut, minlength=n_groups)[group]
    probs = np.where(
        above, 1.0, np.where(at_cut, (share[group] - n_above) / np.maximum(n_at_cut, 1), 0.0)
    )
    out = np.zeros(len(allowed))
    out[index[order]] = probs
    return out


class _NeedsRandomness(Exception):
    """A call of the selection could come out differently with other random draws."""


class _WithoutRandomness:
    """``select`` of a policy's :meth:`bandits.base.Policy.deterministic_select`; raises
    :class:`_NeedsRandomness` where a random draw could change the slate."""

    def __init__(self, policy: SelectsArms) -> None:
        self.policy = policy

    def select(
        self, contexts: np.ndarray, mask: np.ndarray | None = None, budget: int = 1
    ) -> np.ndarray:
        picks = self.policy.deterministic_select(contexts, mask, budget)
        if picks is None:
            raise _NeedsRandomness
        return picks


def deterministic_inclusion(
    policy: SelectsArms,
    contexts: np.ndarray,
    allowed: np.ndarray,
    groups: np.ndarray,
    build: Callable[[SelectsArms], np.ndarray],
) -> np.ndarray | None:
    """(K,) inclusion probabilities of the slate ``build(policy)`` (a selection over
    ``policy``'s ``select`` with at most so many arms per group) when no random draw can change
    it, up to swaps of exchangeable arms, else None. The policy's generator is left as it was.

    A plain :class:`bandits.base.ScoredPolicy` (scored once by :func:`select_per_group`) is
    deterministic when its scores of the ``allowed`` arms are distinct. Any other
    :class:`bandits.base.Policy` is when every ``select`` the selection makes is, call by call
    (:meth:`bandits.base.Policy.deterministic_select`: a policy whose ranking depends on the
    arms offered, like MMR, is checked on each set it is offered), up to swaps of exchangeable
    arms (:meth:`bandits.base.Policy.exchangeable_arms`) of one group: each of those gets its
    label's share of the picks (swapping arms of two groups could change the caps: None).
    Other objects answer by their ``is_deterministic``.
    """
    from bandits.base import Policy, ScoredPolicy, class_averaged, spared_generator

    probs = np.zeros(len(allowed))
    if isinstance(policy, ScoredPolicy) and type(policy)._select is ScoredPolicy._select:
        if not policy.is_deterministic(contexts, allowed):
            return None
        with spared_generator(policy):
            probs[build(policy)] = 1.0
        return probs
    if not isinstance(policy, Policy):
        if not policy.is_deterministic(contexts, allowed):
            return None
        probs[build(policy)] = 1.0
        return probs
    labels = policy.exchangeable_arms(contexts, allowed)
    _, label_index = np.unique(labels, return_inverse=True)
    label_index = label_index.reshape(-1)
    if np.any(np.bincount(label_index, minlength=label_index.max() + 1)[label_index] > 1):
        group_index = np.unique(np.asarray(groups), return_inverse=True)[1].reshape(-1)
        pairs = np.unique(np.column_stack([label_index, group_index]), axis=0)
        if len(pairs) != label_index.max() + 1:  # a label spans groups
            return None
    try:
        probs[build(_WithoutRandomness(policy))] = 1.0
    except _NeedsRandomness:
        return None
    return class_averaged(probs, labels)
