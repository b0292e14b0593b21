"""One round of platform dynamics, independent of Gymnasium.

:class:`Simulation` owns the world (users, posts, follow graph), the recommender, exposure
control, the brain and the policy's lever (:class:`socialenv.core.lever.Lever`, whose hooks it
calls). ``run_round()`` plays a round as named phases: build every active user's feed
(three channels; the lever places the policy's recommendations), filter it (the lever's
decisions, then exposure), ask the brain what the users do (one batched call; the lever may
adjust the answer), apply the result (new posts, reactions, edges, stance (EMA of Eq. 2),
memory, misinformation), advance to the next round, and measure (the platform metrics and
:class:`~socialenv.core.lever.PolicyEffects`, what the policy's choices caused). The envs add
arms, observations and rewards.

Seeding: the draws of round t, stream s come from ``default_rng([seed, t + 1, s])`` — they
depend only on the episode seed and the round, so a saved and restored simulation
continues exactly as the uninterrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from agent_models.base import Brain
from agent_models.types import Behaviour, PostKind, RoundInput, RoundOutput
from policysim_infra.blocks import beside
from policysim_infra.buffers import ArraysByRole, held_only_by
from socialenv.core import kernels, metrics
from socialenv.core.clustering import assign_clusters, fit_centroids
from socialenv.core.config import EnvConfig
from socialenv.core.lever import Lever, LeverConfig, PolicyEffects
from socialenv.core.pages import small_pages
from socialenv.core.platform import ExposureControl, FeedContext, Recommender
from socialenv.core.propagation import normalized_adjacency, propagate
from socialenv.core.world import FollowGraph, PostTable, UserState, discretize_stance
from socialenv.mechanisms.activity import make_activity_model
from socialenv.mechanisms.events import EventSchedule
from socialenv.scenarios.builtin import synthetic_text
from socialenv.scenarios.scenario import Scenario

#: The reactions counted on each post, in the order of PostTable's counters.
_COUNTED = (Behaviour.LIKE, Behaviour.DISLIKE, Behaviour.RETWEET, Behaviour.REPLY)
#: The reactions that write a post and the kinds of those posts (kernels.share_columns).
_SHARE_CODES = np.array(
    [Behaviour.RETWEET, Behaviour.REPLY, PostKind.RETWEET, PostKind.REPLY], np.int64
)

#: Population size above which arm contexts are propagated on the arms' neighbourhoods only
#: (the same values as propagating every user). With the NumPy kernels (SciPy products on the
#: gathered neighbourhood) the local way pays from about this size.
LOCAL_PROPAGATION_USERS = 50_000
#: The same with the compiled kernels, which read the neighbourhood's rows in place: inside a
#: step the two ways cost about the same from 4,000 to 24,000 users and the local one is faster
#: above (a 50,000-user step 1.16x, paired over processes; ``benchmarks/local_propagation.py``
#: and BENCHMARKS.md, issue 24's twentieth step). The smaller of the two applies.
COMPILED_LOCAL_PROPAGATION_USERS = 20_000


def local_propagation_users() -> int:
    """Population size above which :meth:`Simulation.user_context` of given rows propagates
    on their neighbourhood only, with the active kernels."""
    if kernels.BACKEND == "numba":
        return min(LOCAL_PROPAGATION_USERS, COMPILED_LOCAL_PROPAGATION_USERS)
    return LOCAL_PROPAGATION_USERS


#: Follow edges from which a round's graph edit runs beside the posts' updates (on threads).
_BESIDE_MIN_EDGES = 1 << 20


class Stream(IntEnum):
    """Independent random streams of a round."""

    ACTIVE = 0
    FEED = 1
    EXPOSURE = 2
    BRAIN = 3
    ARMS = 4
    TEXT = 5
    SETUP = 6
    CLASSIFIER = 7
    LEVER = 8
    MODERATION = 8  # the stream's name before the lever had its own (an alias of LEVER)
    MODERATION_CLASSIFIER = 9
    EVENTS = 10
    OBSERVED = 11


@dataclass
class RoundResult:
    """What happened in one round (arrays are owned by the result, not views of the world).

    Attributes:
        round: t.
        active: (B,) user ids.
        feed: (B, F) post ids after exposure control (-1 = empty).
        feed_channel: (B, F) int8 channels.
        impression_user, impression_post, impression_removed: (I,) every candidate impression
            before exposure control, and whether the filter removed it.
        output: the brain's RoundOutput.
        stance_before: (N,) smoothed stances at the start of the round.
        discrete_before: (N,) discrete stances at the start of the round.
        misinformed_before: (N,) bool at the start of the round.
        impression_author: (I,) the author of each candidate impression.
        reaction_author: (R,) the author of the post of each reaction (``output.react_*``).
        reaction_cross: (R,) bool: the reaction's user and author held opposite discrete
            stances at the start of the round.
        policy: what the policy's choices caused (:meth:`socialenv.core.lever.Lever.effects`).
        metrics: platform metrics of the round (see :mod:`socialenv.core.metrics`).
    """

    round: int
    active: np.ndarray
    feed: np.ndarray
    feed_channel: np.ndarray
    impression_user: np.ndarray
    impression_post: np.ndarray
    impression_removed: np.ndarray
    output: RoundOutput
    stance_before: np.ndarray
    discrete_before: np.ndarray
    misinformed_before: np.ndarray
    impression_author: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    reaction_author: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    reaction_cross: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    policy: PolicyEffects = field(default_factory=PolicyEffects)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class _RoundStart:
    """The users' state at the start of a round (copies)."""

    stance: np.ndarray
    discrete: np.ndarray
    misinformed: np.ndarray


