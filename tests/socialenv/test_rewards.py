"""The paper-form rewards (Eq. 9, Eq. 10, ``reward={"form": "paper"}``), checked against
hand-computed values with a scripted brain (the objective form: tests/socialenv/test_objective.py)."""

from __future__ import annotations

import numpy as np
import pytest

from agent_models.base import Brain
from agent_models.types import Behaviour, FeedChannel, RoundInput, RoundOutput
from socialenv.envs.exposure import ExposureEnv
from socialenv.envs.rec import RecEnv


class ScriptedBrain(Brain):
    """Every user shown a post in its INJECTED slot reacts with ``kind`` (toxicity ``tox``)."""

    def __init__(self, kind: Behaviour | None, tox: float = 0.0) -> None:
        self.kind, self.tox = kind, tox
        self.seen: RoundInput | None = None

    def reset(self, users, posts, seed):
        return None

    def act(self, round_input: RoundInput) -> RoundOutput:
        self.seen = round_input
        if self.kind is None:
            return RoundOutput()
        rows, cols = np.nonzero(round_input.feed_channel == 3)
        posts = round_input.feed[rows, cols]
        keep = posts >= 0
        m = int(keep.sum())
        return RoundOutput(
            react_user=round_input.active[rows[keep]],
            react_post=posts[keep],
            react_kind=np.full(m, int(self.kind), np.int8),
            react_stance=np.zeros(m, np.float32),
            react_toxicity=np.full(m, self.tox, np.float32),
        )


#: Eq. 9 engagement weight e(reaction) of each scripted reaction (RewardConfig defaults).
ENGAGEMENT = {
    Behaviour.REPLY: 1.0,
    Behaviour.LIKE: 0.6,
    Behaviour.RETWEET: 0.8,
    Behaviour.DISLIKE: 0.0,
}


def _eq9(
    kind: Behaviour | None,
    tox: float,
    d_author: int,
    d_receiver: int,
    shown: bool,
    needs_reaction: bool = True,
) -> float:
    """Eq. 9 of RewardConfig by hand: w_s = 1, w_e = 0.1, w_t = 0.5, hostile_toxicity = 0.5."""
    reacted = shown and kind is not None
    hostile = reacted and (kind == Behaviour.DISLIKE or (kind == Behaviour.REPLY and tox >= 0.5))
    civil = reacted and not hostile
    divergence = abs(d_author - d_receiver) / 2
    if needs_reaction:
        divergence *= civil
    engagement = ENGAGEMENT[kind] * civil if reacted else 0.0
    return float(
        np.clip(1.0 * divergence + 0.1 * engagement - 0.5 * (tox if reacted else 0.0), 0, 1)
    )


