"""A reset writes the new episode into the last episode's largest arrays where nothing else
holds them (PostTable.reusing, the memory embedding, the context table), and the episode is
the same as in a new env."""

from __future__ import annotations

import numpy as np
import pytest

from socialenv.core.world import _POST_ARRAYS, PostTable
from tests.support import bits


def _filled_table(rows: int = 40, capacity: int = 64) -> PostTable:
    table = PostTable(latent_dim=3, capacity=capacity)
    rng = np.random.default_rng(0)
    table.append(
        author=rng.integers(0, 9, rows),
        round_=2,
        kind=1,
        parent=-1,
        latent=rng.standard_normal((rows, 3)).astype(np.float32),
        stance=rng.uniform(-1, 1, rows).astype(np.float32),
        toxicity=rng.uniform(0, 1, rows).astype(np.float32),
        misinfo=rng.random(rows) < 0.5,
        cluster=rng.integers(0, 4, rows),
    )
    table.likes[:rows] = 3
    table.recommended[:rows] = True
    table.drop_before(10)  # rows past the size are zeroed, as after any compaction
    return table


def test_reusing_gives_a_zeroed_table_in_the_old_columns() -> None:
    old = _filled_table()
    latent_id, capacity = id(old.latent), len(old.latent)  # no reference kept here
    table = PostTable.reusing(old, 3, capacity=100)
    assert id(table.latent) == latent_id and len(table) == 0 and table.text is None
    fresh = PostTable(latent_dim=3, capacity=capacity)
    for name in _POST_ARRAYS:
        assert bits(getattr(table, name)) == bits(getattr(fresh, name)), name
        assert len(getattr(old, name)) == 0  # the old table no longer holds the columns
    assert len(old) == 0
    assert PostTable.reusing(_filled_table(), 3, capacity=16, with_text=True).text == []


@pytest.mark.parametrize("why", ["held", "view", "dim", "small", "none"])
def test_reusing_makes_a_new_table_when_the_old_columns_cannot_serve(why: str) -> None:
    old = _filled_table()
    before = old.latent.copy()
    held = old.likes if why == "held" else None
    view = old.view() if why == "view" else None
    dim, capacity = (4, 64) if why == "dim" else (3, 64)
    if why == "small":
        capacity = 2 * len(old.author) + 2
    table = PostTable.reusing(None if why == "none" else old, dim, capacity=capacity)
    assert table.latent is not old.latent
    assert table.latent.shape == (max(capacity, 16), dim) and not table.latent.any()
    assert bits(old.latent) == bits(before)  # left as it was
    del held, view


@pytest.mark.parametrize("local", [False, True])
def test_an_episode_after_a_reset_equals_one_in_a_new_env(monkeypatch, local: bool) -> None:
    """The second episode of an env (in the first one's arrays) and the first episode of a new
    env with the same seed: the same observations, rewards and world, bit for bit."""
    from socialenv.core import simulation
    from socialenv.envs.rec import RecEnv

    if local:  # the local propagation below 50,000 users
        monkeypatch.setattr(simulation, "LOCAL_PROPAGATION_USERS", 100)

    def episode(env: RecEnv, seed: int, kept: tuple[int, ...] = ()) -> list[bytes]:
        obs, _ = env.reset(seed=seed)
        sim = env.unwrapped.sim
        if kept:  # the last episode's arrays, by id (a reference would keep them from reuse)
            assert (id(sim.posts.latent), id(sim.users.memory_latent)) == kept[:2]
        out = [bits(obs["arms"])]
        rng = np.random.default_rng(seed)
        for _ in range(3):
            obs, reward, *_ = env.step(rng.integers(0, env.num_arms + 1, env.slate_size))
            out += [bits(obs["arms"]), bits(np.asarray(reward))]
        sim = env.unwrapped.sim
        out += [bits(getattr(sim.posts, name)[: len(sim.posts)]) for name in _POST_ARRAYS]
        return out + [bits(sim.users.memory_latent), bits(sim.users.stance)]

    used = RecEnv(num_users=1000, rounds=6)
    episode(used, 5)
    sim = used.unwrapped.sim
    assert sim.users._context is not None  # both ways read the users' context table
    context = id(sim.users._context)
    second = episode(used, 6, kept=(id(sim.posts.latent), id(sim.users.memory_latent)))
    assert id(sim.users._context) == context  # the first episode's table serves the second
    assert second == episode(RecEnv(num_users=1000, rounds=6), 6)


_SCENARIO_ARRAYS = ("latent", "history_latent", "follow_src", "follow_dst")


def _scenario_bits(scenario) -> list[bytes]:
    return [bits(getattr(scenario, name)) for name in _SCENARIO_ARRAYS]


def test_a_reset_builds_the_scenario_in_the_last_ones_arrays_with_the_same_values() -> None:
    """From 40,000 users the scenario's largest arrays are kept (LARGE_BYTES): the second
    episode's scenario, users and episode are those of a new env with its seed, in the first
    one's memory; a caller who keeps the last scenario or users keeps them as they were."""
    from socialenv.envs.rec import RecEnv

    def run(env: RecEnv, seed: int) -> list[bytes]:
        obs, _ = env.reset(seed=seed)
        sim = env.unwrapped.sim
        out = [bits(obs["arms"]), *_scenario_bits(sim.scenario), bits(sim.users.memory_latent)]
        obs, reward, *_ = env.step(np.random.default_rng(seed).integers(0, 3, env.slate_size))
        return [*out, bits(obs["arms"]), bits(np.asarray(reward))]

    used = RecEnv(num_users=40_000, rounds=3)
    run(used, 1)
    memory = used.unwrapped.sim._scenario_memory
    kept = {role: id(arrays._arrays[0]) for role, arrays in memory._roles.items() if arrays._arrays}
    assert set(_SCENARIO_ARRAYS) <= set(kept)
    second = run(used, 2)
    again = {role: id(memory._roles[role]._arrays[0]) for role in kept}
    assert again == kept and memory.reused == len(kept)
    assert second == run(RecEnv(num_users=40_000, rounds=3), 2)

    # a caller holding the last scenario and users: new arrays, the held ones unchanged
    sim = used.unwrapped.sim
    held_scenario, held_users = sim.scenario, sim.users
    before = [*_scenario_bits(held_scenario), bits(held_users.memory_latent)]
    third = run(used, 3)
    assert [*_scenario_bits(held_scenario), bits(held_users.memory_latent)] == before
    assert used.unwrapped.sim.users.memory_latent is not held_users.memory_latent
    assert third == run(RecEnv(num_users=40_000, rounds=3), 3)