@dataclass
class _FilteredFeeds:
    """The filter phase's feeds and candidate impressions."""

    feed: np.ndarray
    valid: np.ndarray
    removed_count: int
    impression_user: np.ndarray
    impression_post: np.ndarray
    impression_author: np.ndarray
    impression_removed: np.ndarray


class _LazyRng:
    """The generator ``sim.rng(round_, stream)``, created on first use (most rounds fire no
    event, and creating a generator costs more than a small draw)."""

    def __init__(self, sim: Simulation, round_: int, stream: Stream) -> None:
        self._make = lambda: sim.rng(round_, stream)
        self._rng: np.random.Generator | None = None

    def __getattr__(self, name: str) -> Any:
        if self._rng is None:
            self._rng = self._make()
        return getattr(self._rng, name)


def _refilled(spare: np.ndarray | None, values: np.ndarray) -> np.ndarray:
    """``values`` as float32: written into ``spare`` (an array nothing else refers to, its
    pages faulted in already) when it has their shape, else a new copy."""
    if spare is not None and spare.shape == values.shape and spare.dtype == np.float32:
        np.copyto(spare, values, casting="unsafe")
        return spare
    return values.astype(np.float32)


def _every_row(rows: np.ndarray, n: int) -> bool:
    """Whether the integer ids ``rows`` are exactly ``0, 1, ..., n - 1`` in order."""
    return (
        len(rows) == n
        and (n == 0 or (rows[0] == 0 and rows[-1] == n - 1))
        and bool((np.diff(rows) == 1).all())
    )