@pytest.mark.parametrize(
    ("kind", "tox", "needs_reaction"),
    [
        (Behaviour.REPLY, 0.4, True),
        (Behaviour.REPLY, 0.7, True),
        (Behaviour.LIKE, 0.0, True),
        (Behaviour.RETWEET, 0.0, True),
        (Behaviour.DISLIKE, 0.0, True),
        (None, 0.0, True),
        (None, 0.0, False),
        (Behaviour.DISLIKE, 0.0, False),
    ],
)
def test_cross_viewpoint_reward_is_eq9(
    kind: Behaviour | None, tox: float, needs_reaction: bool
) -> None:
    env = RecEnv(
        num_users=150,
        users=ScriptedBrain(kind, tox),
        candidate_users=30,
        budget=1,
        reward={"divergence_needs_reaction": needs_reaction, "form": "paper"},
    )
    obs, _ = env.reset(seed=0)
    discrete = env.sim.users.discrete_stance.copy()
    allowed = np.flatnonzero(obs["action_mask"])
    receiver_of, post_of = env._arms["user"], env._arms["post"]
    gap = np.abs(discrete[env.sim.posts.author[post_of[allowed]]] - discrete[receiver_of[allowed]])
    # one arm per divergence 1, 0.5, 0 (|d_u - d_v| = 2, 1, 0), each of a different user
    slate = np.full(env.slate_size, env.no_op)
    picked: list[int] = []
    for g in (2, 1, 0):
        for arm in allowed[gap == g]:
            if all(receiver_of[arm] != receiver_of[other] for other in picked):
                picked.append(int(arm))
                break
    assert len(picked) == 3, "the candidates must hold cross-stance, neutral and same-stance pairs"
    slate[:3] = picked
    _, reward, _, _, info = env.step(slate)
    result = env._last_result
    expected = []
    for arm in picked:
        v, p = receiver_of[arm], post_of[arm]
        row = np.flatnonzero(result.active == v)[0]
        shown = bool(
            (
                (result.feed[row] == p) & (result.feed_channel[row] == int(FeedChannel.INJECTED))
            ).any()
        )
        expected.append(
            _eq9(
                kind,
                tox,
                int(discrete[env.sim.posts.author[p]]),
                int(discrete[v]),
                shown,
                needs_reaction,
            )
        )
    np.testing.assert_allclose(info["arm_rewards"][:3], expected, atol=1e-6)
    assert reward == pytest.approx(sum(expected) / env.slate_size, abs=1e-6)
    if kind == Behaviour.LIKE:  # the cross-stance pair earns divergence 1 (clipped with engagement)
        assert info["arm_rewards"][0] == pytest.approx(1.0)


class MisinformingBrain(ScriptedBrain):
    """No reactions; every receiver of a misinformation post in its feed becomes misinformed."""

    def __init__(self) -> None:
        super().__init__(None)

    def act(self, round_input: RoundInput) -> RoundOutput:
        feed = round_input.feed
        shown = feed >= 0
        misinfo = np.zeros(feed.shape, bool)
        misinfo[shown] = round_input.posts.misinfo[feed[shown]]
        users = round_input.active[misinfo.any(axis=1)]
        return RoundOutput(
            misinformed_user=users.astype(np.int64), misinformed_value=np.ones(len(users), bool)
        )


def _effect_rewards(env: ExposureEnv, w_v: float = 0.3) -> dict[int, float]:
    """Eq. 10 "effect" r_i by hand for every author with impressions in the last round."""
    result, posts = env._last_result, env.sim.posts
    newly = env.sim.users.misinformed & ~result.misinformed_before
    counts: dict[int, list[int]] = {}
    for u, p, removed in zip(
        result.impression_user, result.impression_post, result.impression_removed, strict=True
    ):
        c = counts.setdefault(
            int(posts.author[p]), [0, 0, 0, 0, 0]
        )  # n, rem@risk, del@risk, rem clean, harmed
        c[0] += 1
        at_risk = bool(posts.misinfo[p]) and not result.misinformed_before[u]
        c[1] += bool(removed and at_risk)
        c[2] += bool(not removed and at_risk)
        c[3] += bool(removed and not posts.misinfo[p])
        c[4] += bool(not removed and posts.misinfo[p] and newly[u])
    return {
        a: float(np.clip(0.5 + 0.5 * (c[1] - c[2] - w_v * c[3] - c[4]) / c[0], 0, 1))
        for a, c in counts.items()
    }


def test_exposure_step_reward_for_origin_is_the_harm_let_through() -> None:
    env = ExposureEnv(
        num_users=300, users=MisinformingBrain(), exposure_users=20, reward={"form": "paper"}
    )
    env.reset(seed=0)
    _, reward, _, _, info = env.step(np.full(env.slate_size, env.no_op))
    result = env._last_result
    assert not result.impression_removed.any() and info["metrics"]["governed_users"] == 0
    assert (env.sim.users.misinformed & ~result.misinformed_before).any(), (
        "misinformation must spread"
    )
    by_hand = _effect_rewards(env)
    assert reward == pytest.approx(np.mean(list(by_hand.values())))
    assert reward < 0.5 and not info["arm_applied"].any()


