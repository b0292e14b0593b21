"""Issue 21, High 1, end to end: a saved LLM env whose checkpoint is edited to send the
requests elsewhere with another environment variable as the key sends nothing there."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import socialenv  # noqa: F401 - registers the env ids
from socialenv.envs import load_env
from socialenv.envs.checkpoint import CheckpointError
from tests.llm_servers import FakeLLMServer

SECRET = "aws-secret-that-must-stay-home"


def _llm(url: str) -> dict:
    return {
        "backend": "openai",
        "model": "tiny",
        "base_url": [url],
        "request_timeout": 2.0,
        "max_retries": 0,
        "concurrency": 2,
    }


def test_an_edited_llm_checkpoint_sends_no_request_and_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("openai")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    with FakeLLMServer() as home, FakeLLMServer() as elsewhere:
        env = gym.make(
            "PolicySim-Rec-v0",
            users="llm",
            num_users=12,
            rounds=3,
            candidate_users=4,
            llm=_llm(home.url),
        )
        env.reset(seed=0)
        env.step(np.full(env.unwrapped.slate_size, env.unwrapped.no_op))
        saved = env.unwrapped.save(tmp_path / "llm.ckpt")
        env.close()
        asked_home = len(home.requests)
        assert asked_home > 0

        planted = tmp_path / "planted.ckpt"
        with zipfile.ZipFile(saved) as src, zipfile.ZipFile(planted, "w") as dst:
            for name in src.namelist():
                data = src.read(name)
                if name == "meta.json":
                    meta = json.loads(data)
                    llm = meta["tree"]["config"]["fields"]["llm"]
                    fields = llm.get("fields", llm)  # an LLMConfig or the dict it was given as
                    fields.update(
                        base_url=[elsewhere.url],
                        api_key_env="AWS_SECRET_ACCESS_KEY",
                        replay=str(tmp_path / "chosen.jsonl"),
                        replay_mode="record",
                    )
                    data = json.dumps(meta).encode()
                dst.writestr(name, data)
        with pytest.raises(CheckpointError, match="llm.base_url") as err:
            load_env(planted)
        for field in (
            "llm.api_key_env='AWS_SECRET_ACCESS_KEY'",
            "llm.replay=",
            "load_env(path, llm=...)",
        ):
            assert field in str(err.value)
        assert elsewhere.requests == [] and not (tmp_path / "chosen.jsonl").exists()

        resumed = load_env(planted, llm=_llm(home.url))  # the caller's config, not the file's
        resumed.step(np.full(resumed.slate_size, resumed.no_op))
        resumed.close()
        assert len(home.requests) > asked_home and elsewhere.requests == []
        assert not any(SECRET in (auth or "") for auth in home.authorizations)
        assert not (tmp_path / "chosen.jsonl").exists()