class Simulation:
    """The platform and its population for one episode at a time."""

    def __init__(
        self,
        config: EnvConfig,
        brain: Brain,
        recommender: Recommender | None = None,
        exposure_control: ExposureControl | None = None,
        lever: Lever | None = None,
    ) -> None:
        self.config = config
        self.brain = brain
        self.recommender = recommender or Recommender(config.recommender)
        self.exposure_control = exposure_control or ExposureControl()
        self.seed = 0
        self.round = 0
        self.scenario: Scenario | None = None
        #: the local propagation's arrays, kept between steps (their pages faulted in once)
        self._propagation_buffers = kernels.PropagationBuffers()
        #: a built-in scenario's largest arrays, written again by the next reset's build
        self._scenario_memory = ArraysByRole()
        # opt-in mechanisms (issue 13), each consulted through one small hook below
        self.activity_model = make_activity_model(config.activity)
        self.events = EventSchedule(config.events)
        #: the policy's lever (a no-op one when none is given)
        self.lever = lever if lever is not None else Lever(LeverConfig())
        self.lever.attach(self)
        #: callbacks ``f(cut)`` of the holders of post ids, called after a compaction
        self.post_id_holders: list[Any] = []

    # ----------------------------------------------------------------------------- setup
    def rng(self, round_: int, stream: Stream) -> np.random.Generator:
        return kernels.seeded_generator((self.seed, round_ + 1, int(stream)))

    def _load_scenario(self, seed: int) -> Scenario:
        spec = self.config.scenario
        if isinstance(spec, Scenario):
            spec.validate()
            return spec
        if not isinstance(spec, str):
            raise ValueError(
                f"scenario={spec!r} is not allowed: a built-in name, a path to a saved scenario "
                "(.npz) or a Scenario instance"
            )
        from socialenv.scenarios.builtin import make_scenario

        return make_scenario(
            spec,
            self.config.num_users,
            seed,
            with_text=self.brain.needs_text,
            memory=self._scenario_memory,
        )

    def _spare_user_arrays(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The last users' memory rows and context table, each where nothing but those users
        refers to it and nothing but this simulation to the users (else None)."""
        if not hasattr(self, "users") or not held_only_by(self, "users"):  # a caller keeps them
            return None, None
        users = self.users
        memory = users.memory_latent if held_only_by(users, "memory_latent") else None
        context = users._context if held_only_by(users, "_context") else None
        return memory, context

    @small_pages
    def reset(self, seed: int) -> None:
        """Start a new episode from the scenario, seeded by ``seed`` (its arrays in small pages:
        :mod:`socialenv.core.pages`)."""
        self.seed = int(seed)
        self.round = 0
        self.posts_dropped = 0
        # the last episode's largest arrays serve this one where nothing else holds them: their
        # pages are faulted in already (a 1M world's are hundreds of MB). The users' memory
        # rows and context table are taken out of the last users (when no caller holds those);
        # the last scenario, graph and users are let go before the build, which writes the
        # arrays only they held again (self._scenario_memory)
        spare_memory_latent, spare_context = self._spare_user_arrays()
        self.scenario = None
        for name in ("graph", "users"):
            if hasattr(self, name):  # del, not vars(self).pop: that would make every
                delattr(self, name)  # attribute read of this simulation slower
        scenario = self._load_scenario(self.seed)
        self.scenario = scenario
        n = scenario.num_users
        s0 = discretize_stance(scenario.opinion)
        # astype copies: a scenario passed in stays as loaded (one built for this episode lends
        # its interest embeddings, which the episode only reads)
        fresh = scenario is not self.config.scenario
        previous_posts = getattr(self, "posts", None)
        self.users = UserState(
            profiles=scenario.profiles,
            latent=scenario.latent.astype(np.float32, copy=not fresh),
            memory_latent=_refilled(spare_memory_latent, scenario.latent),
            stance=s0.astype(np.float32),
            discrete_stance=s0.copy(),
            opinion=scenario.opinion.astype(np.float32),
            activity=scenario.activity.astype(np.float32),
            toxicity_propensity=scenario.toxicity_propensity.astype(np.float32),
            susceptibility=scenario.susceptibility.astype(np.float32),
            misinformed=scenario.misinformed.astype(bool),
            exposure=np.ones(n, np.float32),
        )
        self.users._context = spare_context
        del spare_memory_latent, spare_context
        self.graph = FollowGraph(n, scenario.follow_src, scenario.follow_dst)
        history_latent = scenario.history_latent
        history_text = scenario.history_text
        setup_rng = self.rng(-1, Stream.SETUP)
        if self.brain.needs_text and history_text is None:
            history_text = synthetic_text(
                scenario.topic,
                scenario.history_stance,
                scenario.history_misinfo,
                setup_rng,
                scenario.misinformation_message,
            )
        self.posts = PostTable.reusing(
            previous_posts,
            scenario.latent_dim,
            capacity=max(4 * len(scenario.history_author), 1024),
            with_text=self.brain.needs_text,
        )
        del previous_posts
        replacement = self.brain.reset(self.users.view(), self.posts.view(), self.seed)
        if replacement is not None:
            replacement = np.asarray(replacement, np.float32)
            if replacement.shape[0] != n:
                raise ValueError(
                    f"brain.reset returned {replacement.shape[0]} user embeddings for {n} users"
                )
            self.users.latent = replacement
            self.users.memory_latent = replacement.copy()
            history_latent = (
                self.brain.embed_texts([t or "" for t in history_text])
                if len(scenario.history_author)
                else np.zeros((0, replacement.shape[1]), np.float32)
            )
            self.posts = PostTable(
                replacement.shape[1],
                capacity=self.posts.author.shape[0],
                with_text=self.brain.needs_text,
            )
        self.centroids = fit_centroids(
            self.users.latent, self.config.recommender.num_clusters, setup_rng
        )
        self.posts.append(
            author=scenario.history_author,
            round_=-1,
            kind=int(PostKind.POST),
            parent=-1,
            latent=history_latent,
            stance=scenario.history_stance,
            toxicity=scenario.history_toxicity,
            misinfo=scenario.history_misinfo,
            cluster=assign_clusters(history_latent, self.centroids),
            text=history_text,
        )
        #: (t + 2,) int64 first post id of each round (:attr:`FeedContext.round_start`); a
        #: round appends one (a new array: views handed out keep their values)
        self.round_start = np.array([0, len(self.posts)], np.int64)
        self._classify(0, self.rng(-1, Stream.CLASSIFIER))
        self.recent_toxicity = np.zeros(n, np.float32)
        self.recent_misinfo = np.zeros(n, np.float32)
        if len(scenario.history_author):
            self._update_author_history(
                scenario.history_author,
                scenario.history_toxicity,
                self.posts.flagged[: len(self.posts)],
            )
        self._adjacency = None
        self.events = EventSchedule(
            list(getattr(scenario, "events", None) or []) + list(self.config.events or [])
        )
        if self.activity_model is not None:
            self.activity_model.reset(self.users.activity)
        self.lever.reset(n)
        self.active = self.sample_active(0)

    def check_round_starts(self) -> None:
        """Raise a ``ValueError`` naming ``sim.round_start`` unless it holds round + 2
        non-decreasing post ids in [0, posts] (for a restored state, after its round is
        checked)."""
        starts = self.round_start
        if not (
            len(starts) == self.round + 2
            and starts[0] >= 0
            and starts[-1] <= len(self.posts)
            and (np.diff(starts) >= 0).all()
        ):
            shown = starts.tolist() if len(starts) <= 8 else f"{len(starts)} values"
            raise ValueError(
                f"sim.round_start={shown!r} is not allowed: round + 2 = {self.round + 2} "
                f"non-decreasing post ids in [0, {len(self.posts)}]"
            )

    def sample_active(self, round_: int) -> np.ndarray:
        """(B,) users active in ``round_`` (each independently with its activity probability)."""
        rng = self.rng(round_, Stream.ACTIVE)
        p = (
            self.users.activity
            if self.activity_model is None
            else self.activity_model.probability(self.users.activity)
        )
        active = rng.random(len(p)) < p
        barred = self.lever.barred(round_)
        if barred is not None:
            active &= ~barred
        return np.flatnonzero(active).astype(np.int64)

    # ----------------------------------------------------------------------------- context
    def user_context(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Propagated user context [profile embedding ⊕ memory embedding] (Eq. 7) after
        ``context.hops`` steps of label propagation (Eq. 8): (N, 2d), or (len(rows), 2d) for
        the users ``rows`` only. Above :func:`local_propagation_users` users the rows are
        computed on their K-hop neighbourhood gathered apart (same values, cost independent
        of N); below it, with the compiled kernels, on (N, 2d) tables whose hops compute the
        users the next hop reads only (:func:`kernels.propagate_csr`; same values).

        At an episode's start the memory embedding is the profile embedding (until the first
        reactions move it): the propagation, column by column, then gives both halves the
        same values, so the profile half is propagated once and repeated."""
        users = self.users
        if (
            self.round == 0
            and users.latent.shape == users.memory_latent.shape
            and np.array_equal(users.latent, users.memory_latent)
        ):
            half = self._propagated(users.latent, rows)
            return np.concatenate([half, half], axis=1)
        return self._propagated(None, rows)

    def _propagated(self, table: np.ndarray | None, rows: np.ndarray | None) -> np.ndarray:
        """:meth:`user_context` of the (N, D) ``table`` (None: [latent | memory_latent])."""
        cfg = self.config.context
        n = len(self.users.stance)
        if rows is not None and n > local_propagation_users():
            indptr, indices = self.graph.followees_csr()
            return kernels.propagate_rows(
                self.users.context_table() if table is None else table,
                indptr,
                indices,
                np.asarray(rows, np.int64),
                cfg.alpha,
                cfg.hops,
                self._propagation_buffers,
            )
        if table is not None:
            base = table
        elif cfg.hops > 0:  # read by the hops only: the kept table, no new (N, 2d) array
            base = self.users.context_table()
        else:
            base = np.concatenate([self.users.latent, self.users.memory_latent], axis=1)
        if cfg.hops > 0 and kernels.BACKEND == "numba":  # the same values as SciPy's CSR product
            indptr, indices = self.graph.followees_csr()
            return kernels.propagate_csr(base, indptr, indices, cfg.alpha, cfg.hops, rows)
        if cfg.hops > 0:
            if self._adjacency is None:
                indptr, indices = self.graph.followees_csr()
                self._adjacency = normalized_adjacency(indptr, indices, n)
            base = propagate(base, self._adjacency, cfg.alpha, cfg.hops)
        return base if rows is None else base[rows]

    def feed_context(self) -> FeedContext:
        return FeedContext(
            round=self.round,
            users=self.users,
            posts=self.posts,
            graph=self.graph,
            round_start=self.round_start,
            centroids=self.centroids,
        )

    def recent_post_range(self, rounds: int) -> tuple[int, int]:
        """Post ids [lo, hi) written in the last ``rounds`` rounds (history counts as round -1)."""
        return self.feed_context().posts_of_rounds(self.round - rounds, self.round - 1)

    # ----------------------------------------------------------------------------- a round
    def apply_policy(self, choice: dict[str, np.ndarray]) -> np.ndarray:
        """The policy's choices for the coming round take effect through the lever
        (:meth:`Lever.apply`; ``choice``: the env's arm columns of the chosen arms); users the
        lever now bars leave this round's active set. Returns the indices of the choices
        that took effect."""
        taken = self.lever.apply(choice)
        barred = self.lever.barred(self.round)
        if barred is not None:
            self.active = self.active[~barred[self.active]]
        return taken

    def barred(self, round_: int) -> np.ndarray:
        """(N,) bool: the users the lever keeps from acting in ``round_``."""
        barred = self.lever.barred(round_)
        return np.zeros(len(self.users.stance), bool) if barred is None else barred

    def run_round(self) -> RoundResult:
        """Play round t, phase by phase: build the feeds (the lever places the policy's
        recommendations), filter them, ask the brain, apply its output, advance to round
        t + 1, measure. The policy's choices enter before, through :meth:`apply_policy`."""
        t = self.round
        active = self.active
        feed, channel = self._build_feeds(t, active)
        feeds = self._filter_feeds(t, active, feed, channel)
        before = _RoundStart(
            stance=self.users.stance.copy(),
            discrete=self.users.discrete_stance.copy(),
            misinformed=self.users.misinformed.copy(),
        )
        news = self._news(t)
        output = self._ask_brain(t, active, feeds.feed, channel, news, before)
        text_toxicity = self._apply(output, t)
        events_fired = self._advance(t, output, news)
        result = RoundResult(
            round=t,
            active=active,
            feed=feeds.feed,
            feed_channel=channel,
            impression_user=feeds.impression_user,
            impression_post=feeds.impression_post,
            impression_removed=feeds.impression_removed,
            output=output,
            stance_before=before.stance,
            discrete_before=before.discrete,
            misinformed_before=before.misinformed,
            impression_author=feeds.impression_author,
        )
        self._measure(result, feeds, text_toxicity, events_fired)
        return result

    def _build_feeds(self, t: int, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Phase 1: every active user's (B, F) feed and channels; the lever places the
        policy's recommendations."""
        feed, channel = self.recommender.build_feeds(
            self.feed_context(), active, self.rng(t, Stream.FEED)
        )
        return self.lever.place_recommendations(feed, channel, active)

    def _filter_feeds(
        self, t: int, active: np.ndarray, feed: np.ndarray, channel: np.ndarray
    ) -> _FilteredFeeds:
        """Phase 2: drop own and repeated posts, the lever's filter (decisions in force),
        then exposure control; the candidate impressions and which the filter removed."""
        owner = np.broadcast_to(active[:, None], feed.shape)
        feed = kernels.drop_own_and_repeated(feed, active, self.posts.author)
        feed = self.lever.filter_feeds(feed, owner, t, _LazyRng(self, t, Stream.LEVER))
        filtered, removed_count = self.exposure_control.filter(
            feed, self.posts.author, self.users.exposure, self.rng(t, Stream.EXPOSURE)
        )
        valid, user, post, author, removed = kernels.feed_impressions(
            feed, filtered, active, self.posts.author
        )
        return _FilteredFeeds(
            feed=filtered,
            valid=valid,
            removed_count=removed_count,
            impression_user=user,
            impression_post=post,
            impression_author=author,
            impression_removed=removed,
        )

    def _news(self, t: int) -> list[Any]:
        """The scenario's news of round t and the events starting in it."""
        return [
            e for e in (self.scenario.news if self.scenario else []) if e.round == t
        ] + self.events.start(t)

    def _ask_brain(
        self,
        t: int,
        active: np.ndarray,
        feed: np.ndarray,
        channel: np.ndarray,
        news: list[Any],
        before: _RoundStart,
    ) -> RoundOutput:
        """Phase 3: one batched call of the brain; its output checked (unless trusted) and
        adjusted by the lever."""
        indptr, indices = self.graph.followees_csr()
        round_input = RoundInput(
            round=t,
            active=active.copy(),
            feed=feed,
            feed_channel=channel,
            users=self.users.view(),
            posts=self.posts.view(),
            following_indptr=indptr,
            following_indices=indices,
            news=news,
            topic=self.scenario.topic if self.scenario else "",
            misinformation_message=self.scenario.misinformation_message if self.scenario else None,
            rng=self.rng(t, Stream.BRAIN),
        )
        output = self.brain.act(round_input)
        if not getattr(self.brain, "trusted_output", False):
            output.validate(len(self.users.stance), len(self.posts), self.posts.latent_dim)
        self.lever.adjust_output(output, before.misinformed, _LazyRng(self, t, Stream.LEVER))
        return output

    def _advance(self, t: int, output: RoundOutput, news: list[Any]) -> int:
        """Phase 5: fire the round's events, feed the activity model, move to round t + 1
        and sample its active users. Returns the number of events fired."""
        events_fired = self.events.apply_fired(t, self.users, _LazyRng(self, t, Stream.EVENTS))
        if self.activity_model is not None:
            self.activity_model.observe(output, self.posts.author, news)
        self.round += 1
        self.round_start = np.append(self.round_start, len(self.posts))
        self.active = self.sample_active(self.round)
        return events_fired

    def _measure(
        self,
        result: RoundResult,
        feeds: _FilteredFeeds,
        text_toxicity: np.ndarray,
        events_fired: int,
    ) -> None:
        """Phase 6: the reactions' authors and stances, what the policy's choices caused
        (:meth:`Lever.effects`) and the platform metrics (:mod:`socialenv.core.metrics`)."""
        output = result.output
        result.reaction_author, result.reaction_cross = kernels.reaction_ends(
            output.react_user, output.react_post, self.posts.author, result.discrete_before
        )
        result.policy = self.lever.effects(result)
        result.metrics = metrics.round_metrics(
            stance=self.users.stance,
            text_toxicity=text_toxicity,
            reaction_cross=result.reaction_cross,
            misinformed=self.users.misinformed,
            reactions=len(output.react_user),
            active=len(result.active),
            followees=self.graph.followees_csr(),
            removed=feeds.removed_count,
            impressions=len(feeds.impression_post),
            channel=result.feed_channel[feeds.valid],
            posts=len(output.post_user),
            follow_edges=len(self.graph),
            events_fired=events_fired,
        )
        if self.activity_model is not None:
            result.metrics["activity_excitation_news"] = float(self.activity_model.external)
            result.metrics["activity_excitation_notifications"] = float(
                self.activity_model.internal.mean()
            )
        self.events.check_triggers(result.round, result.metrics)
        for reason, count in output.invalid.items():
            result.metrics[f"invalid_{reason}"] = float(count)

    def _apply(self, out: RoundOutput, t: int) -> np.ndarray:
        """Phase 4: apply the brain's output to the world; returns the toxicity of the texts
        written."""
        users, posts = self.users, self.posts
        first_new = len(posts)
        # the follow graph's edit reads and writes nothing else of the world: with threads (and
        # a graph large enough to pay for the hand-over) it runs beside the posts' updates
        graph_edit = beside(
            lambda: self.graph.edit(
                out.follow_src, out.follow_dst, out.unfollow_src, out.unfollow_dst
            ),
            worth_a_thread=len(self.graph) >= _BESIDE_MIN_EDGES,
        )
        kind = out.react_kind
        kernels.count_reactions(
            out.react_post,
            kind,
            np.array(_COUNTED, kind.dtype),
            (posts.likes, posts.dislikes, posts.retweets, posts.replies),
        )
        (
            shares,
            share_user,
            share_post,
            is_reply,
            share_toxicity,
            share_misinfo,
            share_stance,
            share_kind,
        ) = kernels.share_columns(
            kind,
            out.react_user,
            out.react_post,
            out.react_toxicity,
            out.react_stance,
            posts.toxicity,
            posts.misinfo,
            _SHARE_CODES,
        )
        # the shares' latents are written straight into the post table's next rows
        posts.reserve(len(share_user) + len(out.post_user))
        share_latent = posts.latent[first_new : first_new + len(share_user)]
        kernels.share_latents(
            posts.latent, users.latent, share_post, share_user, is_reply, share_latent
        )
        share_text = None
        if posts.text is not None:
            react_text = out.react_text or [None] * len(kind)
            share_text = [
                react_text[i]
                if react_text[i] is not None or kind[i] == Behaviour.REPLY
                else posts.text[out.react_post[i]]
                for i in np.flatnonzero(shares)
            ]
        if len(share_user):
            posts.append(
                author=share_user,
                round_=t,
                kind=share_kind,
                parent=share_post,
                latent=share_latent,
                stance=share_stance,
                toxicity=share_toxicity,
                misinfo=share_misinfo,
                cluster=assign_clusters(share_latent, self.centroids),
                text=share_text,
            )
        if len(out.post_user):
            post_text = out.post_text
            if posts.text is not None and post_text is None:
                post_text = synthetic_text(
                    self.scenario.topic if self.scenario else "",
                    out.post_stance,
                    out.post_misinfo,
                    self.rng(t, Stream.TEXT),
                    self.scenario.misinformation_message if self.scenario else None,
                )
            posts.append(
                author=out.post_user,
                round_=t,
                kind=int(PostKind.POST),
                parent=-1,
                latent=out.post_latent,
                stance=out.post_stance,
                toxicity=out.post_toxicity,
                misinfo=out.post_misinfo,
                cluster=assign_clusters(out.post_latent, self.centroids),
                text=post_text,
            )
        self._classify(first_new, self.rng(t, Stream.CLASSIFIER))
        share_flagged = posts.flagged[first_new : first_new + len(share_user)]
        post_flagged = posts.flagged[first_new + len(share_user) : len(posts)]
        written_by = np.concatenate([out.post_user, share_user[is_reply]])
        written_toxicity = np.concatenate([out.post_toxicity, share_toxicity[is_reply]])
        written_flagged = np.concatenate([post_flagged, share_flagged[is_reply]])
        self._update_author_history(written_by, written_toxicity, written_flagged)

        added, removed = graph_edit()
        if added or removed:
            self._adjacency = None

        beta = self.config.stance_ema
        # a brain that restates every user's stance (the surrogate's arange) updates the
        # columns whole: the same values as through the index, without a gather and scatter
        stance_rows = (
            slice(None) if _every_row(out.stance_user, len(users.stance)) else out.stance_user
        )
        users.stance[stance_rows] = (
            beta * users.stance[stance_rows] + (1 - beta) * out.stance_discrete
        )
        users.discrete_stance[stance_rows] = out.stance_discrete
        users.opinion[out.opinion_user] = out.opinion_value
        users.misinformed[out.misinformed_user] = out.misinformed_value

        if len(out.react_user):
            order = np.argsort(out.react_user, kind="stable")
            who, first = kernels.sorted_starts(out.react_user[order])
            kernels.memory_update(
                users.memory_latent,
                posts.latent,
                out.react_post[order],
                first,
                who,
                self.config.memory_ema,
            )
        return written_toxicity

    def _classify(self, first: int, rng: np.random.Generator) -> None:
        """The platform's misinformation classifier flags posts ``first..`` (written once)."""
        cfg = self.config.classifier
        new = slice(first, len(self.posts))
        u = rng.random(len(self.posts) - first)
        misinfo = self.posts.misinfo[new]
        self.posts.flagged[new] = np.where(misinfo, u < cfg.recall, u < cfg.false_positive_rate)

    def _update_author_history(
        self, author: np.ndarray, toxicity: np.ndarray, misinfo: np.ndarray, decay: float = 0.5
    ) -> None:
        """Observable per-user history the platform keeps: EMA of the toxicity and of the
        share of flagged posts (by the platform's classifier) of what each user wrote."""
        if len(author) == 0:
            return
        kernels.author_history(
            self.recent_toxicity, self.recent_misinfo, author, toxicity, misinfo, decay
        )

    # ----------------------------------------------------------------------------- memory
    #: Set False to keep every post (the compaction never changes results; see tests).
    compact_posts_enabled: bool = True

    def post_horizon(self) -> int:
        """Rounds of posts anything can still reach: the relational channel reads round t−1,
        the personalized and headline channels, the Rec candidate posts and the Exposure
        candidate authors read the last ``recommender.window`` rounds, and rewards read this
        round's feeds; one more round is kept as a margin."""
        return max(self.config.recommender.window, 1) + 1

    def compact_posts(self) -> int:
        """Drop the posts older than :meth:`post_horizon` once they are at least half of the
        post table (amortized O(1) per post), if the brain and the lever allow it
        (``supports_post_compaction``). Call between rounds only: ids of the kept posts
        shift down by the returned count (``posts_dropped`` totals it, so a post's id since
        the episode start is ``id + posts_dropped``); the lever (:meth:`Lever.remap_posts`)
        and every callback of ``post_id_holders`` shift the ids they hold. Returns the
        number dropped (often 0)."""
        if not self.compact_posts_enabled or not getattr(
            self.brain, "supports_post_compaction", False
        ):
            return 0
        if not self.lever.supports_post_compaction:
            return 0
        first_kept = self.round - self.post_horizon()
        if first_kept <= -1:
            return 0
        cut = int(self.round_start[first_kept + 1])
        if cut == 0 or 2 * cut < len(self.posts):
            return 0
        self.posts.drop_before(cut)
        self.round_start = np.maximum(self.round_start - cut, 0)
        self.posts_dropped = getattr(self, "posts_dropped", 0) + cut
        self.lever.remap_posts(cut)
        for remap in self.post_id_holders:
            remap(cut)
        return cut

    # ----------------------------------------------------------------------------- save
    def state_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "round": self.round,
            "users": self.users.state_dict(),
            "posts": self.posts.state_dict(),
            "graph_keys": self.graph.keys,
            "round_start": self.round_start.tolist(),
            "recent_toxicity": self.recent_toxicity.copy(),
            "recent_misinfo": self.recent_misinfo.copy(),
            "centroids": self.centroids.copy(),
            "active": self.active.copy(),
            "brain": self.brain.state_dict(),
            "events": self.events.state_dict(),
            "activity": None if self.activity_model is None else self.activity_model.state_dict(),
            "lever": self.lever.state_dict(),
            "posts_dropped": getattr(self, "posts_dropped", 0),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state saved by :meth:`state_dict` (the scenario is rebuilt from the config)."""
        self.reset(state["seed"])
        self.round = state["round"]
        self.users.load_state_dict(state["users"])
        self.posts = PostTable.from_state_dict(state["posts"])
        self.graph.keys = state["graph_keys"]
        self._adjacency = None
        self.round_start = np.asarray(state["round_start"], np.int64)
        self.recent_toxicity = state["recent_toxicity"].copy()
        self.recent_misinfo = state["recent_misinfo"].copy()
        self.centroids = state["centroids"].copy()
        self.active = state["active"].copy()
        self.brain.load_state_dict(state["brain"])
        if state.get("events") is not None:
            self.events.load_state_dict(state["events"])
        if state.get("activity") is not None and self.activity_model is not None:
            self.activity_model.load_state_dict(state["activity"])
        # "moderation": the key of the lever's state before the lever was a component
        self.lever.load_state_dict(state.get("lever", state.get("moderation")))
        self.posts_dropped = int(state.get("posts_dropped", 0))
