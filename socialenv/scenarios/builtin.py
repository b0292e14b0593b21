"""Deterministic synthetic populations and the two built-in scenarios.

``make_scenario("abortion", num_users, seed)`` and ``make_scenario("misinformation", ...)``
build a :class:`~socialenv.scenarios.scenario.Scenario` with no download: profiles with the paper's
four attributes, interest embeddings clustered by topic, a follow graph with stance
homophily and a heavy-tailed (Pareto) popularity, initial opinions, history posts and
the scenario's news. Every draw comes from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from agent_models.types import NewsEvent
from policysim_infra.buffers import ArraysByRole, role_empty
from policysim_infra.validation import (
    Limit,
    check,
    check_fields,
    config_error,
    did_you_mean,
    field_limits,
)
from socialenv.core import kernels
from socialenv.core.pages import small_pages
from socialenv.scenarios.generators import (
    COMBATIVE_STYLES,
    IDENTITIES,
    POSTING_STYLES,
    ROLES,
    TOPICS,
    default_profiles,
    synthetic_text,
)
from socialenv.scenarios.scenario import Scenario, seed_history

ABORTION_NEWS: tuple[NewsEvent, ...] = (
    NewsEvent(0, "Supreme Court overturns Roe v. Wade; states move to restrict abortion.", -0.45),
    NewsEvent(4, "Several states pass trigger-law abortion bans taking effect this week.", -0.3),
    NewsEvent(7, "Doctors report patients denied care under new abortion restrictions.", -0.3),
)
MISINFORMATION_MESSAGE = (
    "#wakeupamerica who needs a #gun registry when #obama has all your personal information"
)


@dataclass(frozen=True)
class PopulationConfig:
    """Knobs of the synthetic population (defaults documented here, in one place).

    Attributes:
        latent_dim: dimension d of interest / content embeddings.
        mean_following: mean out-degree of the follow graph.
        homophily: probability that a follow edge stays within the user's stance camp.
        popularity_shape: Pareto shape of account popularity (smaller = heavier tail).
        camp_share: share of users in each of the two opinion camps (rest neutral). With
            0.2, about 62% of the users start neutral (|opinion| < 1/3): most people hold no
            absolute position (Pew, March 2022: 19% say abortion should be legal in all
            cases, 8% illegal in all cases, 71% something in between), and the news and the
            platform polarize some of the rest during the episode.
        camp_opinion: mean |opinion| of camp members; camp_spread: their std.
        activity_beta: Beta(a, b) of per-round activity probability (mean a / (a + b)).
        toxicity_beta: Beta(a, b) of toxicity propensity.
        susceptibility_beta: Beta(a, b) of susceptibility to misinformation.
        history_posts: mean number of posts each user has before round 0.
    """

    latent_dim: Annotated[int, Limit(ge=2, le=4096)] = 32
    mean_following: Annotated[float, Limit(ge=0, le=1000)] = 15.0
    homophily: Annotated[float, Limit(ge=0, le=1)] = 0.8
    popularity_shape: Annotated[float, Limit(gt=0, le=100)] = 1.5
    camp_share: Annotated[float, Limit(ge=0, le=0.5)] = 0.2
    camp_opinion: Annotated[float, Limit(ge=0, le=1)] = 0.55
    camp_spread: Annotated[float, Limit(ge=0, le=1)] = 0.25
    activity_beta: Annotated[tuple[float, float], Limit(gt=0, le=1000)] = (1.2, 2.5)
    toxicity_beta: Annotated[tuple[float, float], Limit(gt=0, le=1000)] = (1.0, 8.0)
    susceptibility_beta: Annotated[tuple[float, float], Limit(gt=0, le=1000)] = (2.0, 5.0)
    history_posts: Annotated[float, Limit(ge=0, le=100)] = 1.5

    def __post_init__(self) -> None:
        check_fields(self, "population.")  # types and the limits declared with the fields


#: The limits :class:`PopulationConfig` declares on its fields (derived; checked before
#: anything is allocated).
POPULATION_LIMITS = field_limits(PopulationConfig)


def topic_centroids(latent_dim: int, seed: int) -> np.ndarray:
    """(T, d) unit vectors, one per entry of TOPICS."""
    return kernels.unit_rows(
        np.random.default_rng([seed, 1]).standard_normal((len(TOPICS), latent_dim))
    )


#: Edges per block when drawing the follow graph's per-edge randoms and when building its keys
#: (each block's temporaries stay in cache and in memory the allocator reuses).
_EDGE_BLOCK = 1 << 20


def _follow_graph(
    opinion: np.ndarray,
    config: PopulationConfig,
    rng: np.random.Generator,
    memory: ArraysByRole | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Directed edges (src follows dst), sorted by (src, dst): lognormal out-degrees, Pareto
    popularity of targets, stance-camp homophily. Self-loops and duplicates removed. Both
    arrays are written into ``memory``'s (roles ``follow_dst`` and ``follow_src``) when given."""
    n = len(opinion)
    camp = (np.sign(np.where(np.abs(opinion) < 0.2, 0.0, opinion)) + 1).astype(np.int8)
    sigma = 0.8
    out_degree = rng.lognormal(np.log(config.mean_following) - sigma**2 / 2, sigma, n)
    out_degree = np.clip(np.round(out_degree), 1, max(1, n - 1)).astype(np.int64)
    popularity = rng.pareto(config.popularity_shape, n) + 1.0
    edges = int(out_degree.sum())
    # the edge's target camp: its source's camp, or with probability 1 - homophily a uniform
    # one (all same-camp draws first, then all uniform draws: the generator's order)
    target_camp = np.repeat(camp, out_degree)
    other_camp = np.empty(edges, bool)
    block = np.empty(min(edges, _EDGE_BLOCK))
    for start in range(0, edges, _EDGE_BLOCK):
        draws = rng.random(out=block[: min(_EDGE_BLOCK, edges - start)])
        np.greater_equal(draws, config.homophily, out=other_camp[start : start + len(draws)])
    for start in range(0, edges, _EDGE_BLOCK):
        stop = min(start + _EDGE_BLOCK, edges)
        uniform = rng.integers(0, 3, stop - start)
        np.copyto(target_camp[start:stop], uniform, casting="unsafe", where=other_camp[start:stop])
    del other_camp
    order = np.argsort(camp, kind="stable")
    camp_bounds = np.searchsorted(camp[order], np.arange(4))
    # keys src * n + dst: the sources now, each target added where it is drawn (a self-loop's
    # key becomes -1: dropped with the duplicates below)
    keys = kernels.segment_keys(out_degree, n, role_empty(memory, "follow_dst", (edges,), np.int64))
    for c in range(3):
        members = order[camp_bounds[c] : camp_bounds[c + 1]]
        if len(members) == 0:
            members = order
        cumulative = np.cumsum(popularity[members])
        guide = kernels.guide_table(cumulative)
        # the camp's draws, one per edge in edge order, taken block by block of edges
        for start in range(0, edges, _EDGE_BLOCK):
            stop = min(start + _EDGE_BLOCK, edges)
            edge = np.flatnonzero(target_camp[start:stop] == c)
            if len(edge) == 0:
                continue
            u = rng.random(out=block[: len(edge)])
            u *= cumulative[-1]
            position = kernels.search_guided(cumulative, u, guide)
            kernels.link_targets(keys, edge, start, position, members, n)
    del target_camp, block
    return kernels.distinct_segment_pairs(
        keys,
        out_degree,
        n,
        lambda size: role_empty(memory, "follow_src", (size,), np.int64),
    )


