"""``policysim play`` driven through a pseudo-terminal, the way a person uses it."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from tests.support import ROOT


def _spawn(*args: str):
    pexpect = pytest.importorskip("pexpect")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore", "COLUMNS": "200"}
    return pexpect.spawn(
        sys.executable,
        ["-m", "policysim.cli", "play", *args],
        env=env,
        encoding="utf-8",
        timeout=40,
        cwd=str(ROOT),
    )


def test_play_session_in_a_terminal() -> None:
    child = _spawn("--user", "3", "--num-users", "120", "--rounds", "3", "--seed", "1")
    child.expect(r"You control user 3 of 120")
    child.expect(r"=== Round 1 of 3 — you are user_3 ===")
    child.expect(r"Your feed:")
    child.expect(r"\[1\] user_\d+ ")
    child.expect("> ")
    child.sendline("dance 1")  # not a behaviour: told, asked again
    child.expect(r"Not understood: unknown command 'dance 1'")
    child.expect("> ")
    child.sendline("like 500")  # not a feed slot
    child.expect(r"slot '500' is not in your feed")
    child.expect("> ")
    child.sendline("like 1, retweet 1, follow 1")
    child.expect(r"Round done: (\d+) reaction\(s\) applied, (\d+) dropped")
    applied, dropped = int(child.match.group(1)), int(child.match.group(2))
    assert applied + dropped == 2  # like and retweet; follow is no reaction
    child.expect(r"=== Round 2 of 3")
    child.expect(
        r"What you remember:\s+- \(round 0\) you wrote a retweet of post #\d+"
        if dropped == 0
        else r"What you remember"
    )
    child.expect("> ")
    child.sendline("post")
    child.expect(r"posted: yes")
    child.expect(r"=== Round 3 of 3")
    child.expect("> ")
    child.sendline("quit")
    child.expect("Session ended.")
    child.expect(pexpect_eof())
    child.close()
    assert child.exitstatus == 0


def pexpect_eof():
    import pexpect

    return pexpect.EOF


def test_play_function_matches_the_pettingzoo_view() -> None:
    """The session's actions reach the simulation exactly as the view's encoded actions do."""
    import io

    import socialenv
    from policysim.play import play
    from socialenv.pettingzoo_env import encode_user_action

    lines = iter(["like 1, reply 2", "post", "pass"])
    out = io.StringIO()
    history = play(
        "PolicySim-Rec-v0", 5, seed=2, read=lambda _: next(lines), out=out, num_users=120, rounds=3
    )
    assert [h["posted"] for h in history] == [False, True, False]

    pz = socialenv.parallel_env(
        "PolicySim-Rec-v0", controlled_users=[5], platform_agent=False, num_users=120, rounds=3
    )
    pz.reset(seed=2)
    sim = pz.base.sim
    replay = []
    for cmd in (((0, "like"), (1, "reply")), (), ()):
        if not np.isin(5, sim.active):
            sim.active = np.sort(np.append(sim.active, 5))
            pz._observe()
        behaviours = np.zeros((pz.feed_slots, 6), bool)
        for slot, name in cmd:
            behaviours[
                slot, ("like", "dislike", "retweet", "reply", "follow", "unfollow").index(name)
            ] = True
        _, _, _, _, infos = pz.step(
            {"user_5": encode_user_action(behaviours, post=len(replay) == 1)}
        )
        replay.append(infos["user_5"])
    assert [{k: h[k] for k in ("reactions", "dropped_reactions", "posted")} for h in history] == [
        {k: r[k] for k in ("reactions", "dropped_reactions", "posted")} for r in replay
    ]
    assert "Episode over." in out.getvalue()


def test_play_numbers_the_posts_it_shows() -> None:
    """An empty feed slot is not shown, so the numbers a person types skip it."""
    from policysim.play import parse_command, shown_slots

    feed = np.array([11, -1, 12, 13, -1])
    assert shown_slots(feed).tolist() == [0, 2, 3]
    behaviours, post = parse_command("like 2, retweet 3", feed)
    assert not post and np.flatnonzero(behaviours.any(axis=1)).tolist() == [2, 3]
    with pytest.raises(ValueError, match="use a number from 1 to 3"):
        parse_command("like 4", feed)
    with pytest.raises(ValueError, match="did you mean 'like'"):
        parse_command("lke 1", feed)
