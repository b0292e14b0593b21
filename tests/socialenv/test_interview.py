"""Interviews and surveys change nothing: the same trajectory with and without them, for
surrogate users and for LLM users (the tiny test model); answers reflect the user's state."""

from __future__ import annotations

import pickle
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import socialenv  # noqa: F401
from socialenv.core.world import STANCE_LABELS, discretize_stance, stance_label
from socialenv.envs.interview import MEASURES
from tests.support import assert_same, small_env

SMALL = small_env(num_users=200, rounds=4)


def _trajectory(env, seed: int, ask: bool, questions=("What do you think of the news?",)) -> list:
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=seed)
    out = [obs["arms"].copy()]
    for _ in range(env.unwrapped.config.rounds):
        if ask:
            env.unwrapped.interview([0, 5, 7], questions[0])
            env.unwrapped.survey(
                [{"id": "s", "text": "Support?", "scale": 5, "measure": "stance"}],
                sample=10,
                as_frame=False,
            )
        action = rng.integers(0, env.unwrapped.num_arms, env.action_space.shape)
        obs, reward, _, _, info = env.step(action)
        out.append((obs["arms"].copy(), reward, info["metrics"], info["arm_rewards"].copy()))
    return out


def test_surrogate_interviews_change_nothing() -> None:
    env_id = "PolicySim-Exposure-v0"
    assert_same(
        _trajectory(gym.make(env_id, **SMALL), 3, ask=False),
        _trajectory(gym.make(env_id, **SMALL), 3, ask=True),
    )


def test_surrogate_answers_come_from_state() -> None:
    env = gym.make("PolicySim-Exposure-v0", **SMALL)
    env.reset(seed=1)
    env.step(np.full(env.unwrapped.slate_size, env.unwrapped.no_op))
    sim = env.unwrapped.sim
    result = env.unwrapped._last_result
    user = int(result.active[0])
    before = pickle.dumps(sim.state_dict())
    (answer,) = env.unwrapped.interview([user], "Do you support it?", scale=5, measure="stance")
    assert pickle.dumps(sim.state_dict()) == before
    assert answer["source"] == "state" and answer["stance"] == pytest.approx(
        float(sim.users.stance[user])
    )
    assert answer["misinformed"] == bool(sim.users.misinformed[user])
    row = np.searchsorted(result.active, user)
    assert answer["seen_posts"] == int((result.feed[row] >= 0).sum())
    assert answer["seen_misinformation"] == int(
        sim.posts.misinfo[result.feed[row][result.feed[row] >= 0]].sum()
    )
    assert answer["value"] == int(np.clip(1 + round((sim.users.stance[user] + 1) / 2 * 4), 1, 5))
    assert answer["stance_label"] in answer["answer"]


def test_survey_table() -> None:
    env = gym.make("PolicySim-Exposure-v0", **SMALL)
    env.reset(seed=0)
    env.step(np.full(env.unwrapped.slate_size, env.unwrapped.no_op))
    table = env.unwrapped.survey(
        [
            "How was your feed?",
            {"id": "belief", "text": "Is the claim true?", "scale": 2, "measure": "misinformed"},
        ],
        sample=30,
        seed=4,
    )
    assert len(table) == 60 and set(table["question_id"]) == {"q0", "belief"}
    assert set(table["question"]) == {"How was your feed?", "Is the claim true?"}
    belief = table[table["question_id"] == "belief"]
    np.testing.assert_array_equal(belief["value"].to_numpy(), np.where(belief["misinformed"], 2, 1))
    assert table["user"].nunique() == 30