@small_pages
def synthetic_population(
    num_users: int,
    seed: int,
    *,
    name: str,
    topic: str,
    config: PopulationConfig | None = None,
    memory: ArraysByRole | None = None,
) -> tuple[Scenario, np.random.Generator]:
    """A synthetic population of ``num_users`` users (no news, no misinformation, no history)
    and the generator to continue drawing from. ``memory``: the arrays of an earlier build,
    written again where nothing else holds them (same values, pages faulted in already)."""
    config = config or PopulationConfig()
    check(num_users >= 2, "num_users", "an integer >= 2", num_users)
    rng = np.random.default_rng([seed, 0])
    n = num_users
    # opinions: two camps and a neutral middle
    camp = rng.choice(
        3, size=n, p=[config.camp_share, 1 - 2 * config.camp_share, config.camp_share]
    )
    centre = (camp - 1) * config.camp_opinion
    spread = np.where(camp == 1, config.camp_spread * 0.8, config.camp_spread)
    opinion = np.clip(centre + spread * rng.standard_normal(n), -1, 1).astype(np.float32)
    activity = np.clip(rng.beta(*config.activity_beta, n), 0.02, 1.0).astype(np.float32)
    follow_src, follow_dst = _follow_graph(opinion, config, rng, memory)
    profiles = default_profiles(n, follow_src, follow_dst, rng, activity)
    centroids = topic_centroids(config.latent_dim, seed)
    weights = role_empty(memory, "interest_weights", profiles.interests.shape, np.float32)
    np.copyto(weights, profiles.interests)
    # the mixed topics are written where the latent rows go, then made noisy unit rows in place
    latent = role_empty(memory, "latent", (n, config.latent_dim), np.float32)
    # One BLAS thread: a threaded product rounds differently above ~100k rows, and the same
    # seed must give the same population whatever the machine's thread count.
    with kernels.one_blas_thread():
        np.matmul(weights, centroids, out=latent)
    del weights
    kernels.unit_noisy_rows_drawn(latent, None, 0.35, rng, out=latent)
    toxicity = rng.beta(*config.toxicity_beta, n)
    combative = np.isin(profiles.posting_style.codes, COMBATIVE_STYLES)
    toxicity = np.clip(toxicity * np.where(combative, 2.0, 1.0), 0, 1).astype(np.float32)
    scenario = Scenario(
        name=name,
        topic=topic,
        profiles=profiles,
        latent=latent,
        opinion=opinion,
        activity=activity,
        toxicity_propensity=toxicity,
        susceptibility=rng.beta(*config.susceptibility_beta, n).astype(np.float32),
        misinformed=np.zeros(n, dtype=bool),
        follow_src=follow_src,
        follow_dst=follow_dst,
        history_author=np.zeros(0, np.int64),
        history_latent=np.zeros((0, config.latent_dim), np.float32),
        history_stance=np.zeros(0, np.float32),
        history_toxicity=np.zeros(0, np.float32),
        history_misinfo=np.zeros(0, bool),
    )
    return scenario, rng


