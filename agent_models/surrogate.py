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
expressed attitude a_u = clip(o_u + shock_u) drops at a news event and recovers slowly.
Each round the discrete stance s_u = sign(a_u) (0 inside ±1/3) of every user is reported;
the env smooths it with the paper's EMA (Eq. 2).

Misinformation spreads as a complex contagion: a user who saw k misinformation posts this
round adopts it with probability susceptibility·σ(steepness·(k − threshold))·adoption_rate;
misinformed users slip the message into their posts; believers recover at a small rate.

All draws come from ``RoundInput.rng``: deterministic under the env's seed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from agent_models.base import Brain
from agent_models.types import (
    Behaviour,
    FeedChannel,
    PostColumns,
    RoundInput,
    RoundOutput,
    UserColumns,
)
from agent_models.validation import check_fields


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class SurrogateConfig:
    """Parameters of the surrogate model (calibrated so the no-intervention platform at 1,000
    users over 10 rounds sits near the paper's Origin row; see BENCHMARKS.md).

    Reaction log-odds per (user, post) pair, with sim = cos(x_u, x_p), agree = o_u·s_p,
    gap = |o_u − s_p| / 2:
        like    = like_bias    + interest_weight·sim + agreement_weight·agree
        dislike = dislike_bias + interest_weight·sim − agreement_weight·agree
        retweet = retweet_bias + interest_weight·sim + retweet_agreement_weight·agree
        reply   = reply_bias   + interest_weight·sim + reply_gap_weight·gap + log(reply_freq/0.25)
    plus ``promoted_attention`` for posts the platform injected at the top of the feed
    (position bias: a promoted slot is read more often).
    """

    like_bias: float = -2.6
    dislike_bias: float = -4.2
    retweet_bias: float = -4.0
    reply_bias: float = -4.2
    interest_weight: float = 1.5
    agreement_weight: float = 2.0
    retweet_agreement_weight: float = 4.0
    reply_gap_weight: float = 1.5
    promoted_attention: float = 1.5
    post_rate: float = 0.35
    post_noise: float = 0.3
    stance_noise: float = 0.15
    reply_toxicity_base: float = 0.1
    reply_toxicity_gap: float = 1.6
    post_toxicity_scale: float = 0.2
    toxic_threshold: float = 0.5
    follow_prob: float = 0.08
    unfollow_prob: float = 0.15
    assimilation_rate: float = 0.15
    confidence_bound: float = 1.0
    backfire_rate: float = 0.1
    backfire_gap: float = 0.5
    anchor_rate: float = 0.1
    reinforcement_rate: float = 0.2
    news_sensitivity: float = 0.8
    news_decay: float = 0.6
    exposure_assimilation: float = 0.0
    misinfo_threshold: float = 1.5
    misinfo_steepness: float = 2.0
    misinfo_adoption: float = 0.9
    misinfo_post_share: float = 0.7
    misinfo_recovery: float = 0.02

    def __post_init__(self) -> None:
        check_fields(self, "surrogate.")  # finite numbers, NumPy accepted, no bools
        probabilities = (
            "post_rate", "follow_prob", "unfollow_prob", "assimilation_rate", "backfire_rate",
            "anchor_rate", "reinforcement_rate", "news_decay", "misinfo_adoption", "misinfo_post_share", "misinfo_recovery",
            "exposure_assimilation", "toxic_threshold",
        )
        for name in probabilities:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"surrogate.{name}={value!r} is not allowed: a number in [0, 1]")
        for name in ("post_noise", "stance_noise", "confidence_bound", "misinfo_steepness"):
            if getattr(self, name) < 0:
                raise ValueError(f"surrogate.{name}={getattr(self, name)!r} is not allowed: >= 0")


_REACTIONS = (Behaviour.LIKE, Behaviour.DISLIKE, Behaviour.RETWEET, Behaviour.REPLY)


