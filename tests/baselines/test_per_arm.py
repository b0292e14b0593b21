"""The score action with the real SB3, and the per-arm SB3 policy (baselines.per_arm)."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest

import socialenv  # noqa: F401 - registers the env ids
from tests.support import EXPOSURE, LEVER_ENV_IDS, REC, small_env

TINY = {
    REC: small_env(num_users=120, candidate_users=8),
    EXPOSURE: small_env(num_users=120, exposure_users=12),
}
ENV_IDS = LEVER_ENV_IDS


# ----------------------------------------------------------------------------- score action
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_score_action_passes_the_sb3_checker(env_id: str) -> None:
    from stable_baselines3.common.env_checker import check_env

    env = gym.make(env_id, action_format="scores", **TINY[env_id])
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (env.unwrapped.num_arms,), np.float32)
    check_env(env.unwrapped, warn=False)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_scores_apply_each_users_best_allowed_arms(env_id: str) -> None:
    env = gym.make(env_id, action_format="scores", **TINY[env_id])
    base = env.unwrapped
    obs, _ = env.reset(seed=3)
    mask = obs["action_mask"].astype(bool)
    mask[[1, 5]] = False  # pretend two arms are masked: they must never be picked
    base._arms["mask"] = mask
    scores = np.random.default_rng(0).uniform(-1, 1, base.num_arms).astype(np.float32)
    scores[1] = scores[5] = 1.0
    slate = base.slate_from_scores(scores)
    groups = base.arm_groups()
    expected = []
    for user in range(groups.max() + 1):
        arms = np.flatnonzero((groups == user) & mask)
        expected.extend(arms[np.argsort(-scores[arms], kind="stable")][: base.per_user])
    assert sorted(slate[slate != base.no_op]) == sorted(expected)
    assert not np.isin([1, 5], slate).any()
    _, _, _, _, info = env.step(scores)
    assert np.array_equal(info["arm_indices"], slate)
    assert info["invalid_arms"] == 0 and info["over_user_cap"] == 0 and info["duplicate_arms"] == 0


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_score_and_slate_forms_give_the_same_trajectory(env_id: str) -> None:
    scored = gym.make(env_id, action_format="scores", **TINY[env_id])
    slated = gym.make(env_id, **TINY[env_id])
    scored.reset(seed=11)
    slated.reset(seed=11)
    rng = np.random.default_rng(1)
    for _ in range(TINY[env_id]["rounds"]):
        scores = rng.uniform(-1, 1, scored.unwrapped.num_arms).astype(np.float32)
        slate = scored.unwrapped.slate_from_scores(scores)
        obs_a, reward_a, *_ = scored.step(scores)
        obs_b, reward_b, *_ = slated.step(slate)
        assert reward_a == reward_b
        np.testing.assert_array_equal(obs_a["arms"], obs_b["arms"])


def test_score_action_rejects_bad_scores() -> None:
    env = gym.make("PolicySim-Rec-v0", action_format="scores", **TINY["PolicySim-Rec-v0"])
    env.reset(seed=0)
    with pytest.raises(ValueError, match="one score per arm"):
        env.step(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="finite"):
        env.step(np.full(env.unwrapped.num_arms, np.nan, np.float32))


def test_sb3_ppo_trains_on_the_score_action() -> None:
    import torch
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    env = gym.make("PolicySim-Rec-v0", action_format="scores", **TINY["PolicySim-Rec-v0"])
    model = PPO(
        "MultiInputPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu"
    )
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=64)
    assert any(
        not torch.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True)
    )
    obs, _ = env.reset(seed=5)
    action, _ = model.predict(obs, deterministic=True)
    _, reward, *_ = env.step(action)
    assert np.isfinite(reward)


# ----------------------------------------------------------------------------- per-arm policy
def _model(env_id: str, **ppo: object):
    from stable_baselines3 import PPO

    from baselines.per_arm import PerArmPolicy, make_per_user_env

    env = make_per_user_env(env_id, TINY[env_id])
    return env, PPO(
        PerArmPolicy, env, seed=0, device="cpu", **{"n_steps": 32, "batch_size": 32, **ppo}
    )


def _tensor_obs(model, obs: dict[str, np.ndarray]):
    tensor, _ = model.policy.obs_to_tensor(obs)
    return tensor


def test_per_user_choice_maps_choices_to_global_arms() -> None:
    from baselines.per_arm import choices_to_slate

    # 2 users × 3 candidates, 2 slots per user; no-op of the choice space is 3, of the env 6
    slate = choices_to_slate([2, 3, 0, 1], candidates=3, per_user=2, no_op=6)
    assert slate.tolist() == [2, 6, 3, 4]
    with pytest.raises(ValueError, match="choices must lie"):
        choices_to_slate([4, 0, 0, 0], candidates=3, per_user=2, no_op=6)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_per_arm_scores_are_permutation_equivariant(env_id: str) -> None:
    import torch

    env, model = _model(env_id)
    obs, _ = env.reset(seed=2)
    candidates = env.candidates
    user = 1
    perm = np.arange(env.unwrapped.num_arms)
    block = np.arange(user * candidates, (user + 1) * candidates)
    perm[block] = block[np.random.default_rng(0).permutation(candidates)]
    permuted = {"arms": obs["arms"][perm], "action_mask": obs["action_mask"][perm]}
    with torch.no_grad():
        logits = model.policy.arm_scores(_tensor_obs(model, obs))[0]
        logits_p = model.policy.arm_scores(_tensor_obs(model, permuted))[0]
        value = model.policy.predict_values(_tensor_obs(model, obs))
        value_p = model.policy.predict_values(_tensor_obs(model, permuted))
    local = perm[block] - user * candidates
    torch.testing.assert_close(logits_p[user, :candidates], logits[user, local])
    torch.testing.assert_close(logits_p[user, candidates], logits[user, candidates])  # no-op
    torch.testing.assert_close(logits_p[:user], logits[:user])
    torch.testing.assert_close(value_p, value)
    # a whole user block moved elsewhere: values are invariant to the order of users too
    order = np.concatenate(
        [
            np.arange(candidates, 2 * candidates),
            np.arange(candidates),
            np.arange(2 * candidates, env.unwrapped.num_arms),
        ]
    )
    swapped = {"arms": obs["arms"][order], "action_mask": obs["action_mask"][order]}
    with torch.no_grad():
        torch.testing.assert_close(model.policy.predict_values(_tensor_obs(model, swapped)), value)
        torch.testing.assert_close(
            model.policy.arm_scores(_tensor_obs(model, swapped))[0][0], logits[1]
        )


def test_per_arm_never_chooses_masked_or_repeated_arms() -> None:
    import torch

    env, model = _model("PolicySim-Rec-v0")
    obs, _ = env.reset(seed=4)
    candidates, per_user = env.candidates, env.per_user
    mask = obs["action_mask"].copy()
    rng = np.random.default_rng(0)
    mask[rng.choice(len(mask), size=len(mask) // 2, replace=False)] = 0
    mask[: candidates - 2] = 0  # user 0 has 2 allowed candidates for 5 slots
    obs = {"arms": obs["arms"], "action_mask": mask}
    with torch.no_grad():  # make the masked arms the most attractive ones
        model.policy.mlp_extractor.score.bias.fill_(5.0)
    tensor = _tensor_obs(model, {k: np.repeat(v[None], 200, axis=0) for k, v in obs.items()})
    with torch.no_grad():
        dist = model.policy.get_distribution(tensor)
        for deterministic in (False, True):
            choices = (
                dist.get_actions(deterministic=deterministic).numpy().reshape(200, -1, per_user)
            )
            for sample in choices:
                for user, picks in enumerate(sample):
                    chosen = picks[picks < candidates]
                    assert len(set(chosen)) == len(chosen), "a candidate chosen twice for one user"
                    assert mask[user * candidates + chosen].all(), "a masked arm was chosen"


def test_slate_distribution_sums_to_one() -> None:
    import torch

    from baselines.per_arm import SlateDistribution

    candidates, per_user = 3, 2
    dist = SlateDistribution(users=1, candidates=candidates, per_user=per_user)
    logits = torch.tensor([[0.3, -1.0, 2.0, 0.5]])
    logits[0, 1] = -1e8  # a masked candidate
    dist.proba_distribution(logits)
    total = 0.0
    for slate in itertools.product(range(candidates + 1), repeat=per_user):
        picked = [c for c in slate if c < candidates]
        if len(set(picked)) < len(picked) or 1 in picked:
            continue
        total += float(dist.log_prob(torch.tensor([slate])).exp())
    assert total == pytest.approx(1.0, abs=1e-6)


def test_per_arm_ppo_trains_and_plays(tmp_path) -> None:
    import torch

    from baselines.per_arm import PerArmActor, train_per_arm_ppo
    from socialenv.envs.episodes import play_episode

    torch.set_num_threads(1)
    result = train_per_arm_ppo(
        "PolicySim-Rec-v0",
        TINY["PolicySim-Rec-v0"],
        total_timesteps=192,
        n_envs=2,
        ppo_kwargs={"n_steps": 32, "batch_size": 32},
    )
    assert result.model.num_timesteps >= 192 and len(result.curve) >= 2
    env = gym.make("PolicySim-Rec-v0", **TINY["PolicySim-Rec-v0"])
    rows = play_episode(env, PerArmActor(result.model, env), seed=9, learn=False)
    assert len(rows) == TINY["PolicySim-Rec-v0"]["rounds"]
    assert all(0.0 <= r["reward"] <= 1.0 for r in rows)
    from stable_baselines3 import PPO

    path = tmp_path / "model.zip"  # the policy round-trips through SB3's zip format
    result.model.save(path)
    loaded = PPO.load(path, device="cpu")
    obs, _ = env.reset(seed=9)
    np.testing.assert_array_equal(
        loaded.predict(obs, deterministic=True)[0], result.model.predict(obs, deterministic=True)[0]
    )