@small_pages
def abortion(
    num_users: int = 1000,
    seed: int = 0,
    *,
    config: PopulationConfig | None = None,
    with_text: bool = False,
    memory: ArraysByRole | None = None,
) -> Scenario:
    """The paper's §4.2 setting: anti-abortion legislation, trigger news at rounds 0, 4, 7.
    ``memory``: see :func:`make_scenario`."""
    scenario, rng = synthetic_population(
        num_users,
        seed,
        name="abortion",
        config=config,
        topic="Anti-abortion legislation in the United States after the overturning of Roe v. Wade",
        memory=memory,
    )
    scenario.news = list(ABORTION_NEWS)
    seed_history(
        scenario, rng, (config or PopulationConfig()).history_posts, with_text, memory=memory
    )
    scenario.validate()
    return scenario


@small_pages
def misinformation(
    num_users: int = 1000,
    seed: int = 0,
    *,
    config: PopulationConfig | None = None,
    with_text: bool = False,
    initial_share: float = 0.2,
    memory: ArraysByRole | None = None,
) -> Scenario:
    """The paper's objective-2 setting: ``initial_share`` (20%) of users start out believing and
    posting the gun-registry misinformation message. ``memory``: see :func:`make_scenario`."""
    check(0.0 <= initial_share <= 1.0, "initial_share", "in [0, 1]", initial_share)
    scenario, rng = synthetic_population(
        num_users,
        seed,
        name="misinformation",
        config=config,
        topic="Gun control and a national gun registry in the United States",
        memory=memory,
    )
    n = scenario.num_users
    seeded = rng.choice(n, size=round(initial_share * n), replace=False)
    scenario.misinformed[seeded] = True
    scenario.misinformation_message = MISINFORMATION_MESSAGE
    seed_history(
        scenario, rng, (config or PopulationConfig()).history_posts, with_text, memory=memory
    )
    scenario.validate()
    return scenario


BUILTIN_SCENARIOS = {"abortion": abortion, "misinformation": misinformation}


def make_scenario(
    name: str,
    num_users: int,
    seed: int,
    *,
    with_text: bool = False,
    config: PopulationConfig | None = None,
    memory: ArraysByRole | None = None,
) -> Scenario:
    """A built-in scenario by name, or a saved one by path (``*.npz``).

    ``memory``: the largest arrays of the last scenario built with it (its latent rows, history
    rows and follow edges) are written again where nothing outside refers to them any more, so
    a million-user build does not fault in ~600 MB of fresh pages each time. The values do not
    depend on it. A :class:`~socialenv.core.simulation.Simulation` keeps one across resets."""
    if name in BUILTIN_SCENARIOS:
        return BUILTIN_SCENARIOS[name](
            num_users, seed, config=config, with_text=with_text, memory=memory
        )
    if name.endswith(".npz"):
        return Scenario.load(name)
    raise config_error(
        "scenario",
        name,
        f"one of {sorted(BUILTIN_SCENARIOS)}, a path to a saved "
        f"scenario (.npz), or a Scenario instance{did_you_mean(name, BUILTIN_SCENARIOS)}",
    )


#: Also the profile vocabularies, ``default_profiles`` and ``synthetic_text``
#: (:mod:`socialenv.scenarios.generators`) and ``seed_history`` (:mod:`socialenv.scenarios.scenario`).
__all__ = [
    "ABORTION_NEWS",
    "BUILTIN_SCENARIOS",
    "IDENTITIES",
    "MISINFORMATION_MESSAGE",
    "POPULATION_LIMITS",
    "POSTING_STYLES",
    "ROLES",
    "TOPICS",
    "PopulationConfig",
    "abortion",
    "default_profiles",
    "make_scenario",
    "misinformation",
    "seed_history",
    "synthetic_population",
    "synthetic_text",
    "topic_centroids",
]
