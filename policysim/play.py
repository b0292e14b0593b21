"""``policysim play``: a person takes over one user in a terminal.

    policysim play --user 3 --num-users 200 --rounds 5
    policysim play --env PolicySim-Exposure-v0 --user 12 --policy suppress_flagged

Built on the PettingZoo view (:class:`socialenv.pettingzoo_env.PolicySimParallelEnv`) with
that one user controlled: every round the person sees the user's state, what the user
remembers (the LLM brain's retrieved memories, or the user's posts, retweets and replies of
the last two rounds on the surrogate path) and the user's feed, then types the user's actions; every other user
keeps the env's brain and the platform keeps its policy (none by default). The actions are
the view's (like, dislike, retweet, reply, follow, unfollow on a feed slot, post), encoded
with :func:`~socialenv.pettingzoo_env.encode_user_action` and validated by the view's
``step`` like any agent's. Commands, several per line separated by commas::

    like 2, reply 2, follow 2      act on feed slot 2 (behaviours: like dislike retweet reply follow unfollow)
    post                           write an original post
    pass  (or an empty line)       do nothing this round
    help                           show the commands
    quit                           end the session

With ``every_round`` (default) the user acts every round; otherwise only in the rounds the
activity model makes them active (the other rounds are shown and skipped).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from agent_models.types import FeedChannel, PostKind
from policysim_infra.validation import did_you_mean
from socialenv.core.world import stance_label

HELP = (
    "Commands (comma-separated): <behaviour> <slot> with behaviour in like, dislike, retweet, reply, follow, "
    "unfollow (slot = the number in the feed); post; pass (or empty line) = do nothing; help; quit."
)
_CHANNEL = {
    int(FeedChannel.RELATIONAL): "followee",
    int(FeedChannel.PERSONALIZED): "for you",
    int(FeedChannel.HEADLINE): "trending",
    int(FeedChannel.INJECTED): "recommended",
}
_KIND = {int(PostKind.POST): "post", int(PostKind.RETWEET): "retweet", int(PostKind.REPLY): "reply"}


class QuitSession(Exception):
    """The person typed ``quit``."""


def shown_slots(feed: np.ndarray) -> np.ndarray:
    """The feed slots that hold a post, in the order the screen numbers them 1, 2, ..."""
    return np.flatnonzero(np.asarray(feed) >= 0)


def parse_command(line: str, feed: np.ndarray) -> tuple[np.ndarray, bool]:
    """(F, 6) behaviours (``USER_BEHAVIOURS`` order) and the post flag from a command line
    whose numbers are the posts as the screen numbers them (:func:`shown_slots` of ``feed``,
    the (F,) post ids with -1 for an empty slot); ``ValueError`` with a message for the
    person on anything else."""
    from socialenv.pettingzoo_env import USER_BEHAVIOURS

    slots = shown_slots(feed)
    behaviours = np.zeros((len(feed), len(USER_BEHAVIOURS)), bool)
    post = False
    for part in [p.strip().lower() for p in line.split(",")]:
        if part in ("", "pass", "nothing"):
            continue
        if part == "quit":
            raise QuitSession
        if part == "post":
            post = True
            continue
        words = part.split()
        if len(words) != 2 or words[0] not in USER_BEHAVIOURS:
            hint = (
                did_you_mean(words[0], (*USER_BEHAVIOURS, "post", "pass", "help", "quit"))
                if words
                else ""
            )
            raise ValueError(f"unknown command {part!r}{hint}. {HELP}")
        if not len(slots):
            raise ValueError("your feed is empty: type post, pass or quit")
        if not words[1].isdigit() or not 1 <= int(words[1]) <= len(slots):
            raise ValueError(
                f"slot {words[1]!r} is not in your feed: use a number from 1 to {len(slots)}"
            )
        behaviours[slots[int(words[1]) - 1], USER_BEHAVIOURS.index(words[0])] = True
    return behaviours, post


def _memories(base: Any, user: int) -> list[str]:
    from socialenv.envs.interview import _llm_brain

    sim = base.sim
    brain = _llm_brain(sim.brain)
    if brain is not None and brain.memory is not None:
        cfg = brain.config.memory
        return brain.memory.retrieve(
            np.array([user]), None, sim.round, cfg.top_k, cfg.decay, cfg.long_term_decay
        )[0]
    posts = sim.posts
    lo, hi = sim.recent_post_range(2)
    mine = lo + np.flatnonzero(posts.author[lo:hi] == user)
    lines = []
    for p in mine[::-1][:5].tolist():  # newest first
        kind = _KIND[int(posts.kind[p])]
        what = f"you wrote a {kind}" + (
            f" of post #{int(posts.parent[p])}" if posts.parent[p] >= 0 else ""
        )
        lines.append(f"(round {int(posts.round[p])}) {what}: {_describe_post(base, p)}")
    return lines


def _describe_post(base: Any, p: int) -> str:
    sim = base.sim
    posts = sim.posts
    if posts.text is not None and posts.text[p]:
        return str(posts.text[p])
    stance = float(posts.stance[p])
    side = stance_label(stance)
    claim = " Repeats the circulating claim." if posts.misinfo[p] else ""
    tone = " Hostile tone." if posts.toxicity[p] >= 0.15 else ""
    return f"[{side}, stance {stance:+.2f}]{claim}{tone}"


def render_round(pz: Any, user: int, feed: np.ndarray, channel: np.ndarray, active: bool) -> str:
    """The screen of one round for the controlled ``user``."""
    base = pz.base
    sim = base.sim
    users, posts = sim.users, sim.posts
    names = users.profiles
    stance = float(users.stance[user])
    followers_indptr, _ = sim.graph.followers_csr()
    topic = sim.scenario.topic if sim.scenario else ""
    lines = [
        f"=== Round {sim.round + 1} of {base.config.rounds} — you are {names.name(user)} ===",
        *([f"Topic: {topic}"] if topic else []),
        f"Your stance: {stance_label(stance)} ({stance:+.2f}); followers: "
        f"{int(followers_indptr[user + 1] - followers_indptr[user])}; "
        f"{'you believe the circulating claim' if users.misinformed[user] else 'you do not believe the circulating claim'}.",
    ]
    news = [e.headline for e in (sim.scenario.news if sim.scenario else []) if e.round == sim.round]
    news += [
        e["headline"] for e in sim.events.pending if e["round"] == sim.round and e.get("headline")
    ]
    for headline in news:
        lines.append(f"NEWS: {headline}")
    memories = _memories(base, user)
    lines.append("What you remember:" if memories else "What you remember: nothing yet.")
    lines += [f"  - {m}" for m in memories]
    if not active:
        suspended = bool(sim.barred(sim.round)[user])
        lines.append(
            "You are suspended by the platform this round."
            if suspended
            else "You are not active this round."
        )
        return "\n".join(lines)
    lines.append("Your feed:")
    slots = shown_slots(feed)
    for number, slot in enumerate(slots.tolist(), start=1):
        p = int(feed[slot])
        engagement = f"{int(posts.likes[p])} likes, {int(posts.retweets[p])} retweets, {int(posts.replies[p])} replies"
        lines.append(
            f"  [{number}] {names.name(int(posts.author[p]))} ({_CHANNEL.get(int(channel[slot]), '?')}, "
            f"{_KIND[int(posts.kind[p])]} #{p}, {engagement}): {_describe_post(base, p)}"
        )
    if not len(slots):
        lines.append("  (empty)")
    return "\n".join(lines)


def play(
    env_id: str,
    user: int,
    seed: int = 0,
    every_round: bool = True,
    platform_policy: Any = None,
    read: Callable[[str], str] = input,
    out: TextIO = sys.stdout,
    **env_kwargs: Any,
) -> list[dict[str, Any]]:
    """Run a session; returns one dict per round played (the user's info and reward).

    Args:
        env_id: the gym env id.
        user: the user id the person controls.
        seed: the episode seed.
        every_round: make the user active every round (else only when the activity model does).
        platform_policy: the platform's policy (a name such as "linucb", or None = none).
        read: reads one line after showing a prompt (``input`` in a terminal).
        out: where the screens go.
        **env_kwargs: the env's arguments (``num_users``, ``rounds``, ``users``, ...).
    """
    from socialenv.pettingzoo_env import encode_user_action, parallel_env, user_agent

    pz = parallel_env(
        env_id,
        controlled_users=[int(user)],
        platform_agent=False,
        platform_policy=platform_policy,
        **env_kwargs,
    )
    agent = user_agent(user)
    pz.reset(seed=seed)
    sim = pz.base.sim
    history: list[dict[str, Any]] = []

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    say(f"You control user {user} of {len(sim.users.stance)}. {HELP}")
    try:
        while pz.agents:
            suspended = bool(sim.barred(sim.round)[user])
            if every_round and not suspended and not np.isin(user, sim.active):
                sim.active = np.sort(np.append(sim.active, user))
                pz._observe()  # rebuild the feed with the user active
            active = bool(pz._user_active[0])
            feed, channel = pz._user_feed[0], pz._user_channel[0]
            say(render_round(pz, user, feed, channel, active))
            actions: dict[str, Any] = {}
            if active:
                while True:
                    line = read("> ")
                    if line.strip().lower() == "help":
                        say(HELP)
                        continue
                    try:
                        behaviours, post = parse_command(line, feed)
                        actions[agent] = encode_user_action(behaviours, post)
                        break
                    except ValueError as err:
                        say(f"Not understood: {err}")
            _, rewards, _, _, infos = pz.step(actions)
            info = infos[agent]
            history.append({"round": int(sim.round) - 1, "reward": float(rewards[agent]), **info})
            say(
                f"Round done: {info['reactions']} reaction(s) applied, {info['dropped_reactions']} dropped "
                f"(post hidden by the platform), posted: {'yes' if info['posted'] else 'no'}; "
                f"reactions to your posts this round (reward): {rewards[agent]:+.1f}"
            )
    except (QuitSession, EOFError):
        say("Session ended.")
        pz.close()
        return history
    say("Episode over.")
    pz.close()
    return history
