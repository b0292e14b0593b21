"""The opt-in Hawkes activity model: the default is unchanged, excitation raises activity
where notifications and news land, decays, is seeded and checkpointed."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import socialenv  # noqa: F401
from agent_models.types import Behaviour, NewsEvent, RoundOutput
from socialenv import load_env
from socialenv.mechanisms.activity import HawkesActivity, HawkesConfig
from tests.support import small_env

SMALL = small_env(num_users=300, rounds=6)


def _episode(env, seed: int, rounds: int) -> list[np.ndarray]:
    env.reset(seed=seed)
    out = []
    for _ in range(rounds):
        env.step(np.full(env.unwrapped.slate_size, env.unwrapped.no_op))
        out.append(env.unwrapped._last_result.active.copy())
    return out


def test_posim_constants_map_to_rounds() -> None:
    cfg = HawkesConfig()
    assert cfg.internal_jump == pytest.approx(0.03)
    assert cfg.internal_retention == pytest.approx(math.exp(-0.5))
    assert cfg.external_jump == pytest.approx(1.5)
    assert cfg.external_retention == pytest.approx(math.exp(-0.03))
    assert HawkesConfig(minutes_per_round=60).internal_retention == pytest.approx(math.exp(-3.0))


def test_intensity_update_is_exact() -> None:
    model = HawkesActivity(HawkesConfig(notify_kinds=("reply",)))
    p = np.array([0.2, 0.5, 0.9], np.float32)
    model.reset(p)
    np.testing.assert_array_equal(model.probability(p), p)  # no excitation: the default
    author = np.array([0, 1, 2, 1])
    out = RoundOutput(
        react_user=np.array([2, 0, 1, 1]),
        react_post=np.array([1, 1, 0, 3]),
        react_kind=np.array(
            [Behaviour.REPLY, Behaviour.REPLY, Behaviour.LIKE, Behaviour.REPLY], np.int8
        ),
        react_stance=np.zeros(4, np.float32),
        react_toxicity=np.zeros(4, np.float32),
    )
    model.observe(out, author, [NewsEvent(0, "n", 0.1)])
    np.testing.assert_allclose(
        model.internal, [0.0, 2 * 0.03, 0.0]
    )  # two replies to user 1; the like and the self-reply do not count
    assert model.external == pytest.approx(1.5)
    rate = -np.log1p(-p.astype(np.float64)) + model.internal + 1.5
    np.testing.assert_allclose(model.probability(p), np.minimum(-np.expm1(-rate), 0.99))
    model.observe(RoundOutput(), author, [])
    assert model.external == pytest.approx(1.5 * math.exp(-0.03))
    np.testing.assert_allclose(model.internal, [0.0, 0.06 * math.exp(-0.5), 0.0])


def test_default_unchanged_and_hawkes_switchable() -> None:
    default = _episode(gym.make("PolicySim-Rec-v0", **SMALL), 0, 4)
    bernoulli = _episode(gym.make("PolicySim-Rec-v0", activity="bernoulli", **SMALL), 0, 4)
    for a, b in zip(default, bernoulli, strict=True):
        np.testing.assert_array_equal(a, b)
    # the abortion scenario's news at round 0 excites everyone: more users act from round 1 on
    hawkes = _episode(gym.make("PolicySim-Rec-v0", activity="hawkes", **SMALL), 0, 4)
    np.testing.assert_array_equal(hawkes[0], default[0])
    assert all(len(h) > 1.3 * len(d) for h, d in zip(hawkes[1:], default[1:], strict=True))


def test_notifications_excite_the_notified_users() -> None:
    env = gym.make(
        "PolicySim-Exposure-v0",
        activity={"external_excitation": 0.0, "internal_excitation": 0.05},
        num_users=500,
        rounds=3,
    )
    env.reset(seed=2)
    _, _, _, _, info = env.step(np.full(env.unwrapped.slate_size, env.unwrapped.no_op))
    model = env.unwrapped.sim.activity_model
    assert info["metrics"]["activity_excitation_notifications"] == pytest.approx(
        model.internal.mean()
    )
    assert info["metrics"]["activity_excitation_news"] == 0.0
    out = env.unwrapped._last_result.output
    posts = env.unwrapped.sim.posts
    replied = np.unique(posts.author[out.react_post[out.react_kind == Behaviour.REPLY]])
    assert len(replied) and (model.internal[replied] > 0).any()
    quiet = np.setdiff1d(np.arange(500), posts.author[out.react_post])
    assert (model.internal[quiet] == 0).all()
    p = model.probability(env.unwrapped.sim.users.activity)
    assert (p[model.internal > 0] > env.unwrapped.sim.users.activity[model.internal > 0]).all()


def test_hawkes_seeded_and_resumes(tmp_path: Path) -> None:
    kwargs = {"activity": "hawkes", **SMALL}
    first = _episode(gym.make("PolicySim-Rec-v0", **kwargs), 3, 6)
    second = _episode(gym.make("PolicySim-Rec-v0", **kwargs), 3, 6)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    env = gym.make("PolicySim-Rec-v0", **kwargs)
    env.reset(seed=3)
    for _ in range(3):
        env.step(np.full(env.unwrapped.slate_size, env.unwrapped.no_op))
    resumed = load_env(env.unwrapped.save(tmp_path / "h.pkl"))
    for expected in first[3:]:
        resumed.step(np.full(resumed.unwrapped.slate_size, resumed.unwrapped.no_op))
        np.testing.assert_array_equal(resumed.unwrapped._last_result.active, expected)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("poisson", "activity"),
        ({"internal_decay": -1}, "activity.internal_decay"),
        ({"notify_kinds": ("shout",)}, "activity.notify_kinds"),
        ({"bogus": 1}, "activity"),
    ],
)
def test_bad_activity_config_names_the_field(spec, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        gym.make("PolicySim-Rec-v0", activity=spec, **SMALL)
