"""A per-arm policy for deep RL on the PolicySim envs: one shared network scores every arm
over its own context, so what it learns does not depend on where an arm sits in the
observation (arms are re-sampled every round).

The pieces:

- :class:`PerUserChoice`, a Gymnasium action wrapper. The policy chooses, for each sampled
  user, ``per_user`` of that user's C candidate arms (Rec: C posts, ``per_user = budget``;
  Exposure: C levels, ``per_user = 1``) or leaves a slot to the platform. Its action is
  ``MultiDiscrete([C + 1] * slate_size)``: slot j picks candidate c of user ``j // per_user``
  (global arm ``(j // per_user) * C + c``), and c = C is the no-op. This keeps every discrete
  choice small (C + 1 values) and meaningful, where the env's own slate
  (``MultiDiscrete([K + 1] * slate_size)``) asks each slot to pick among all K arms.
- :class:`PerArmExtractor` (SB3 features extractor): a shared MLP embeds each of the K arm
  contexts, (B, K, D) -> (B, K, H), and passes the action mask along.
- :class:`PerArmHeads` (the SB3 ``mlp_extractor``): actor logits = the shared per-arm score
  of each candidate plus a no-op logit per user (from the mean embedding of the user's
  arms), masked arms at -1e8; critic = an MLP over the masked mean of all arm embeddings.
  Scores are permutation-equivariant within a user, the value permutation-invariant.
- :class:`SlateDistribution`: each user's ``per_user`` slots choose *without replacement*
  among the user's allowed candidates (the no-op may repeat), so a user never gets the
  same post twice; the log-probability is the sum over slots of the conditional
  log-softmax. ``mode()`` is each user's top ``per_user`` candidates (stopping at the no-op).
- :class:`PerArmPolicy`: an SB3 ``ActorCriticPolicy`` built from these pieces, trained by
  plain ``stable_baselines3.PPO`` (masking happens inside the policy); :func:`train_per_arm_ppo`
  trains it and :class:`PerArmActor` plays the trained model in the env's own slate form.

    from baselines.per_arm import train_per_arm_ppo, PerArmActor
    size = {"num_users": 300, "candidate_users": 32}
    result = train_per_arm_ppo("PolicySim-Rec-v0", size, total_timesteps=20_000)
    env = gym.make("PolicySim-Rec-v0", **size)
    actor = PerArmActor(result.model, env)          # actor.act(obs) -> (slate_size,) slate

torch and stable-baselines3 are imported when the policy classes are first used.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from policysim_infra.extras import require

#: PPO settings of the per-arm benchmark (SB3 defaults except where noted): short rollouts
#: because an episode is only ``rounds`` (10) steps, a small discount because a slate mostly
#: pays off in the same round.
PER_ARM_PPO_KWARGS: dict[str, Any] = {
    "n_steps": 64,
    "batch_size": 64,
    "n_epochs": 4,
    "learning_rate": 3e-3,
    "gamma": 0.5,
    "gae_lambda": 0.9,
    "clip_range": 0.2,
    "ent_coef": 0.0,
    "target_kl": 0.05,
}
_MASKED = -1e8


# ----------------------------------------------------------------------------- action wrapper
class PerUserChoice(gym.ActionWrapper):
    """Per-user candidate choices -> the env's slate (see the module docstring).

    The wrapped env must use ``action_format="slate"``. Observation, reward and ``info``
    are the env's own; ``info["arm_indices"]`` holds the global slate actually sent.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        base = env.unwrapped
        if getattr(base.config, "action_format", "slate") != "slate":
            raise ValueError("PerUserChoice wraps a PolicySim env with action_format='slate'")
        self.candidates = int(base.num_arms // (base.slate_size // base.per_user))
        self.per_user = int(base.per_user)
        self.num_users = int(base.slate_size // base.per_user)
        self.no_op = int(base.no_op)
        self.action_space = spaces.MultiDiscrete(
            np.full(base.slate_size, self.candidates + 1, np.int64)
        )

    def action(self, action: Any) -> np.ndarray:
        return choices_to_slate(action, self.candidates, self.per_user, self.no_op)


def choices_to_slate(choices: Any, candidates: int, per_user: int, no_op: int) -> np.ndarray:
    """(slate_size,) per-user candidate choices (value ``candidates`` = no-op) -> (slate_size,)
    global arm indices (``no_op`` for empty slots)."""
    arr = np.asarray(choices, np.int64).reshape(-1)
    if arr.min(initial=0) < 0 or arr.max(initial=0) > candidates:
        raise ValueError(
            f"choices must lie in 0..{candidates} ({candidates} = no-op), got {arr.min()}..{arr.max()}"
        )
    user = np.arange(len(arr)) // per_user
    return np.where(arr < candidates, user * candidates + arr, no_op).astype(np.int64)


def _shapes(
    observation_space: spaces.Dict, action_space: spaces.MultiDiscrete
) -> tuple[int, int, int, int, int]:
    """(K arms, D context dim, U users, C candidates per user, P slots per user)."""
    num_arms, context_dim = observation_space["arms"].shape
    nvec = np.asarray(action_space.nvec)
    candidates = int(nvec[0]) - 1
    if not np.all(nvec == nvec[0]) or candidates < 1 or num_arms % candidates:
        raise ValueError(
            "the per-arm policy needs a PerUserChoice action space, MultiDiscrete([C + 1] * slate_size) "
            f"with K = users × C; got nvec {nvec[:4]}... for K={num_arms}"
        )
    users = num_arms // candidates
    if len(nvec) % users:
        raise ValueError(f"slate_size={len(nvec)} is not a multiple of the {users} sampled users")
    return num_arms, context_dim, users, candidates, len(nvec) // users


# ----------------------------------------------------------------------------- torch pieces
def _torch_classes() -> dict[str, type]:
    """Build the torch/SB3 classes on first use (keeps ``import baselines`` light)."""
    global _CLASSES
    if _CLASSES:
        return _CLASSES
    import torch as th

    require("stable_baselines3", "rl", "the per-arm PPO policy")
    from stable_baselines3.common.distributions import Distribution
    from stable_baselines3.common.policies import ActorCriticPolicy
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    def symlog(x: th.Tensor) -> th.Tensor:
        return th.sign(x) * th.log1p(th.abs(x))

    class PerArmExtractor(BaseFeaturesExtractor):
        """obs {"arms": (B, K, D), "action_mask": (B, K)} -> (B, K·(H + 1)): each arm's
        embedding by one shared MLP on symlog(context), then the mask."""

        def __init__(self, observation_space: spaces.Dict, hidden: int = 64) -> None:
            num_arms, context_dim = observation_space["arms"].shape
            super().__init__(observation_space, features_dim=num_arms * (hidden + 1))
            self.num_arms, self.hidden = num_arms, hidden
            self.encoder = nn.Sequential(
                nn.Linear(context_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
            )

        def forward(self, obs: dict[str, th.Tensor]) -> th.Tensor:
            arms = obs["arms"]
            mask = obs["action_mask"].reshape(arms.shape[0], self.num_arms, 1).float()
            embedding = self.encoder(symlog(arms)) * mask
            return th.cat([embedding, mask], dim=2).flatten(1)

    class PerArmHeads(nn.Module):
        """features (B, K·(H + 1)) -> actor logits (B, U·(C + 1)) and critic latent (B, V)."""

        def __init__(
            self, num_arms: int, hidden: int, users: int, candidates: int, value_hidden: int = 64
        ) -> None:
            super().__init__()
            self.num_arms, self.hidden = num_arms, hidden
            self.users, self.candidates = users, candidates
            self.score = nn.Linear(hidden, 1)
            self.no_op = nn.Linear(hidden, 1)
            self.value = nn.Sequential(nn.Linear(hidden, value_hidden), nn.Tanh())
            nn.init.normal_(self.score.weight, std=0.01)
            nn.init.zeros_(self.score.bias)
            nn.init.normal_(self.no_op.weight, std=0.01)
            nn.init.zeros_(self.no_op.bias)
            self.latent_dim_pi = users * (candidates + 1)
            self.latent_dim_vf = value_hidden

        def _split(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
            per_arm = features.reshape(-1, self.num_arms, self.hidden + 1)
            return per_arm[..., : self.hidden], per_arm[..., self.hidden]

        def forward_actor(self, features: th.Tensor) -> th.Tensor:
            embedding, mask = self._split(features)
            batch = embedding.shape[0]
            scores = self.score(embedding).squeeze(-1).masked_fill(mask < 0.5, _MASKED)
            per_user = embedding.reshape(batch, self.users, self.candidates, self.hidden)
            user_mask = mask.reshape(batch, self.users, self.candidates, 1)
            pooled = (per_user * user_mask).sum(2) / user_mask.sum(2).clamp(min=1.0)
            no_op = self.no_op(pooled)
            logits = th.cat([scores.reshape(batch, self.users, self.candidates), no_op], dim=2)
            return logits.flatten(1)

        def forward_critic(self, features: th.Tensor) -> th.Tensor:
            embedding, mask = self._split(features)
            pooled = (embedding * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(
                min=1.0
            )
            return self.value(pooled)

        def forward(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
            return self.forward_actor(features), self.forward_critic(features)

    class SlateDistribution(Distribution):
        """Each user's P slots choose without replacement among the user's C candidates;
        the no-op (index C) may repeat. Actions are (B, U·P) choices."""

        def __init__(self, users: int, candidates: int, per_user: int) -> None:
            super().__init__()
            self.users, self.candidates, self.per_user = users, candidates, per_user
            self.logits: th.Tensor | None = None

        def proba_distribution_net(self, *args: Any, **kwargs: Any) -> nn.Module:
            return nn.Identity()

        def proba_distribution(self, action_logits: th.Tensor) -> SlateDistribution:
            self.logits = action_logits.reshape(-1, self.users, self.candidates + 1)
            return self

        def _walk(
            self, actions: th.Tensor | None, deterministic: bool = False
        ) -> tuple[th.Tensor, th.Tensor]:
            """(choices (B, U, P), log-prob (B,)): given ``actions``, or drawn slot by slot."""
            logits = self.logits
            taken = th.zeros_like(logits, dtype=th.bool)
            picks, log_prob = [], th.zeros(logits.shape[0], device=logits.device)
            given = (
                None if actions is None else actions.long().reshape(-1, self.users, self.per_user)
            )
            for slot in range(self.per_user):
                log_p = th.log_softmax(logits.masked_fill(taken, _MASKED), dim=-1)
                if given is not None:
                    pick = given[..., slot]
                elif deterministic:
                    pick = log_p.argmax(-1)
                else:
                    pick = th.distributions.Categorical(logits=log_p).sample()
                log_prob = log_prob + log_p.gather(-1, pick.unsqueeze(-1)).squeeze(-1).sum(-1)
                taken = taken | (
                    nn.functional.one_hot(pick, self.candidates + 1).bool()
                    & (pick < self.candidates).unsqueeze(-1)
                )
                picks.append(pick)
            return th.stack(picks, dim=-1), log_prob

        def log_prob(self, actions: th.Tensor) -> th.Tensor:
            return self._walk(actions)[1]

        def entropy(self) -> th.Tensor:
            """Entropy of each user's first choice, summed over users (the joint entropy
            of the without-replacement slate has no closed form)."""
            log_p = th.log_softmax(self.logits, dim=-1)
            return -(log_p.exp() * log_p).sum(-1).sum(-1)

        def sample(self) -> th.Tensor:
            return self._walk(None)[0].flatten(1)

        def mode(self) -> th.Tensor:
            return self._walk(None, deterministic=True)[0].flatten(1)

        def actions_from_params(
            self, action_logits: th.Tensor, deterministic: bool = False
        ) -> th.Tensor:
            self.proba_distribution(action_logits)
            return self.get_actions(deterministic=deterministic)

        def log_prob_from_params(self, action_logits: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
            actions = self.actions_from_params(action_logits)
            return actions, self.log_prob(actions)

    class PerArmPolicy(ActorCriticPolicy):
        """SB3 actor-critic over a :class:`PerUserChoice` env: :class:`PerArmExtractor`
        + :class:`PerArmHeads` + :class:`SlateDistribution` (``policy_kwargs``: ``hidden``,
        the per-arm embedding width, default 64)."""

        def __init__(
            self,
            observation_space: spaces.Dict,
            action_space: spaces.MultiDiscrete,
            lr_schedule: Any,
            hidden: int = 64,
            **kwargs: Any,
        ) -> None:
            self._layout = _shapes(observation_space, action_space)
            self._hidden = hidden
            kwargs.setdefault("features_extractor_class", PerArmExtractor)
            kwargs.setdefault("features_extractor_kwargs", {"hidden": hidden})
            kwargs.setdefault("ortho_init", False)
            super().__init__(observation_space, action_space, lr_schedule, **kwargs)

        def _build_mlp_extractor(self) -> None:
            num_arms, _, users, candidates, _ = self._layout
            self.mlp_extractor = PerArmHeads(num_arms, self._hidden, users, candidates)

        def _build(self, lr_schedule: Any) -> None:
            _, _, users, candidates, per_user = self._layout
            self._build_mlp_extractor()
            self.action_dist = SlateDistribution(users, candidates, per_user)
            self.action_net = nn.Identity()
            self.value_net = nn.Linear(self.mlp_extractor.latent_dim_vf, 1)
            self.optimizer = self.optimizer_class(
                self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
            )

        def _get_constructor_parameters(self) -> dict[str, Any]:
            return {**super()._get_constructor_parameters(), "hidden": self._hidden}

        def _get_action_dist_from_latent(self, latent_pi: th.Tensor) -> SlateDistribution:
            return self.action_dist.proba_distribution(latent_pi)

        def arm_scores(self, obs: dict[str, th.Tensor]) -> th.Tensor:
            """(B, U, C + 1) logits: every candidate's score (masked at -1e8) and the no-op."""
            features = self.extract_features(obs, self.pi_features_extractor)
            return self.mlp_extractor.forward_actor(features).reshape(
                -1, self._layout[2], self._layout[3] + 1
            )

    _CLASSES.update(
        PerArmExtractor=PerArmExtractor,
        PerArmHeads=PerArmHeads,
        SlateDistribution=SlateDistribution,
        PerArmPolicy=PerArmPolicy,
    )
    return _CLASSES


_CLASSES: dict[str, type] = {}


def __getattr__(name: str) -> type:
    if name in ("PerArmExtractor", "PerArmHeads", "SlateDistribution", "PerArmPolicy"):
        return _torch_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------- training
@dataclass
class TrainResult:
    """A trained model and its learning curve.

    Attributes:
        model: the SB3 PPO model.
        curve: (env steps so far, mean step reward of the episode) for every finished
            training episode, in order.
        seconds: wall-clock training time.
    """

    model: Any
    curve: list[tuple[int, float]] = field(default_factory=list)
    seconds: float = 0.0


def make_per_user_env(env_id: str, env_kwargs: dict[str, Any] | None = None) -> gym.Env:
    """``gym.make(env_id, **env_kwargs)`` wrapped in :class:`PerUserChoice`."""
    import socialenv  # noqa: F401 - registers the env ids

    return PerUserChoice(gym.make(env_id, **{**(env_kwargs or {}), "action_format": "slate"}))


def train_per_arm_ppo(
    env_id: str = "PolicySim-Rec-v0",
    env_kwargs: dict[str, Any] | None = None,
    total_timesteps: int = 20_000,
    seed: int = 0,
    n_envs: int = 4,
    ppo_kwargs: dict[str, Any] | None = None,
    hidden: int = 64,
    callback: Any = None,
    verbose: int = 0,
    native_vector: bool = False,
    workers: int = 1,
) -> TrainResult:
    """Train ``stable_baselines3.PPO`` with :class:`PerArmPolicy` on ``env_id``.

    Args:
        env_id, env_kwargs: the env (``gym.make`` arguments; ``action_format`` is "slate").
        total_timesteps: env steps (= platform rounds) over all ``n_envs``.
        seed: seeds PPO and the training envs (env i from seed ``seed + i``; the episodes
            after the first draw their seeds from that stream, so keep evaluation seeds
            disjoint).
        n_envs: envs per rollout (one process).
        ppo_kwargs: overrides of :data:`PER_ARM_PPO_KWARGS`.
        hidden: per-arm embedding width.
        callback: an extra SB3 callback (e.g. periodic evaluation).
        native_vector: step the ``n_envs`` envs as the native vector env
            (:func:`baselines.sb3_vector.make_per_user_vec_env`, the same trajectories)
            instead of a ``DummyVecEnv`` of wrapped envs.
        workers: with ``native_vector``, the processes that step the envs (one per core to
            use; :mod:`socialenv.envs.vector_workers`); the trajectories do not depend on it.
    """
    if workers != 1 and not native_vector:
        raise ValueError(f"workers={workers!r} is not allowed without native_vector=True: 1")
    require("stable_baselines3", "rl", "train_per_arm_ppo")
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import CallbackList
    from stable_baselines3.common.monitor import Monitor

    from baselines.sb3 import _episode_curve_callback

    def factory() -> Any:
        def make() -> gym.Env:
            return Monitor(make_per_user_env(env_id, env_kwargs))

        return make

    envs = _per_user_vec_env(env_id, env_kwargs, n_envs, native_vector, factory, workers)
    envs.seed(seed)  # env i's first reset gets seed + i
    policy = _torch_classes()["PerArmPolicy"]
    model = PPO(
        policy,
        envs,
        seed=seed,
        verbose=verbose,
        device="cpu",
        policy_kwargs={"hidden": hidden},
        **{**PER_ARM_PPO_KWARGS, **(ppo_kwargs or {})},
    )
    curve: list[tuple[int, float]] = []
    callbacks = [_episode_curve_callback(curve)] + ([callback] if callback is not None else [])
    start = time.perf_counter()
    model.learn(total_timesteps=total_timesteps, callback=CallbackList(callbacks))
    seconds = time.perf_counter() - start
    envs.close()
    return TrainResult(model=model, curve=curve, seconds=seconds)


def _per_user_vec_env(
    env_id: str,
    env_kwargs: dict[str, Any] | None,
    n_envs: int,
    native_vector: bool,
    factory: Any,
    workers: int = 1,
) -> Any:
    """The training envs: a ``VecMonitor`` on the native vector env, or a ``DummyVecEnv`` of
    ``Monitor``-wrapped envs."""
    from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

    if native_vector:
        return VecMonitor(make_per_user_vec_env(env_id, n_envs, env_kwargs, workers))
    return DummyVecEnv([factory() for _ in range(n_envs)])


def make_per_user_vec_env(
    env_id: str, num_envs: int, env_kwargs: dict[str, Any] | None = None, workers: int = 1
) -> Any:
    """An SB3 ``VecEnv`` of ``num_envs`` sub-envs of ``env_id`` on the native vector env
    (:func:`baselines.sb3_vector.make_sb3_vec_env`, its sub-envs on ``workers`` processes)
    with :class:`PerUserChoice`'s action: per-user candidate choices, mapped to each sub-env's
    slate."""
    from functools import partial

    from baselines.sb3_vector import make_sb3_vec_env

    slate_kwargs = {**(env_kwargs or {}), "action_format": "slate"}
    envs = make_sb3_vec_env(env_id, num_envs, slate_kwargs, workers=workers)
    if envs.vector_env.envs:
        probe = PerUserChoice(envs.vector_env.envs[0])
    else:  # the sub-envs live in worker processes: the sizes come from an env never reset
        probe = PerUserChoice(gym.make(env_id, **slate_kwargs))
        probe.close()
    envs.action_space = probe.action_space
    envs.action_map = partial(
        choices_to_slate,
        candidates=probe.candidates,
        per_user=probe.per_user,
        no_op=probe.no_op,
    )
    return envs


class PerArmActor:
    """A trained per-arm model as an actor on the *unwrapped* env's slate action:
    ``act(obs) -> (slate_size,) int64`` global arm indices (for
    :func:`socialenv.envs.episodes.play_episode`)."""

    def __init__(self, model: Any, env: gym.Env, deterministic: bool = True) -> None:
        base = env.unwrapped
        self.model = model
        self.deterministic = deterministic
        self.per_user = int(base.per_user)
        self.candidates = int(base.num_arms // (base.slate_size // base.per_user))
        self.no_op = int(base.no_op)

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        choices, _ = self.model.predict(obs, deterministic=self.deterministic)
        return choices_to_slate(choices, self.candidates, self.per_user, self.no_op)
