"""The researcher's tools on one run: a moderation policy, an event chain from YAML, an event
injected mid-run, interviews and a survey (which change nothing), bursty activity.

    python examples/researcher_tools.py            # 1,000 users, 8 rounds
    python examples/researcher_tools.py --smoke    # 150 users, 4 rounds
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym

import socialenv  # noqa: F401 - registers the env ids
from baselines.suppress_flagged import SuppressFlagged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny size (tests)")
    args = parser.parse_args()
    users, rounds = (150, 4) if args.smoke else (1000, 8)

    env = gym.make(
        "PolicySim-Moderation-v0",
        num_users=users,
        rounds=rounds,
        activity="hawkes",
        events=str(Path(__file__).with_name("events.yaml")),
        moderation={"precision": 0.8, "recall": 0.7},
    )
    policy = SuppressFlagged(env, action="label")
    obs, _ = env.reset(seed=0)
    done = False
    while not done:
        if env.unwrapped.sim.round == 1:
            env.unwrapped.inject_event(
                {"kind": "news", "headline": "A celebrity repeats the claim.", "shift": 0.1}
            )
        obs, reward, terminated, truncated, info = env.step(policy.act(obs))
        m = info["metrics"]
        print(
            f"round {info['round']}: reward {reward:.4f}, misinformed {m['misinformation_ratio']:.1%}, "
            f"labels {m['actions_label']:.0f}, active {m['active_users']:.0f}, events {m['events_fired']:.0f}"
        )
        done = terminated or truncated
    for event in env.unwrapped.sim.events.log:
        print(
            f"event {event['name']} ({event['kind']}) fired at round {event['round']}: {event['cause']}"
        )
    for answer in env.unwrapped.interview([0, 1], "What do you make of the claim going around?"):
        print(f"user {answer['user']}: {answer['answer']}")
    table = env.unwrapped.survey(
        [{"id": "believes", "text": "Is the claim true?", "scale": 2, "measure": "misinformed"}],
        sample=50,
    )
    print(f"survey: {(table['value'] == 2).mean():.0%} of 50 sampled users say the claim is true")


if __name__ == "__main__":
    main()