class SurrogateBrain(Brain):
    """Vectorized surrogate users; see the module docstring for the model."""

    supports_post_compaction = True

    def __init__(self, config: SurrogateConfig | None = None) -> None:
        self.config = config or SurrogateConfig()
        self.anchor: np.ndarray | None = None
        self.shock: np.ndarray | None = None

    def reset(self, users: UserColumns, posts: PostColumns, seed: int) -> None:
        self.anchor = users.opinion.copy()
        self.shock = np.zeros(len(users), np.float32)
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"anchor": None if self.anchor is None else self.anchor.copy(),
                "shock": None if self.shock is None else self.shock.copy(),
                "config": asdict(self.config)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.anchor = None if state["anchor"] is None else state["anchor"].copy()
        self.shock = None if state["shock"] is None else state["shock"].copy()
        self.config = SurrogateConfig(**{f.name: state["config"][f.name] for f in fields(SurrogateConfig)})

    def act(self, round_input: RoundInput, chunk: int = 65_536) -> RoundOutput:
        if self.anchor is None:
            raise RuntimeError("SurrogateBrain.act called before reset")
        cfg = self.config
        rng = round_input.rng
        users, posts = round_input.users, round_input.posts
        active, feed = round_input.active, round_input.feed
        b, f = feed.shape

        # --- reactions to the feed, one Bernoulli per (pair, behaviour) -------------------
        for event in round_input.news:
            self.shock += (cfg.news_sensitivity * event.shift * (0.5 + users.susceptibility)).astype(np.float32)
        attitude = np.clip(users.opinion + self.shock, -1, 1)
        valid = feed >= 0
        safe_feed = np.where(valid, feed, 0)
        sim = np.empty((b, f), np.float32)
        for lo in range(0, b, chunk):
            sim[lo : lo + chunk] = np.einsum(
                "bd,bfd->bf", users.latent[active[lo : lo + chunk]], posts.latent[safe_feed[lo : lo + chunk]]
            )
        opinion = attitude[active][:, None]
        feed_stance = posts.stance[safe_feed]
        agree = opinion * feed_stance
        gap = np.abs(opinion - feed_stance) / 2
        reply_propensity = np.log(np.maximum(users.profiles.reply_frequency[active], 1e-3) / 0.25)[:, None]
        promoted = (round_input.feed_channel == FeedChannel.INJECTED).astype(np.float32)
        interest = cfg.interest_weight * sim + cfg.promoted_attention * promoted
        logits = {
            Behaviour.LIKE: cfg.like_bias + interest + cfg.agreement_weight * agree,
            Behaviour.DISLIKE: cfg.dislike_bias + interest - cfg.agreement_weight * agree,
            Behaviour.RETWEET: cfg.retweet_bias + interest + cfg.retweet_agreement_weight * agree,
            Behaviour.REPLY: cfg.reply_bias + interest + cfg.reply_gap_weight * gap + reply_propensity,
        }
        draws = rng.random((len(_REACTIONS), b, f), dtype=np.float32)
        rows_u, rows_p, rows_k, rows_gap = [], [], [], []
        for i, behaviour in enumerate(_REACTIONS):
            hit = valid & (draws[i] < _sigmoid(logits[behaviour]))
            r, c = np.nonzero(hit)
            rows_u.append(r)
            rows_p.append(feed[r, c])
            rows_k.append(np.full(len(r), int(behaviour), np.int8))
            rows_gap.append(gap[r, c])
        react_row = np.concatenate(rows_u)
        react_user = active[react_row]
        react_post = np.concatenate(rows_p)
        react_kind = np.concatenate(rows_k)
        react_gap = np.concatenate(rows_gap).astype(np.float32)
        m = len(react_user)
        is_reply = react_kind == Behaviour.REPLY
        is_retweet = react_kind == Behaviour.RETWEET
        propensity = users.toxicity_propensity[react_user]
        reply_toxicity = propensity * (cfg.reply_toxicity_base + cfg.reply_toxicity_gap * react_gap)
        reply_toxicity *= rng.uniform(0.5, 1.5, m)
        react_toxicity = np.where(is_reply, np.clip(reply_toxicity, 0, 1), 0.0).astype(np.float32)
        own = attitude[react_user]
        react_stance = np.where(
            is_retweet, posts.stance[react_post],
            np.clip(own + cfg.stance_noise * rng.standard_normal(m), -1, 1),
        ).astype(np.float32)

        # --- original posts --------------------------------------------------------------
        ratio = users.profiles.post_retweet_ratio[active]
        post_prob = np.clip(cfg.post_rate * 2 * ratio / (1 + ratio), 0, 1)
        poster = active[rng.random(b) < post_prob]
        p = len(poster)
        post_latent = users.latent[poster] + cfg.post_noise * rng.standard_normal((p, users.latent.shape[1]))
        post_latent /= np.maximum(np.linalg.norm(post_latent, axis=1, keepdims=True), 1e-8)
        post_stance = np.clip(attitude[poster] + cfg.stance_noise * rng.standard_normal(p), -1, 1)
        post_toxicity = np.clip(
            users.toxicity_propensity[poster] * cfg.post_toxicity_scale * rng.uniform(0.5, 1.5, p), 0, 1
        )
        post_misinfo = users.misinformed[poster] & (rng.random(p) < cfg.misinfo_post_share)

        # --- follow / unfollow -------------------------------------------------------------
        author = posts.author[react_post]
        positive = (react_kind == Behaviour.LIKE) | is_retweet
        hostile = (react_kind == Behaviour.DISLIKE) | (is_reply & (react_toxicity > cfg.toxic_threshold))
        follow = positive & (rng.random(m) < cfg.follow_prob)
        unfollow = hostile & (rng.random(m) < cfg.unfollow_prob)

        # --- opinion dynamics --------------------------------------------------------------
        n = len(users)
        target = posts.stance[react_post]
        delta = target - own
        assimilate = positive | (is_reply & ~hostile)
        assimilate &= np.abs(delta) <= 2 * cfg.confidence_bound
        backfire = hostile & (np.abs(delta) >= 2 * cfg.backfire_gap)
        moved = assimilate | backfire
        rate = np.where(assimilate, cfg.assimilation_rate, -cfg.backfire_rate)
        persistent = users.opinion[react_user]
        like_minded = assimilate & (np.sign(target) == np.sign(persistent)) & (np.abs(target) > 1 / 3)
        step = rate * delta + np.where(
            like_minded, cfg.reinforcement_rate * np.sign(target) * (1 - np.abs(persistent)), 0.0
        )
        push = np.bincount(react_user[moved], weights=step[moved], minlength=n)
        weight = np.bincount(react_user[moved], minlength=n).astype(np.float64)
        new_opinion = users.opinion.astype(np.float64).copy()
        touched = weight > 0
        new_opinion[touched] += push[touched] / np.sqrt(weight[touched])
        if cfg.exposure_assimilation > 0 and b:
            seen_stance = np.where(valid, feed_stance, 0.0).sum(axis=1)
            seen = np.maximum(valid.sum(axis=1), 1)
            mean_seen = seen_stance / seen
            new_opinion[active] += cfg.exposure_assimilation * (mean_seen - new_opinion[active]) * (valid.any(axis=1))
        new_opinion += cfg.anchor_rate * (self.anchor - new_opinion)
        new_opinion = np.clip(new_opinion, -1, 1).astype(np.float32)
        changed = np.flatnonzero(new_opinion != users.opinion)
        expressed = np.clip(new_opinion + self.shock, -1, 1)
        discrete = np.where(expressed > 1 / 3, 1, np.where(expressed < -1 / 3, -1, 0))
        self.shock *= cfg.news_decay

        # --- misinformation: complex contagion ---------------------------------------------
        seen_misinfo = (valid & posts.misinfo[safe_feed]).sum(axis=1)
        believer = users.misinformed[active]
        adopt_prob = users.susceptibility[active] * cfg.misinfo_adoption * _sigmoid(
            cfg.misinfo_steepness * (seen_misinfo - cfg.misinfo_threshold)
        )
        adopt_prob = np.where(seen_misinfo > 0, adopt_prob, 0.0)
        u = rng.random(b)
        new_belief = np.where(believer, u >= cfg.misinfo_recovery, u < adopt_prob)
        flipped = new_belief != believer

        return RoundOutput(
            react_user=react_user,
            react_post=react_post,
            react_kind=react_kind,
            react_stance=react_stance,
            react_toxicity=react_toxicity,
            post_user=poster,
            post_latent=post_latent.astype(np.float32),
            post_stance=post_stance.astype(np.float32),
            post_toxicity=post_toxicity.astype(np.float32),
            post_misinfo=post_misinfo,
            follow_src=react_user[follow],
            follow_dst=author[follow],
            unfollow_src=react_user[unfollow],
            unfollow_dst=author[unfollow],
            stance_user=np.arange(n, dtype=np.int64),
            stance_discrete=discrete.astype(np.int8),
            opinion_user=changed.astype(np.int64),
            opinion_value=new_opinion[changed],
            misinformed_user=active[flipped],
            misinformed_value=new_belief[flipped],
        )
