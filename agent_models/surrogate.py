"""The fast surrogate brain: a vectorized behavioural model in latent space.

For every (active user u, feed post p) pair it draws independent reactions (like, dislike,
retweet, reply) whose log-odds rise with interest similarity cos(x_u, x_p) and with stance
agreement o_u·s_p (likes, retweets) or disagreement (dislikes, replies); reply toxicity
rises with disagreement and with u's toxicity propensity, so cross-viewpoint exposure is a
real trade-off. Users post, follow authors they liked, unfollow authors they clashed with.

Opinions o_u ∈ [−1, 1] move by bounded-confidence assimilation toward posts a user
engaged with without hostility, by reinforcement toward the extreme when the post agrees
with the user (group polarization: like-minded content makes views more extreme), by
backfire away from posts met with dislike or a toxic reply, and slowly back toward each
user's anchor. News is a transient shock added on top (decaying each round), so the
expressed attitude a_u = clip(o_u + shock_u) drops at a news event and is mostly back two
rounds later; what the shock left in the persistent opinions stays.
Each round the discrete stance s_u = sign(a_u) (0 inside ±1/3) of every user is reported;
the env smooths it with the paper's EMA (Eq. 2).

Misinformation spreads as a complex contagion: a user who saw k misinformation posts this
round adopts it with probability susceptibility·σ(steepness·(k − threshold))·adoption_rate;
misinformed users slip the message into their posts; believers recover at a small rate.

All draws come from ``RoundInput.rng``: deterministic under the env's seed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Annotated, Any

import numpy as np

from agent_models.base import Brain
from agent_models.surrogate_kernels import COLUMN_PARAMS as REACTION_COLUMN_PARAMS
from agent_models.surrogate_kernels import PARAMS as REACTION_PARAMS
from agent_models.surrogate_kernels import REACTIONS as _REACTIONS
from agent_models.surrogate_kernels import (
    noisy_unit_rows,
    post_choices,
    post_columns,
    pushed_opinions,
    reaction_columns,
    reaction_hits,
)
from agent_models.surrogate_kernels import sigmoid as _sigmoid
from agent_models.surrogate_mechanisms import (
    MECHANISMS,
    BeliefMechanism,
    Mechanism,
    OpinionMechanism,
    Reacted,
    ReactionMechanism,
    reaction_moves,
)
from agent_models.types import (
    PostColumns,
    RoundInput,
    RoundOutput,
    UserColumns,
)
from policysim_infra.blocks import beside, map_blocks, random_in_blocks
from policysim_infra.buffers import ReusedArrays
from policysim_infra.validation import Limit, check_fields

#: A surrogate parameter that is a probability, a rate or a share: a number in [0, 1].
Probability = Annotated[float, Limit(ge=0, le=1)]
#: A surrogate parameter that is a scale or a weight that cannot be negative.
NonNegative = Annotated[float, Limit(ge=0)]


#: Reactions from which a round's opinion update runs beside its new posts (on threads).
_BESIDE_MIN_REACTIONS = 1 << 16


@dataclass(frozen=True)
class SurrogateConfig:
    """Parameters of the surrogate model (calibrated so the no-intervention platform at 1,000
    users over 10 rounds sits near the paper's Origin row; see BENCHMARKS.md).

    Reaction log-odds per (user, post) pair, with sim = cos(x_u, x_p), agree = a_u·s_p,
    gap = |a_u − s_p| / 2 (a_u: the user's expressed attitude):
        like    = like_bias    + interest_weight·sim + agreement_weight·agree
        dislike = dislike_bias + interest_weight·sim − agreement_weight·agree
        retweet = retweet_bias + interest_weight·sim + retweet_agreement_weight·agree
        reply   = reply_bias   + interest_weight·sim + reply_gap_weight·gap + log(reply_freq/0.25)
    plus ``recommended_attention`` for posts in the recommended (personalized) slots, whether
    the built-in recommender or the policy filled them (users read the recommended feed more
    than the rest), and ``promoted_attention`` on top for the slots the policy filled (0 by
    default: a slot the policy filled is read like any other recommended slot).

    Reply toxicity = clip(p_u·reply_toxicity_base + reply_toxicity_gap·gap·max(p_u −
    civility_threshold, 0), 0, 1)·U(0.5, 1.5), p_u the user's toxicity propensity: only users
    above the civility threshold turn hostile on disagreement (hostile pairs), so dialogue
    across stances need not raise toxicity.

    Opinion dynamics of the persistent opinion o_u (each mechanism one class of
    :mod:`agent_models.surrogate_mechanisms`, switched off by its ``OFF`` values):
        assimilation: a civil positive reaction to a post within ``confidence_bound`` of o_u
            (|s_p − o_u| ≤ 2·confidence_bound; 1 switches bounded confidence off) moves o_u
            by assimilation_rate·(s_p − o_u);
        backfire: a hostile reaction (dislike, toxic reply) to a post at least
            2·backfire_gap away moves o_u away by backfire_rate·(s_p − o_u) (0 = off);
        reinforcement: agreeing content pushes o_u toward its extreme by
            reinforcement_rate·(1 − |o_u|);
        anchoring: o_u returns toward the user's initial opinion at anchor_rate per round.
    News is a transient shock on the expressed attitude a_u = clip(o_u + shock_u), added at
    the event (news_sensitivity·shift·(0.5 + susceptibility)) and multiplied by news_decay
    each round: the discrete stance drops in the news round and is mostly back two rounds
    later, while the part the shock left in the persistent opinions (users assimilated and
    reinforced shocked posts) stays.

    The defaults give the paper's Fig. 3 shape at 1,000 users within 10 rounds (measured by
    ``benchmarks/fig3.py``): the smoothed stance mean drops at each news round and recovers
    part of the drop before the next (news_decay 0.2; with 0.8 the shock outlived the gap
    between news and the mean fell in every round); its std grows over the episode and grows
    more when the personalized channel ranks by stance agreement (reinforcement_rate 0.1,
    confidence_bound 0.3: like-minded content pulls harder, distant content assimilates less).
    """

    like_bias: float = -2.6
    dislike_bias: float = -4.0
    retweet_bias: float = -4.0
    reply_bias: float = -4.3
    interest_weight: NonNegative = 1.5
    agreement_weight: float = 1.2
    retweet_agreement_weight: float = 3.0
    reply_gap_weight: float = 1.5
    recommended_attention: float = 1.0
    promoted_attention: float = 0.0
    post_rate: Probability = 0.35
    post_noise: NonNegative = 0.3
    stance_noise: NonNegative = 0.15
    reply_toxicity_base: NonNegative = 0.2
    reply_toxicity_gap: NonNegative = 3.0
    civility_threshold: Probability = 0.15
    post_toxicity_scale: NonNegative = 0.25
    toxic_threshold: Probability = 0.5
    follow_prob: Probability = 0.05
    unfollow_prob: Probability = 0.15
    assimilation_rate: Probability = 0.15
    confidence_bound: Probability = 0.3
    backfire_rate: Probability = 0.15
    backfire_gap: Probability = 0.4
    anchor_rate: Probability = 0.1
    reinforcement_rate: Probability = 0.1
    news_sensitivity: float = 0.8
    news_decay: Probability = 0.2
    exposure_assimilation: Probability = 0.0
    misinfo_threshold: float = 1.2
    misinfo_steepness: NonNegative = 2.0
    misinfo_adoption: Probability = 0.8
    misinfo_post_share: Probability = 0.9
    misinfo_recovery: Probability = 0.02

    def __post_init__(self) -> None:
        check_fields(self, "surrogate.")  # finite numbers, NumPy accepted, no bools, limits


def _per_user(values: np.ndarray, user: np.ndarray) -> np.ndarray:
    """``values.take(user, axis=0)``: (*user.shape, *values.shape[1:]), read-only. A (R, F)
    ``user`` that repeats one id along each row (a broadcast, as a feed's owner is) is
    gathered once per row and broadcast along the row: the same values, without F random
    reads or copies of each user's row (NumPy's elementwise ops and ``einsum`` give the same
    bits on the broadcast view as on a copy)."""
    if user.ndim == 2 and user.shape[1] > 1 and user.strides[1] == 0:
        rows = values.take(user[:, 0], axis=0)
        return np.broadcast_to(rows[:, None], user.shape + values.shape[1:])
    return values.take(user, axis=0)


@dataclass
class _Reactions:
    """The reactions of a round as columns (one row per reaction)."""

    user: np.ndarray
    post: np.ndarray
    kind: np.ndarray
    stance: np.ndarray
    toxicity: np.ndarray
    positive: np.ndarray
    hostile: np.ndarray


@dataclass(frozen=True)
class _PerConfig:
    """A config's mechanisms, by kind in their order, and the reaction passes' weights."""

    config: SurrogateConfig
    mechanisms: list[Mechanism]
    reaction: list[ReactionMechanism]
    opinion: list[OpinionMechanism]
    belief: list[BeliefMechanism]
    hit_params: tuple[float, ...]
    column_params: tuple[float, ...]


class SurrogateBrain(Brain):
    """Vectorized surrogate users; see the module docstring for the model.

    A round (:meth:`act`) runs, in order: news shocks → reactions to the feed → original
    posts → follows / unfollows → opinion update → misinformation contagion.
    :meth:`reaction_probabilities` exposes the reaction model (what an oracle with access to
    the hidden state would use).
    """

    supports_post_compaction = True

    @property
    def trusted_output(self) -> bool:
        """Built-in and tested: the simulation skips ``RoundOutput.validate`` on its output —
        unless a subclass replaces :meth:`act`, whose output is checked again."""
        return type(self).act is SurrogateBrain.act

    def __init__(self, config: SurrogateConfig | None = None) -> None:
        self.config = config or SurrogateConfig()
        self.anchor: np.ndarray | None = None
        self.shock: np.ndarray | None = None
        self.round_attitude: np.ndarray | None = None
        # the reactions' draws (60 MB at 1M users), kept from round to round so that their
        # pages are not mapped and faulted in anew
        self._draw_memory = ReusedArrays(keep=1)

    def reset(self, users: UserColumns, posts: PostColumns, seed: int) -> None:
        self.anchor = users.opinion.copy()
        self.shock = np.zeros(len(users), np.float32)
        return None

    def state_dict(self) -> dict[str, Any]:
        return {
            "anchor": None if self.anchor is None else self.anchor.copy(),
            "shock": None if self.shock is None else self.shock.copy(),
            "config": asdict(self.config),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.anchor = None if state["anchor"] is None else state["anchor"].copy()
        self.shock = None if state["shock"] is None else state["shock"].copy()
        self.config = SurrogateConfig(
            **{f.name: state["config"][f.name] for f in fields(SurrogateConfig)}
        )

    # ------------------------------------------------------------------ the reaction model
    def attitude(self, users: UserColumns) -> np.ndarray:
        """(N,) expressed attitudes a_u = clip(o_u + shock_u, −1, 1)."""
        return np.clip(users.opinion + self.shock, -1, 1)

    def reaction_probabilities(
        self,
        users: UserColumns,
        posts: PostColumns,
        user: np.ndarray,
        post: np.ndarray,
        attention: np.ndarray | float | None = None,
    ) -> dict[str, np.ndarray]:
        """Reaction probabilities of users ``user`` to posts ``post`` (same shape, any shape).

        ``attention`` is the slot's extra log-odds (default: a recommended slot's,
        ``recommended_attention``).

        Returns a dict with "like", "dislike", "retweet", "reply" probabilities, "gap"
        (|a_u − s_p| / 2) and "reply_toxicity" (the expected toxicity of a reply).
        """
        return self._probabilities(users, posts, user, post, attention, self.attitude(users))

    def _probabilities(
        self,
        users: UserColumns,
        posts: PostColumns,
        user: np.ndarray,
        post: np.ndarray,
        attention: np.ndarray | float | None,
        attitudes: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """:meth:`reaction_probabilities` given every user's attitude (N,)."""
        cfg = self.config
        attitude = _per_user(attitudes, user)
        stance = posts.stance[post]
        sim = np.einsum(
            "...d,...d->...", _per_user(users.latent, user), posts.latent.take(post, axis=0)
        )
        agree = attitude * stance
        gap = np.abs(attitude - stance) / 2
        if attention is None:
            attention = cfg.recommended_attention
        interest = cfg.interest_weight * sim + attention
        reply_propensity = np.log(
            np.maximum(_per_user(users.profiles.reply_frequency, user), 1e-3) / 0.25
        )
        propensity = _per_user(users.toxicity_propensity, user)
        return {
            "like": _sigmoid(cfg.like_bias + interest + cfg.agreement_weight * agree),
            "dislike": _sigmoid(cfg.dislike_bias + interest - cfg.agreement_weight * agree),
            "retweet": _sigmoid(cfg.retweet_bias + interest + cfg.retweet_agreement_weight * agree),
            "reply": _sigmoid(
                cfg.reply_bias + interest + cfg.reply_gap_weight * gap + reply_propensity
            ),
            "gap": gap,
            "reply_toxicity": self._reply_toxicity(propensity, gap),
        }

    def _reply_toxicity(self, propensity: np.ndarray, gap: np.ndarray) -> np.ndarray:
        cfg = self.config
        hostility = np.maximum(propensity - cfg.civility_threshold, 0.0)
        return np.clip(
            propensity * cfg.reply_toxicity_base + cfg.reply_toxicity_gap * gap * hostility, 0, 1
        )

    # ------------------------------------------------------------------ a round
    def act(self, round_input: RoundInput) -> RoundOutput:
        if self.anchor is None or self.shock is None:
            raise RuntimeError("SurrogateBrain.act called before reset")
        shock = self.shock
        users, rng = round_input.users, round_input.rng
        for event in round_input.news:
            shock += (
                self.config.news_sensitivity * event.shift * (0.5 + users.susceptibility)
            ).astype(np.float32)
        attitude = self.attitude(users)
        #: the attitudes this round's behaviour used (read by socialenv.fitting.trace)
        self.round_attitude = attitude
        reactions = self._react(round_input, attitude, rng)
        # the opinion update draws nothing and writes nothing the next two read: with
        # threads (and enough reactions to pay for the hand-over) it runs beside them
        opinions = beside(
            lambda: self._update_opinions(round_input, reactions),
            worth_a_thread=len(reactions.user) >= _BESIDE_MIN_REACTIONS,
        )
        posts = self._write_posts(round_input, attitude, rng)
        follow, unfollow = self._follow(round_input, reactions, rng)
        changed, new_opinion, discrete = opinions()
        shock *= self.config.news_decay
        believers, belief = self._spread_misinformation(round_input, rng)
        n = len(users)
        post_author = round_input.posts.author  # gathered for the few reactions that (un)follow
        return RoundOutput(
            react_user=reactions.user,
            react_post=reactions.post,
            react_kind=reactions.kind,
            react_stance=reactions.stance,
            react_toxicity=reactions.toxicity,
            **posts,
            follow_src=reactions.user[follow],
            follow_dst=post_author.take(reactions.post[follow]),
            unfollow_src=reactions.user[unfollow],
            unfollow_dst=post_author.take(reactions.post[unfollow]),
            stance_user=np.arange(n, dtype=np.int64),
            stance_discrete=discrete,
            opinion_user=changed.astype(np.int64),
            opinion_value=new_opinion[changed],
            misinformed_user=believers,
            misinformed_value=belief,
        )

    def _react(
        self,
        round_input: RoundInput,
        attitude: np.ndarray,
        rng: np.random.Generator,
        chunk: int = 65_536,
    ) -> _Reactions:
        """One Bernoulli draw per (feed slot, behaviour); reply toxicity and reaction stance."""
        users, posts = round_input.users, round_input.posts
        active, feed = round_input.active, round_input.feed
        b, f = feed.shape
        shape = (len(_REACTIONS), b, f)
        draws = random_in_blocks(
            rng,
            shape,
            np.float32,
            out=self._draw_memory.empty_if_large(shape, np.float32, len(_REACTIONS) * b * f // 8),
        )
        if b and len(posts.stance):  # no post in the world: nothing to read
            row, react_post, kind, gap = self._blocked_hits(
                users, posts, active, feed, round_input.feed_channel, attitude, draws, chunk
            )
            react_user, gap = active[row], gap.astype(np.float32)
        else:
            react_user, react_post = np.zeros(0, np.int64), np.zeros(0, np.int64)
            kind, gap = np.zeros(0, np.int8), np.zeros(0, np.float32)
        m = len(react_user)
        uniform = rng.uniform(0.5, 1.5, m)  # the reply toxicity's noise, then the stance's
        normal = rng.standard_normal(m)
        toxicity, stance, positive, hostile = reaction_columns(
            kind,
            users.toxicity_propensity.take(react_user),
            gap,
            attitude.take(react_user),
            posts.stance.take(react_post),
            uniform,
            normal,
            self._per_config().column_params,
        )
        return _Reactions(react_user, react_post, kind, stance, toxicity, positive, hostile)

    def _blocked_hits(
        self,
        users: UserColumns,
        posts: PostColumns,
        active: np.ndarray,
        feed: np.ndarray,
        channel: np.ndarray,
        attitudes: np.ndarray,
        draws: np.ndarray,
        chunk: int = 65_536,
        block: int = 8192,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The reactions of the (B, F) feeds of ``active`` (B,), whose slots' channels are
        ``channel`` (B, F), given ``draws`` (behaviours, B, F): (feed row, post, kind, gap) of
        each, in order chunk after chunk of ``chunk`` rows and within a chunk behaviour after
        behaviour, row-major (:func:`~agent_models.surrogate_kernels.reaction_hits`).

        The reaction probabilities and hits of each ``block`` rows (a divisor of ``chunk``)
        are computed together on :func:`map_blocks`' threads, each entry on its own, so the
        (rows, F, d) embedding gathers stay in cache and the result is the same on any number
        of threads."""
        if chunk % block:
            raise ValueError(f"chunk={chunk} is not allowed: a multiple of block={block}")
        parts: list[tuple[np.ndarray, ...]] = [() for _ in range(0, len(active), block)]

        params = self._per_config().hit_params

        def run(lo: int, hi: int) -> None:
            rows, owners = feed[lo:hi], active[lo:hi]
            # (R, 1, d): each row's owner, broadcast against its F slots (the same einsum as
            # reaction_probabilities)
            sim = np.einsum(
                "...d,...d->...",
                users.latent.take(owners[:, None], axis=0),
                posts.latent.take(np.where(rows >= 0, rows, 0), axis=0),
            )
            reply_propensity = np.log(
                np.maximum(users.profiles.reply_frequency.take(owners), 1e-3) / 0.25
            )
            row, *rest, starts = reaction_hits(
                rows,
                channel[lo:hi],
                attitudes.take(owners),
                posts.stance,
                sim,
                reply_propensity,
                draws[:, lo:hi],
                params,
            )
            parts[lo // block] = (row + lo, *rest, starts)

        map_blocks(run, len(active), block)  # on POLICYSIM_THREADS threads: the same blocks
        if len(parts) == 1:  # one block: already behaviour after behaviour
            return parts[0][:4]  # type: ignore[return-value]
        per_chunk = chunk // block
        runs = [
            (part, i)
            for first in range(0, len(parts), per_chunk)
            for i in range(len(_REACTIONS))
            for part in parts[first : first + per_chunk]
        ]
        return tuple(  # type: ignore[return-value]
            np.concatenate([part[column][part[4][i] : part[4][i + 1]] for part, i in runs])
            for column in range(4)
        )

    def _write_posts(
        self, round_input: RoundInput, attitude: np.ndarray, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        """Original posts: who posts, and each post's latent, stance, toxicity, misinformation."""
        cfg = self.config
        users, active = round_input.users, round_input.active
        poster = post_choices(
            users.profiles.post_retweet_ratio, active, cfg.post_rate, rng.random(len(active))
        )
        p = len(poster)
        latent = noisy_unit_rows(users.latent, poster, cfg.post_noise, rng)
        normal = rng.standard_normal(p)
        uniform = rng.uniform(0.5, 1.5, p)
        stance, toxicity, misinfo = post_columns(
            attitude,
            users.toxicity_propensity,
            users.misinformed,
            poster,
            (cfg.stance_noise, cfg.post_toxicity_scale, cfg.misinfo_post_share),
            normal,
            uniform,
            rng.random(p),
        )
        return {
            "post_user": poster,
            "post_latent": latent,
            "post_stance": stance,
            "post_toxicity": toxicity,
            "post_misinfo": misinfo,
        }

    def _follow(
        self, round_input: RoundInput, reactions: _Reactions, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """(M,) bool masks over the reactions: follow the author after a positive reaction,
        unfollow after a hostile one."""
        m = len(reactions.user)
        follow = reactions.positive & (rng.random(m) < self.config.follow_prob)
        unfollow = reactions.hostile & (rng.random(m) < self.config.unfollow_prob)
        return follow, unfollow

    def mechanisms(self) -> list[Mechanism]:
        """The config's mechanisms (:data:`~agent_models.surrogate_mechanisms.MECHANISMS`), in
        the order a round applies them (built once per config: the config is frozen)."""
        return list(self._per_config().mechanisms)

    def _per_config(self) -> _PerConfig:
        """What a round derives from the config alone, built once per config."""
        built = getattr(self, "_built", None)
        if built is None or built.config is not self.config:
            cfg = self.config
            mechanisms = [kind.from_config(cfg) for kind in MECHANISMS]
            built = _PerConfig(
                config=cfg,
                mechanisms=mechanisms,
                reaction=[m for m in mechanisms if isinstance(m, ReactionMechanism)],
                opinion=[m for m in mechanisms if isinstance(m, OpinionMechanism)],
                belief=[m for m in mechanisms if isinstance(m, BeliefMechanism)],
                hit_params=tuple(float(getattr(cfg, name)) for name in REACTION_PARAMS),
                column_params=tuple(float(getattr(cfg, name)) for name in REACTION_COLUMN_PARAMS),
            )
            self._built = built
        return built

    def _update_opinions(
        self, round_input: RoundInput, reactions: _Reactions
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The reaction mechanisms' moves, then the opinion mechanisms, on the persistent
        opinions; returns the changed users, all new opinions (N,) and the discrete expressed
        stances (N,) int8."""
        if self.anchor is None or self.shock is None:
            raise RuntimeError("SurrogateBrain.act called before reset")
        anchor = self.anchor
        users, posts = round_input.users, round_input.posts
        who = reactions.user
        reacted = Reacted(
            opinion=users.opinion[who],
            stance=posts.stance[reactions.post],
            kind=reactions.kind,
            positive=reactions.positive,
            hostile=reactions.hostile,
        )
        kinds = self._per_config()
        moved, step = reaction_moves(kinds.reaction, reacted)
        new_opinion = pushed_opinions(users.opinion, who, moved, step)
        for mechanism in kinds.opinion:
            mechanism.apply(new_opinion, round_input, anchor)
        new_opinion = np.clip(new_opinion, -1, 1).astype(np.float32)
        changed = np.flatnonzero(new_opinion != users.opinion)
        expressed = np.clip(new_opinion + self.shock, -1, 1)
        discrete = np.where(
            expressed > 1 / 3, np.int8(1), np.where(expressed < -1 / 3, np.int8(-1), np.int8(0))
        )
        return changed, new_opinion, discrete

    def _spread_misinformation(
        self, round_input: RoundInput, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """The belief mechanisms (the misinformation contagion): the users whose belief
        flipped and their new belief."""
        flipped_users, beliefs = [], []
        for mechanism in self._per_config().belief:
            who, belief = mechanism.spread(round_input, rng)
            flipped_users.append(who)
            beliefs.append(belief)
        if len(flipped_users) == 1:
            return flipped_users[0], beliefs[0]
        if not flipped_users:
            return np.zeros(0, np.int64), np.zeros(0, bool)
        return np.concatenate(flipped_users), np.concatenate(beliefs)
