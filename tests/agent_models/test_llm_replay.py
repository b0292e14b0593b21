"""The replay cache: a run recorded with one thread count replays bit for bit with another,
without loading a model; partial hits call the model only for what is missing; a run that
leaves the recording is a clear error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent_models.llm import LLMBackendError, Sampling, make_backend
from agent_models.llm.backends.replay import ReplayBackend, replay_key

SMALL = {
    "max_new_tokens": 320,
    "max_text_chars": 40,
    "max_actions": 3,
    "summary_max_new_tokens": 64,
    "memory": {"summary_chars": 40, "memory_chars": 40},
    "batch_size": 32,
}


@pytest.fixture(autouse=True)
def _restore_threads() -> Any:
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def trajectory(model: Path, threads: int, **llm: Any) -> dict[str, Any]:
    """Two rounds of the env with LLM users: observations, rewards, texts, brain stats."""
    import gymnasium as gym
    import torch

    import socialenv  # noqa: F401

    torch.set_num_threads(threads)
    env = gym.make(
        "PolicySim-Rec-v0",
        users="llm",
        num_users=12,
        rounds=2,
        llm={"backend": "hf", "model": str(model), "cpu_threads": threads, **SMALL, **llm},
    )
    obs, _ = env.reset(seed=3)
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {"obs": [obs["arms"].copy()], "rewards": [], "brain": []}
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(rng.integers(0, env.action_space.nvec))
        out["obs"].append(obs["arms"].copy())
        out["rewards"].append(reward)
        out["brain"].append(info["brain"])
        done = terminated or truncated
    posts = env.unwrapped.sim.posts
    out["texts"] = [posts.text[i] for i in range(len(posts)) if posts.round[i] >= 0]
    out["backend"] = env.unwrapped.brain.backend
    env.close()
    return out


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (
        a["texts"] == b["texts"]
        and a["rewards"] == b["rewards"]
        and all(np.array_equal(x, y) for x, y in zip(a["obs"], b["obs"], strict=True))
    )


def test_recorded_run_replays_bit_for_bit_with_other_threads(
    tiny_lm_path: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "replay.jsonl"
    recorded = trajectory(tiny_lm_path, 1, replay=str(cache), replay_mode="record")
    assert recorded["texts"], "the tiny model wrote nothing: nothing to compare"
    assert all(b["replay_hit_rate"] == 0.0 for b in recorded["brain"])
    lines = cache.read_text().splitlines()
    assert json.loads(lines[0])["meta"]["model"] == tiny_lm_path.name
    entry = json.loads(lines[1])
    assert {"key", "messages", "sampling", "text", "finish_reason"} <= set(entry)
    assert entry["sampling"]["seed"] is not None

    # replay only: no model is loaded, two threads; identical trajectory, every call a hit
    replayed = trajectory(tiny_lm_path, 2, replay=str(cache), replay_mode="replay")
    assert isinstance(replayed["backend"], ReplayBackend) and replayed["backend"].inner is None
    assert same(recorded, replayed)
    assert all(
        b["replay_hit_rate"] == 1.0 and b["replay_hits"] == b["llm_prompts"]
        for b in replayed["brain"]
    )


def test_same_seed_same_threads_is_deterministic_without_replay(tiny_lm_path: Path) -> None:
    a = trajectory(tiny_lm_path, 1)
    b = trajectory(tiny_lm_path, 1)
    assert same(a, b)
    assert "replay_hit_rate" not in a["brain"][0]


def test_partial_hits_call_the_model_for_the_rest(tiny_lm_path: Path, tmp_path: Path) -> None:
    cache = tmp_path / "c.jsonl"
    prompts = [[{"role": "user", "content": f"hello {i}"}] for i in range(4)]
    sampling = Sampling(temperature=1.0, max_new_tokens=8, seed=5)
    cfg = {"backend": "hf", "model": str(tiny_lm_path), "cpu_threads": 1, "replay": str(cache)}
    with make_backend(cfg) as backend:
        first = backend.generate(prompts[:2], None, sampling)
        assert first.replayed == 0 and backend.misses == 2
        both = backend.generate(prompts, None, sampling)
        assert both.replayed == 2 and backend.hits == 2 and backend.misses == 4
        assert both.texts[:2] == first.texts
    with make_backend({**cfg, "replay_mode": "replay"}) as replay:
        again = replay.generate(prompts, None, sampling)
        assert again.texts == both.texts and again.replayed == 4
        assert again.prompt_tokens.tolist() == both.prompt_tokens.tolist()
        with pytest.raises(LLMBackendError, match=r"1 of 1 prompts .* not in"):
            replay.generate([[{"role": "user", "content": "never asked"}]], None, sampling)
    # the key covers the sampling parameters and each prompt's own seed
    assert replay_key("m", prompts[0], None, sampling, 0) != replay_key(
        "m", prompts[0], None, sampling, 1
    )
    assert replay_key("m", prompts[0], None, sampling, 0) != replay_key(
        "m", prompts[0], None, Sampling(temperature=0.5, max_new_tokens=8, seed=5), 0
    )


def test_replay_config_errors(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from agent_models.llm import LLMConfig

    with pytest.raises(ValidationError, match="replay_mode='replay' needs replay="):
        LLMConfig(model="m", replay_mode="replay")
    with pytest.raises(FileNotFoundError, match="no recorded cache"):
        make_backend(
            {"model": "m", "replay": str(tmp_path / "none.jsonl"), "replay_mode": "replay"}
        )
    cache = tmp_path / "other.jsonl"
    cache.write_text(json.dumps({"meta": {"model": "another-model", "system_role": True}}) + "\n")
    with pytest.raises(ValueError, match="recorded with model 'another-model'"):
        make_backend({"model": "/x/m", "replay": str(cache), "replay_mode": "replay"})


# ---------------------------------------------------------------- the cache as untrusted input (issue 21)
def _scripted_cache(tmp_path: Path) -> tuple[Path, list, Sampling]:
    from tests.support import ScriptedBackend

    cache = tmp_path / "c.jsonl"
    prompts = [[{"role": "user", "content": f"hello {i}"}] for i in range(3)]
    sampling = Sampling(temperature=1.0, max_new_tokens=8, seed=5)
    backend = ReplayBackend(cache, "record", "m", ScriptedBackend(lambda i, m, s: f"answer {i}"))
    backend.generate(prompts, None, sampling)
    return cache, prompts, sampling


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"[1, 2]", "line 5: a list is not allowed: a JSON object"),
        (b'{"key": 3}', "line 5: key=3 is not allowed: str"),
        (b'{"meta": {"model": "m"}}', "line 5: meta is not allowed here"),
        ('{"key": "k", "text": "caf\u00e9"}'.encode("latin-1"), "line 5: not UTF-8 text"),
        (
            b'{"key": "k", "messages": [], "schema_sha256": null, "sampling": {}, "text": "t", '
            b'"prompt_tokens": -1, "completion_tokens": 0, "finish_reason": "stop"}',
            "line 5: prompt_tokens=-1 is not allowed",
        ),
        (b"{not json", "line 5: not JSON"),
    ],
)
def test_a_malformed_cache_line_is_a_clear_error(tmp_path: Path, line: bytes, why: str) -> None:
    cache, _, _ = _scripted_cache(tmp_path)
    cache.write_bytes(cache.read_bytes() + line + b"\n")
    for mode in ("replay", "auto"):
        from tests.support import ScriptedBackend

        inner = None if mode == "replay" else ScriptedBackend(lambda i, m, s: "x")
        with pytest.raises(ValueError, match=f"replay cache {cache}: {why}"):
            ReplayBackend(cache, mode, "m", inner)


def test_a_torn_last_line_is_skipped_and_cut_before_appending(tmp_path: Path) -> None:
    from tests.support import ScriptedBackend

    cache, prompts, sampling = _scripted_cache(tmp_path)
    whole = cache.read_bytes()
    cache.write_bytes(
        whole + b'{"key": "abc", "messages": [{"role": "us'
    )  # a recording killed mid-line
    replay = ReplayBackend(cache, "replay", "m")
    assert replay.generate(prompts, None, sampling).texts == ["answer 0", "answer 1", "answer 2"]
    auto = ReplayBackend(cache, "auto", "m", ScriptedBackend(lambda i, m, s: "fresh"))
    assert cache.read_bytes() == whole
    more = [[{"role": "user", "content": "new"}]]
    assert auto.generate(prompts + more, None, sampling).texts[-1] == "fresh"
    assert len(ReplayBackend(cache, "replay", "m").answers) == 4


def test_an_entry_must_match_its_key(tmp_path: Path) -> None:
    cache, prompts, sampling = _scripted_cache(tmp_path)
    lines = cache.read_text().splitlines()
    record = json.loads(lines[2])
    record["messages"] = [{"role": "user", "content": "something else"}]
    lines[2] = json.dumps(record)
    cache.write_text("\n".join(lines) + "\n")
    replay = ReplayBackend(cache, "replay", "m")
    with pytest.raises(ValueError, match=r"line 3: messages does not match the entry's key"):
        replay.generate(prompts, None, sampling)


def test_an_oversized_cache_or_line_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_models.llm.backends import replay

    cache, _, _ = _scripted_cache(tmp_path)
    monkeypatch.setattr(replay, "MAX_LINE_BYTES", 64)
    with pytest.raises(ValueError, match=r"line 2: \d+ bytes is not allowed: at most 64"):
        ReplayBackend(cache, "replay", "m")
    monkeypatch.setattr(replay, "MAX_CACHE_BYTES", cache.stat().st_size - 1)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read before the size check"))
    with pytest.raises(
        ValueError, match=f"replay cache {cache}: {cache.stat().st_size} bytes is not allowed"
    ):
        ReplayBackend(cache, "replay", "m")
