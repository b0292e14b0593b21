"""The PettingZoo ParallelEnv over a PolicySim gym env (see :mod:`socialenv.pettingzoo_env`).

One ``step`` is one platform round: the controlled users' actions go to the mixed-population
brain, the platform agent's slate (or ``platform_policy``'s) to the gym env.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from agent_models.factory import make_brain
from policysim_infra.validation import check
from socialenv.envs.episodes import learn_from_step, slate_for
from socialenv.envs.policy_registry import make_run_policy
from socialenv.pettingzoo_env.actions import decode_user_actions, user_action_space
from socialenv.pettingzoo_env.agents import (
    PLATFORM,
    controlled_user_ids,
    reaction_weights,
    user_agent,
    user_rewards,
)
from socialenv.pettingzoo_env.mixed_brain import ExternalActionBrain
from socialenv.pettingzoo_env.observations import (
    CachedFeeds,
    platform_observation,
    user_feeds,
    user_observation_space,
    user_observations,
)


class PolicySimParallelEnv(ParallelEnv):
    """PettingZoo ParallelEnv over a PolicySim gym env; see :mod:`socialenv.pettingzoo_env`.

    Args:
        env_id: "PolicySim-Rec-v0" or "PolicySim-Exposure-v0".
        controlled_users: how many users are agents (ids 0..n−1) or a sequence of user ids.
        platform_agent: include the "platform" agent.
        platform_policy: without a platform agent: a policy name (origin, a bandit, a
            baseline), a policy object (``select``/``update`` or ``act``), or None (origin).
        feed_slots: F, the feed slots observed per user (default: the recommender's channel
            sizes summed).
        user_reward_weights: reaction kind -> weight of the user's reward.
        reply_toxicity, post_toxicity: toxicity of the texts controlled users write.
        render_mode: None, "ansi" or "rgb_array" (the gym env's frames).
        max_cycles: PettingZoo's name for ``rounds`` (the rounds of an episode; agents are
            truncated after them); give one or the other, or both equal.
        **env_kwargs: the gym env's arguments (``num_users``, ``rounds``, ``users`` — a
            brain, "surrogate", "llm" or an ABM name —, ``scenario``, ...).
    """

    metadata = {
        "name": "policysim_parallel_v0",
        "render_modes": ["ansi", "rgb_array"],
        "is_parallelizable": True,
    }

    def __init__(
        self,
        env_id: str = "PolicySim-Rec-v0",
        controlled_users: int | Any = 10,
        platform_agent: bool = True,
        platform_policy: Any = None,
        feed_slots: int | None = None,
        user_reward_weights: dict[str, float] | None = None,
        reply_toxicity: float = 0.0,
        post_toxicity: float = 0.0,
        render_mode: str | None = None,
        max_cycles: int | None = None,
        **env_kwargs: Any,
    ) -> None:
        if max_cycles is not None:
            rounds = env_kwargs.setdefault("rounds", max_cycles)
            check(
                rounds == max_cycles,
                "max_cycles",
                f"PettingZoo's name for rounds: equal to rounds={rounds!r} when both are given",
                max_cycles,
            )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r} is not allowed: use one of {self.metadata['render_modes']} or None"
            )
        self.render_mode = render_mode
        users = env_kwargs.pop("users", "surrogate")
        inner = make_brain(users, llm=env_kwargs.get("llm"), surrogate=env_kwargs.get("surrogate"))
        self.brain = ExternalActionBrain(
            inner, reply_toxicity=reply_toxicity, post_toxicity=post_toxicity
        )
        self.env = gym.make(env_id, users=self.brain, render_mode=render_mode, **env_kwargs)
        base = self.base = self.env.unwrapped
        n = base._num_users()
        controlled = controlled_user_ids(controlled_users, n)
        self.controlled = controlled
        self.brain.set_controlled(controlled)
        self._feeds = CachedFeeds(base.sim.recommender)
        base.sim.recommender = self._feeds

        rec = base.config.recommender
        self.feed_slots = int(
            feed_slots
            if feed_slots is not None
            else rec.relational + rec.personalized + rec.headline
        )
        if self.feed_slots < 1:
            raise ValueError(f"feed_slots={self.feed_slots} is not allowed: an integer >= 1")
        self._kind_weight = reaction_weights(user_reward_weights)

        self.platform_agent = bool(platform_agent)
        if self.platform_agent and platform_policy is not None:
            raise ValueError(
                "platform_policy is used only without a platform agent (platform_agent=False)"
            )
        if base.config.action_format == "scores" and not self.platform_agent:
            raise ValueError(
                'action_format="scores" needs the platform agent (platform_agent=True): a score '
                "action has no empty slot, so platform_policy slates and no intervention cannot "
                'be expressed in it (use action_format="slate")'
            )
        self._platform_policy_spec = platform_policy
        self.platform_policy = self._make_platform_policy(platform_policy)

        self.possible_agents = ([PLATFORM] if self.platform_agent else []) + [
            user_agent(u) for u in controlled
        ]
        self.agents: list[str] = []
        d = base._latent_dim
        f = self.feed_slots
        self.observation_spaces: dict[str, spaces.Space] = {}
        self.action_spaces: dict[str, spaces.Space] = {}
        for u in controlled:
            self.observation_spaces[user_agent(u)] = user_observation_space(f, d)
            self.action_spaces[user_agent(u)] = user_action_space(f)
        if self.platform_agent:
            self.observation_spaces[PLATFORM] = spaces.Dict(
                platform_observation(base.observation_space.spaces)
            )
            self.action_spaces[PLATFORM] = base.action_space
        self.state_space = spaces.Box(-1.0, 1.0, (2 * n,), np.float32)
        self._position = np.full(n, -1, np.int64)
        self._position[controlled] = np.arange(len(controlled))
        self._gym_obs: dict[str, Any] | None = None
        self._user_feed = np.full((len(controlled), f), -1, np.int64)
        self._user_channel = np.zeros((len(controlled), f), np.int8)
        self._user_active = np.zeros(len(controlled), bool)
        self._acted = np.zeros(len(controlled), bool)
        self.last_info: dict[str, Any] = {}

    # ------------------------------------------------------------------ spaces
    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    # ------------------------------------------------------------------ helpers
    def _make_platform_policy(self, spec: Any) -> Any:
        if spec is None or not isinstance(spec, str):
            return spec
        return make_run_policy(spec, self.base, seed=0)

    def _observe_users(self) -> dict[str, dict[str, np.ndarray]]:
        seen = user_feeds(self.base, self.controlled, self._feeds, self.feed_slots)
        self._user_feed, self._user_channel, self._user_active = (
            seen.feed,
            seen.channel,
            seen.active,
        )
        return {
            user_agent(u): obs
            for u, obs in zip(
                self.controlled, user_observations(self.base, self.controlled, seen), strict=True
            )
        }

    def _observe(self) -> dict[str, Any]:
        obs: dict[str, Any] = self._observe_users()
        if self.platform_agent:
            obs = {PLATFORM: platform_observation(self._gym_obs), **obs}
        return obs

    # ------------------------------------------------------------------ PettingZoo API
    def reset(self, seed: int | None = None, options: dict | None = None):
        self._feeds.clear()
        if isinstance(self._platform_policy_spec, str):
            self.platform_policy = self._make_platform_policy(self._platform_policy_spec)
        del options  # PettingZoo's api_test passes arbitrary options; the env takes none
        self._gym_obs, info = self.env.reset(seed=seed)
        self.agents = list(self.possible_agents)
        obs = self._observe()
        infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}
        if self.platform_agent:
            infos[PLATFORM] = dict(info)
        self.last_info = dict(info)
        return obs, infos

    def step(self, actions: dict[str, Any]):
        if not self.agents:
            raise RuntimeError("the episode is over (all agents truncated): call reset()")
        unknown = set(actions) - set(self.possible_agents)
        if unknown:
            raise ValueError(
                f"actions for unknown agent(s) {sorted(unknown)}; agents: {self.agents}"
            )
        base = self.base
        no_slate = np.full(base.slate_size, base.no_op, np.int64)
        gym_obs = self._gym_obs
        if self.platform_agent:
            slate = actions.get(PLATFORM)
            if slate is None and base.config.action_format == "scores":
                raise ValueError(
                    'the "platform" agent must act every step with action_format="scores" '
                    "(one score per arm; a score action has no empty slot)"
                )
            slate = no_slate if slate is None else slate
        elif self.platform_policy is None:
            slate = no_slate
        else:
            slate = slate_for(self.platform_policy, gym_obs, self.env)
        self._acted = self._user_active.copy()
        self.brain.set_actions(
            decode_user_actions(actions, self.controlled, self._user_feed, self.feed_slots)
        )
        try:
            self._gym_obs, reward, terminated, truncated, info = self.env.step(slate)
        finally:
            self.brain.set_actions(None)
        if not self.platform_agent:
            learn_from_step(self.platform_policy, gym_obs["arms"], info, self.env)
        out = base._last_result.output
        user_reward = user_rewards(
            base.sim.posts.author[out.react_post],
            out.react_kind,
            self._position,
            self._kind_weight,
            len(self.controlled),
        )
        obs = self._observe()
        rewards: dict[str, float] = {
            user_agent(u): float(user_reward[i]) for i, u in enumerate(self.controlled)
        }
        infos: dict[str, dict[str, Any]] = {
            user_agent(u): {
                "active": bool(self._acted[i]),
                "reactions": int(self.brain.last_reactions[i]),
                "dropped_reactions": int(self.brain.last_dropped[i]),
                "posted": bool(self.brain.last_posted[i]),
            }
            for i, u in enumerate(self.controlled)
        }
        if self.platform_agent:
            rewards = {PLATFORM: float(reward), **rewards}
            infos = {PLATFORM: dict(info), **infos}
        self.last_info = dict(info)
        done = bool(terminated or truncated)
        terminations = dict.fromkeys(self.agents, bool(terminated))
        truncations = dict.fromkeys(self.agents, bool(truncated))
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def inject_event(self, event: dict[str, Any]) -> dict[str, Any]:
        """Add a scenario event mid-run (see :mod:`socialenv.mechanisms.events`); same as the gym env's."""
        return self.base.inject_event(event)

    def interview(self, user_ids: Any, question: str, **kwargs: Any) -> list[dict[str, Any]]:
        """Ask users a question without changing any state (see :mod:`socialenv.envs.interview`)."""
        return self.base.interview(user_ids, question, **kwargs)

    def state(self) -> np.ndarray:
        """Global state (2N,) float32: every user's smoothed stance, then latent opinion."""
        users = self.base.sim.users
        return np.concatenate([users.stance, users.opinion]).astype(np.float32)

    def render(self) -> str | None:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def parallel_env(env_id: str = "PolicySim-Rec-v0", **kwargs: Any) -> PolicySimParallelEnv:
    """Build the PettingZoo ParallelEnv (see :class:`PolicySimParallelEnv` for arguments)."""
    return PolicySimParallelEnv(env_id, **kwargs)
