"""Each surrogate mechanism on its own: it moves opinions (or beliefs) the way its docstring
says, and its ``OFF`` config switches it off. One test per entry of ``MECHANISMS``."""

from __future__ import annotations

import sys
from dataclasses import fields
from types import SimpleNamespace

import numpy as np
import pytest

from agent_models.surrogate import SurrogateBrain, SurrogateConfig
from agent_models.surrogate_mechanisms import (
    MECHANISMS,
    Anchoring,
    Assimilation,
    Backfire,
    Contagion,
    ExposureAssimilation,
    Reacted,
    ReactionMechanism,
    Reinforcement,
    reaction_moves,
)
from agent_models.types import Behaviour

LIKE, DISLIKE, REPLY = int(Behaviour.LIKE), int(Behaviour.DISLIKE), int(Behaviour.REPLY)


def reacted(opinion, stance, kind, hostile=None) -> Reacted:
    kind = np.asarray(kind, np.int8)
    return Reacted(
        opinion=np.asarray(opinion, np.float32),
        stance=np.asarray(stance, np.float32),
        kind=kind,
        positive=(kind == LIKE) | (kind == int(Behaviour.RETWEET)),
        hostile=(kind == DISLIKE) if hostile is None else np.asarray(hostile, bool),
    )


def off(mechanism: type) -> object:
    return mechanism.from_config(SurrogateConfig(**mechanism.OFF))


def test_assimilation():
    # a like of a close post, a like of a post beyond the bound, a civil and a toxic reply
    r = reacted([0.0, 0.0, 0.2, 0.2], [0.4, 0.9, -0.2, -0.2], [LIKE, LIKE, REPLY, REPLY])
    r = Reacted(r.opinion, r.stance, r.kind, r.positive, np.array([False, False, False, True]))
    mechanism = Assimilation(rate=0.5, confidence_bound=0.3)
    assert mechanism.moves(r).tolist() == [True, False, True, False]
    np.testing.assert_allclose(mechanism.step(r), [0.2, 0.0, -0.2, 0.0], atol=1e-7)
    assert not off(Assimilation).step(r).any()


def test_backfire():
    # a dislike of a distant post moves away from it; a dislike of a close post and a like do not
    r = reacted([0.5, 0.5, 0.5], [-0.5, 0.4, -0.5], [DISLIKE, DISLIKE, LIKE])
    mechanism = Backfire(rate=0.5, gap=0.4)
    assert mechanism.moves(r).tolist() == [True, False, False]
    np.testing.assert_allclose(mechanism.step(r), [0.5, 0.0, 0.0], atol=1e-7)
    assert not off(Backfire).step(r).any()


def test_reinforcement():
    # an agreeing, clearly stanced post pushes toward the extreme; a weak or opposite one does not
    r = reacted([0.5, -0.5, 0.5, 0.5], [0.7, -0.6, 0.2, -0.1], [LIKE, LIKE, LIKE, LIKE])
    mechanism = Reinforcement(rate=0.2, confidence_bound=0.5)
    assert mechanism.moves(r).tolist() == [True, True, False, False]
    np.testing.assert_allclose(mechanism.step(r), [0.1, -0.1, 0.0, 0.0], atol=1e-7)
    assert not off(Reinforcement).step(r).any()


def test_reaction_moves_add_up_per_reaction():
    r = reacted([0.5, 0.5], [0.7, -0.5], [LIKE, DISLIKE])
    mechanisms = [
        Assimilation(rate=0.5, confidence_bound=0.3),
        Backfire(rate=0.5, gap=0.4),
        Reinforcement(rate=0.2, confidence_bound=0.3),
    ]
    moved, step = reaction_moves(mechanisms, r)
    assert moved.tolist() == [True, True]
    np.testing.assert_allclose(step, [0.5 * 0.2 + 0.2 * 0.5, -0.5 * -1.0], atol=1e-6)


def round_input(feed, stance, active, misinfo=None, misinformed=None, susceptibility=None):
    n = len(active)
    return SimpleNamespace(
        feed=np.asarray(feed, np.int64),
        active=np.asarray(active, np.int64),
        posts=SimpleNamespace(
            stance=np.asarray(stance, np.float32),
            misinfo=np.zeros(len(stance), bool) if misinfo is None else np.asarray(misinfo),
        ),
        users=SimpleNamespace(
            misinformed=np.zeros(n, bool) if misinformed is None else np.asarray(misinformed),
            susceptibility=np.ones(n) if susceptibility is None else np.asarray(susceptibility),
        ),
    )


def test_exposure_assimilation():
    # user 0 saw posts of mean stance 0.5, user 1 saw nothing
    inputs = round_input([[0, 1], [-1, -1]], [0.2, 0.8], [0, 1])
    opinion = np.array([0.0, 0.0])
    ExposureAssimilation(rate=0.5).apply(opinion, inputs, np.zeros(2))
    np.testing.assert_allclose(opinion, [0.25, 0.0], atol=1e-7)
    before = np.array([0.0, 0.0])
    off(ExposureAssimilation).apply(before, inputs, np.zeros(2))
    assert not before.any()


def test_anchoring():
    opinion = np.array([0.8, -0.4])
    Anchoring(rate=0.25).apply(opinion, round_input([], [], []), np.array([0.0, 0.0]))
    np.testing.assert_allclose(opinion, [0.6, -0.3])
    kept = np.array([0.8, -0.4])
    off(Anchoring).apply(kept, round_input([], [], []), np.zeros(2))
    np.testing.assert_array_equal(kept, [0.8, -0.4])


def test_contagion():
    # 200 users each saw 3 misinformation posts; 200 saw none; 200 believers
    n = 600
    feed = np.full((n, 3), -1)
    feed[:200] = [0, 1, 2]
    misinformed = np.zeros(n, bool)
    misinformed[400:] = True
    inputs = round_input(feed, [0.0, 0.0, 0.0], np.arange(n), [True, True, True], misinformed)
    mechanism = Contagion(threshold=1.2, steepness=2.0, adoption=1.0, recovery=0.5)
    who, belief = mechanism.spread(inputs, np.random.default_rng(0))
    adopted = who[belief]
    recovered = who[~belief]
    assert 150 < len(adopted) < 200 and adopted.max() < 200  # σ(3.6) ≈ 0.97: most who saw it
    assert 60 < len(recovered) < 140 and recovered.min() >= 400  # recovery 0.5 of believers
    who, belief = off(Contagion).spread(inputs, np.random.default_rng(0))
    assert not belief.any()  # no adoption; believers still recover


def test_every_mechanism_has_a_test_and_its_config_fields():
    names = {name for name in dir(sys.modules[__name__]) if name.startswith("test_")}
    config_fields = {f.name for f in fields(SurrogateConfig)}
    for mechanism in MECHANISMS:
        assert f"test_{mechanism.name}" in names, mechanism.name
        assert set(mechanism.FIELDS.values()) <= config_fields, mechanism.name
        assert set(mechanism.OFF) <= set(mechanism.FIELDS.values()), mechanism.name


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=lambda m: m.name)
def test_surrogate_composes_the_registry(mechanism):
    brain = SurrogateBrain(SurrogateConfig(**mechanism.OFF))
    built = {type(m): m for m in brain.mechanisms()}
    assert list(built) == list(MECHANISMS)
    assert built[mechanism] == off(mechanism)
    if issubclass(mechanism, ReactionMechanism):
        r = reacted([0.5, 0.5], [0.7, -0.5], [LIKE, DISLIKE])
        assert not built[mechanism].step(r).any()