def test_exposure_effect_reward_rewards_removing_misinformation() -> None:
    def make() -> ExposureEnv:
        return ExposureEnv(
            num_users=300,
            users=ScriptedBrain(None),
            exposure_levels=(0.0, 1.0),
            exposure_users=40,
            classifier={"recall": 1.0, "false_positive_rate": 0.0},
            reward={"form": "paper"},
        )

    env = make()
    env.reset(seed=0)
    share = env.sim.recent_misinfo[env._arms["user"]]
    spreaders = np.flatnonzero(share >= 0.5)
    clean = np.flatnonzero(share == 0)
    mute_spreader = spreaders[env._arms["level"][spreaders] == 0.0][0]
    mute_clean = clean[env._arms["level"][clean] == 0.0][0]
    keep_clean = clean[env._arms["level"][clean] == 1.0][0]
    rewards, arm_rewards = {}, {}
    for name, arm in (
        ("mute_spreader", mute_spreader),
        ("mute_clean", mute_clean),
        ("keep_clean", keep_clean),
    ):
        fresh = make()
        fresh.reset(seed=0)
        slate = np.full(fresh.slate_size, fresh.no_op)
        slate[0] = arm
        _, reward, _, _, info = fresh.step(slate)
        rewards[name], arm_rewards[name] = reward, float(info["arm_rewards"][0])
        user = int(env._arms["user"][arm])
        assert fresh.sim.users.exposure[user] == (0.0 if name.startswith("mute") else 1.0)
        by_hand = _effect_rewards(fresh)
        # the arm earns its user's r_i; the step earns the mean r_i over every author seen
        assert arm_rewards[name] == pytest.approx(by_hand.get(user, 0.5), abs=1e-6)
        assert reward == pytest.approx(np.mean(list(by_hand.values())))
    assert arm_rewards["keep_clean"] == pytest.approx(
        0.5
    )  # clean and unfiltered: nothing to credit
    assert arm_rewards["mute_clean"] < 0.5  # lost visibility
    assert arm_rewards["mute_spreader"] > 0.5  # misinformation held back
    assert rewards["mute_spreader"] > rewards["keep_clean"] > rewards["mute_clean"]


class TwoReactionsBrain(ScriptedBrain):
    """Every user shown a post in its INJECTED slot likes it *and* dislikes it."""

    def act(self, round_input: RoundInput) -> RoundOutput:
        rows, cols = np.nonzero(round_input.feed_channel == FeedChannel.INJECTED)
        posts = round_input.feed[rows, cols]
        keep = posts >= 0
        users = round_input.active[rows[keep]]
        m = int(keep.sum())
        return RoundOutput(
            react_user=np.concatenate([users, users]),
            react_post=np.concatenate([posts[keep]] * 2),
            react_kind=np.concatenate(
                [
                    np.full(m, int(Behaviour.LIKE), np.int8),
                    np.full(m, int(Behaviour.DISLIKE), np.int8),
                ]
            ),
            react_stance=np.zeros(2 * m, np.float32),
            react_toxicity=np.zeros(2 * m, np.float32),
        )


def test_a_hostile_reaction_voids_a_civil_one_on_the_same_arm() -> None:
    env = RecEnv(
        num_users=150,
        users=TwoReactionsBrain(None),
        candidate_users=30,
        budget=1,
        reward={"form": "paper"},
    )
    obs, _ = env.reset(seed=0)
    discrete = env.sim.users.discrete_stance
    allowed = np.flatnonzero(obs["action_mask"])
    cross = allowed[
        discrete[env.sim.posts.author[env._arms["post"][allowed]]]
        * discrete[env._arms["user"][allowed]]
        == -1
    ]
    slate = np.full(env.slate_size, env.no_op)
    slate[0] = cross[0]
    _, reward, _, _, info = env.step(slate)
    assert info["arm_applied"][0]
    assert info["arm_rewards"][0] == 0.0, "a like and a dislike of one arm earn no divergence"