def test_surrogate_answers_depend_on_the_declared_measure() -> None:
    env = gym.make("PolicySim-Exposure-v0", **SMALL)
    env.reset(seed=2)
    for _ in range(2):
        env.step(np.full(env.unwrapped.slate_size, env.unwrapped.no_op))
    sim = env.unwrapped.sim
    users = np.arange(0, 200, 7)
    answers = {m: env.unwrapped.interview(users, "Tell us.", scale=7, measure=m) for m in MEASURES}
    texts = {m: [a["answer"] for a in rows] for m, rows in answers.items()}
    assert len({tuple(t) for t in texts.values()}) == len(MEASURES)  # each measure its own answer
    trust = np.array([a["value"] for a in answers["trust"]])
    np.testing.assert_array_equal(
        trust, np.clip(1 + np.round(sim.users.susceptibility[users] * 6), 1, 7)
    )
    toxicity = np.array([a["value"] for a in answers["toxicity"]])
    np.testing.assert_array_equal(
        toxicity, np.clip(1 + np.round(sim.recent_toxicity[users] * 6), 1, 7)
    )
    for row in answers["stance"]:
        assert (
            row["stance_label"] == stance_label(row["stance"])
            and row["stance_label"] in row["answer"]
        )
    assert all("trust" in t for t in texts["trust"]) and all(
        "hostile" in t or "civil" in t for t in texts["toxicity"]
    )
    with pytest.raises(ValueError, match="did you mean 'trust'"):
        env.unwrapped.interview([1], "q", scale=5, measure="trusst")


def test_stance_labels_follow_the_metrics_cut() -> None:
    values = np.array([-0.9, -1 / 3, -0.3, 0.0, 0.34, 0.8])
    assert [stance_label(v) for v in values] == [
        STANCE_LABELS[int(d)] for d in discretize_stance(values)
    ]
    assert [stance_label(v) for v in (-0.9, 0.0, 0.8)] == ["against", "undecided", "in favour"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda e: e.interview([], "q"), "user_ids"),
        (lambda e: e.interview([10_000], "q"), "outside"),
        (lambda e: e.interview([1], ""), "question"),
        (lambda e: e.interview([1], "q", scale=1), "scale"),
        (lambda e: e.interview([1], "q", measure="mood"), "measure"),
        (lambda e: e.survey(["q"], sample=0), "sample"),
        (lambda e: e.survey([{"txt": "q"}]), r"questions\[0\]"),
    ],
)
def test_bad_interview_input(call, message: str) -> None:
    env = gym.make("PolicySim-Exposure-v0", **SMALL)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=message):
        call(env.unwrapped)


def test_llm_interviews_one_batched_call_and_change_nothing(tiny_lm_path: Path) -> None:
    from agent_models.llm.backends import make_backend

    llm = {
        "backend": "hf",
        "model": str(tiny_lm_path),
        "cpu_threads": 1,
        "max_new_tokens": 320,
        "max_text_chars": 40,
        "max_actions": 3,
        "summary_max_new_tokens": 64,
        "memory": {"summary_chars": 40, "memory_chars": 40},
        "batch_size": 32,
    }
    backend = make_backend(llm)
    calls = []
    generate = backend.generate

    def counting(prompts, schemas=None, sampling=None):
        calls.append(len(prompts))
        return generate(prompts, schemas, sampling)

    backend.generate = counting
    kwargs = {
        "users": "llm",
        "num_users": 12,
        "rounds": 2,
        "budget": 2,
        "candidate_users": 4,
        "candidates": {"interest": 1, "opposite": 1, "fresh": 1},
    }

    def make():
        from agent_models.llm.brain import LLMBrain

        return gym.make("PolicySim-Rec-v0", **{**kwargs, "users": LLMBrain(llm, backend=backend)})

    plain = _trajectory(make(), 0, ask=False)
    n_plain = len(calls)
    env = make()
    asked = _trajectory(env, 0, ask=True)
    assert_same(plain, asked)
    interview_calls = len(calls) - 2 * n_plain
    assert interview_calls == 2 * 2  # per round: one interview + one survey
    answers = env.unwrapped.interview([1, 2, 3], "How do you feel today?")
    assert calls[-1] == 3  # one batched call for the three users
    assert all(a["source"] == "llm" and a["prompt_tokens"] > 0 for a in answers)
    assert all(isinstance(a["answer"], str) for a in answers)
    again = env.unwrapped.interview([1, 2, 3], "How do you feel today?")
    assert [a["answer"] for a in again] == [a["answer"] for a in answers]  # greedy: repeatable
    torch = pytest.importorskip("torch")
    state = torch.random.get_rng_state()
    env.unwrapped.interview([4], "Anything else?", temperature=1.0)
    assert torch.equal(state, torch.random.get_rng_state())
    backend.close()
