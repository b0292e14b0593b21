"""Scenario event chains: scheduled, triggered, chained, injected (gym env and PettingZoo
view), declared in YAML and scenario files, seeded and checkpointed."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import socialenv
from socialenv import load_env, make_scenario
from socialenv.mechanisms.events import load_events
from tests.support import small_env

SMALL = small_env(num_users=300, rounds=6)
FACT_CHECK = {
    "name": "fact_check",
    "kind": "fact_check",
    "recovery": 0.8,
    "when": {"metric": "misinformation_ratio", "above": 0.2},
    "then": [
        {
            "name": "follow_up",
            "kind": "news",
            "headline": "Officials repeat the correction.",
            "after": 2,
        }
    ],
}


def _noop(env) -> np.ndarray:
    return np.full(env.unwrapped.slate_size, env.unwrapped.no_op)


def _run(env, seed: int, rounds: int) -> list[dict[str, float]]:
    env.reset(seed=seed)
    return [env.step(_noop(env))[4]["metrics"] for _ in range(rounds)]


def test_trigger_fires_next_round_and_chains() -> None:
    env = gym.make("PolicySim-Exposure-v0", events=[FACT_CHECK], **SMALL)
    rows = _run(env, 0, 6)
    log = env.unwrapped.sim.events.log
    first = next(t for t, m in enumerate(rows) if m["misinformation_ratio"] > 0.2)
    assert [(e["name"], e["round"]) for e in log] == [
        ("fact_check", first + 1),
        ("follow_up", first + 3),
    ]
    assert log[0]["cause"].startswith("misinformation_ratio=")
    assert [m["events_fired"] for m in rows] == [
        float(t in (first + 1, first + 3)) for t in range(6)
    ]
    # the fact-check cut the misinformed share against the same run without it
    plain = _run(gym.make("PolicySim-Exposure-v0", **SMALL), 0, 6)
    assert rows[first + 1]["misinformation_ratio"] < 0.5 * plain[first + 1]["misinformation_ratio"]
    np.testing.assert_array_equal(
        [m["misinformation_ratio"] for m in rows[: first + 1]],
        [m["misinformation_ratio"] for m in plain[: first + 1]],
    )


def test_scheduled_news_reaches_the_brain() -> None:
    seen = []

    from agent_models.surrogate import SurrogateBrain

    class Spy(SurrogateBrain):
        def act(self, round_input):
            seen.append([e.headline for e in round_input.news])
            return super().act(round_input)

    event = {"kind": "news", "headline": "A court ruling lands.", "shift": 0.3, "round": 2}
    env = gym.make("PolicySim-Rec-v0", users=Spy(), events=[event], **SMALL)
    _run(env, 0, 4)
    assert "A court ruling lands." in seen[2] and all(
        "A court ruling lands." not in s for i, s in enumerate(seen) if i != 2
    )


def test_inject_event_mid_run_gym_and_pettingzoo() -> None:
    env = gym.make("PolicySim-Exposure-v0", **SMALL)
    env.reset(seed=1)
    env.step(_noop(env))
    before = env.unwrapped.sim.users.misinformed.sum()
    normalized = env.unwrapped.inject_event({"kind": "fact_check", "recovery": 1.0})
    assert normalized["round"] == 1
    _, _, _, _, info = env.step(_noop(env))
    assert info["metrics"]["events_fired"] == 1.0
    assert env.unwrapped.sim.users.misinformed.sum() < before
    assert env.unwrapped.sim.events.log[-1]["cause"] == "injected"
    with pytest.raises(ValueError, match="event.round"):
        env.unwrapped.inject_event({"kind": "news", "headline": "old", "round": 0})

    pz = socialenv.parallel_env("PolicySim-Exposure-v0", controlled_users=2, **SMALL)
    pz.reset(seed=1)
    pz.inject_event({"kind": "misinformation", "share": 0.5, "round": 1})
    _, _, _, _, infos = pz.step({})
    assert infos["platform"]["metrics"]["events_fired"] == 0.0
    _, _, _, _, infos = pz.step({})
    assert infos["platform"]["metrics"]["events_fired"] == 1.0


def test_events_are_seeded_and_checkpointed(tmp_path: Path) -> None:
    events = [FACT_CHECK, {"kind": "misinformation", "share": 0.1, "round": 1}]
    full = _run(gym.make("PolicySim-Exposure-v0", events=events, **SMALL), 4, 6)
    again = _run(gym.make("PolicySim-Exposure-v0", events=events, **SMALL), 4, 6)
    assert full == again
    env = gym.make("PolicySim-Exposure-v0", events=events, **SMALL)
    env.reset(seed=4)
    for _ in range(2):
        env.step(_noop(env))
    env.unwrapped.inject_event({"kind": "news", "headline": "Late news.", "round": 4})
    resumed = load_env(env.unwrapped.save(tmp_path / "e.pkl"))
    for _ in range(4):
        a = env.step(_noop(env))[4]["metrics"]
        b = resumed.step(_noop(resumed))[4]["metrics"]
        assert a == b
    assert resumed.unwrapped.sim.events.log == env.unwrapped.sim.events.log
    assert any(e["name"] == "news" and e["round"] == 4 for e in resumed.unwrapped.sim.events.log)


def test_yaml_and_scenario_files_declare_events(tmp_path: Path) -> None:
    path = tmp_path / "events.yaml"
    path.write_text(
        "events:\n"
        "  - name: outbreak\n    kind: misinformation\n    share: 0.2\n    round: 1\n"
        "    then:\n      - {kind: fact_check, recovery: 0.5, after: 1}\n"
    )
    events = load_events(path)
    assert events[0]["then"][0]["kind"] == "fact_check"
    env = gym.make("PolicySim-Exposure-v0", events=str(path), **SMALL)
    _run(env, 0, 4)
    assert [(e["name"], e["round"]) for e in env.unwrapped.sim.events.log] == [
        ("outbreak", 1),
        ("fact_check", 2),
    ]

    scenario = make_scenario("misinformation", 300, seed=0)
    scenario.events = events
    saved = scenario.save(tmp_path / "scen")
    loaded = socialenv.Scenario.load(saved)
    assert loaded.events == events
    env = gym.make("PolicySim-Exposure-v0", scenario=str(saved), rounds=4)
    _run(env, 0, 4)
    assert [e["name"] for e in env.unwrapped.sim.events.log] == ["outbreak", "fact_check"]


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"kind": "earthquake"}, "events[0].kind"),
        ({"kind": "news"}, "events[0].headline"),
        (
            {
                "kind": "news",
                "headline": "x",
                "round": 1,
                "when": {"metric": "toxicity", "above": 0.1},
            },
            "events[0]",
        ),
        ({"kind": "fact_check", "when": {"metric": "toxicity"}}, "events[0].when"),
        ({"kind": "fact_check", "recovery": 2.0}, "events[0].recovery"),
        (
            {"kind": "fact_check", "then": [{"kind": "news", "headline": "x", "round": 3}]},
            "events[0].then[0]",
        ),
    ],
)
def test_bad_events_name_the_field(event: dict, field: str) -> None:
    with pytest.raises(
        ValueError, match=field.replace(".", r"\.").replace("[", r"\[").replace("]", r"\]")
    ):
        gym.make("PolicySim-Exposure-v0", events=[event], **SMALL)


def test_unknown_trigger_metric_is_reported() -> None:
    """An unknown metric is refused when the env is built; an activity metric on an env
    without Hawkes activity when the trigger is first checked."""
    with pytest.raises(ValueError, match="when.metric='nope' is not allowed"):
        gym.make(
            "PolicySim-Exposure-v0",
            events=[{"kind": "fact_check", "when": {"metric": "nope", "above": 0}}],
            **SMALL,
        )
    env = gym.make(
        "PolicySim-Exposure-v0",
        **SMALL,
        events=[{"kind": "fact_check", "when": {"metric": "activity_excitation_news", "above": 0}}],
    )
    env.reset(seed=0)
    with pytest.raises(
        ValueError, match="when.metric='activity_excitation_news' is not a round metric"
    ):
        env.step(_noop(env))


# ---------------------------------------------------------------- event files as untrusted input (issue 21)
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (LAUGHS + "events: [{kind: news, headline: *i}]\n", r"aliases \(\*a\) are not allowed"),
        (
            "events:\n- &e {kind: news, headline: x, then: [*e]}\n",
            r"aliases \(\*e\) are not allowed",
        ),
        ("x: &x [*x]\nevents: []\n", r"aliases \(\*x\) are not allowed"),
        ("[" * 100_000 + "]" * 100_000, "nested more than 64 levels deep"),
        (
            "evnts:\n- {kind: news, headline: x, round: 1}\n",
            r"top-level keys \['evnts'\] are not allowed",
        ),
        (
            "- {kind: news, headline: [a, b], round: 1}\n",
            r"events\[0\].headline=\['a', 'b'\] is not allowed: a string",
        ),
        (
            "- {kind: news, headline: x, when: {metric: stance_mean, above: .nan}}\n",
            r"when.above=nan is not allowed: a finite number",
        ),
        (
            "- {kind: news, headline: x, when: {metric: stance_men, above: 0.1}}\n",
            r"when.metric='stance_men' is not allowed: one of the round metrics",
        ),
        ("- {kind: news, headline: x, round: 1\n", "not valid YAML"),
        ("- {kind: news, headline: x, 3: 1}\n", r"is not allowed: keys among"),
    ],
)
def test_a_hostile_or_malformed_yaml_events_file_is_a_clear_error(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "events.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"events file {path}: .*{why}"):
        load_events(path)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested more than 64 levels deep"),
        (
            b'{"events": [{"kind": "news", "headline": "x", "when": {"metric": "toxicity", "above": NaN}}]}',
            "not valid JSON",
        ),
        (
            '[{"kind": "news", "headline": "caf\u00e9", "round": 1}]'.encode("latin-1"),
            "not UTF-8 text",
        ),
        (
            b'[{"kind": "news", "headline": "x", "round": 1}]' + b" " * (1 << 20),
            "bytes is not allowed: at most",
        ),
    ],
)
def test_a_hostile_or_malformed_json_events_file_is_a_clear_error(
    tmp_path: Path, data: bytes, why: str
) -> None:
    path = tmp_path / "events.json"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=f"events file {path}: .*{why}"):
        load_events(path)


def test_brackets_inside_strings_do_not_count_as_nesting(tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    path.write_text(
        '{"events": [{"kind": "news", "headline": "[[[[{{{{\\"' + "[" * 200 + '", "round": 1}]}'
    )
    assert load_events(path)[0]["headline"].startswith('[[[[{{{{"')
