"""No secret reaches a file: every file a run, a sweep and a checkpoint write is grepped."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

import socialenv  # noqa: F401 - registers the env ids
from agent_models.llm import LLMConfig
from policysim.runner import RunConfig, run
from policysim.sweep import SweepConfig, run_sweep
from policysim_infra.redaction import REDACTED, is_secret_name, redact, redact_text, to_json
from socialenv.envs import load_env
from tests.llm_servers import FakeLLMServer

KEY = "sk-test-DO-NOT-WRITE-0123456789"
ENV_KEY = "sk-env-ALSO-SECRET-9876543210"
TOKEN = "hf_TOKEN-NEVER-ON-DISK-424242"
PASSWORD = "hunter2-PASSWORD-777"


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def _assert_no_secret(root: Path) -> int:
    files = _files(root)
    for path in files:
        data = path.read_bytes()
        for secret in (KEY, ENV_KEY, TOKEN, PASSWORD):
            assert secret.encode() not in data, f"{secret} written to {path}"
    return len(files)


@pytest.mark.filterwarnings("ignore")
def test_run_sweep_and_checkpoint_write_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("POLICYSIM_TEST_LLM_KEY", ENV_KEY)
    monkeypatch.setenv("WANDB_SILENT", "true")
    with FakeLLMServer() as server:
        llm = {
            "backend": "openai",
            "model": "tiny",
            "base_url": server.url,
            "api_key": KEY,
            "max_retries": 0,
            "request_timeout": 10,
            "vllm_engine_kwargs": {"hf_token": TOKEN, "db_password": PASSWORD},
        }
        small = {
            "users": "llm",
            "num_users": 10,
            "rounds": 2,
            "budget": 2,
            "candidate_users": 4,
            "candidates": {"interest": 1, "opposite": 1, "fresh": 1},
        }
        result = run(
            RunConfig(
                policy="random",
                env_kwargs={**small, "llm": llm},
                out_dir=str(tmp_path / "runs"),
                run_name="llm",
                wandb="offline",
                progress=False,
                plots=True,
            )
        )
        assert len(result.rows) == 2
        assert set(server.authorizations) == {f"Bearer {KEY}"}  # the key was used, not written
        config_json = (result.out_dir / "config.json").read_text()
        assert REDACTED in config_json and "hf_token" in config_json

        env_llm = {**llm, "api_key": None, "api_key_env": "POLICYSIM_TEST_LLM_KEY"}
        sweep = run_sweep(
            SweepConfig(
                name="s",
                policies=("random",),
                env_kwargs={**small, "llm": env_llm},
                out_dir=str(tmp_path / "sweeps"),
                wandb="offline",
            ),
            backend="local",
        )
        assert not sweep.failures
        assert f"Bearer {ENV_KEY}" in server.authorizations  # read from the named variable

        env = gym.make("PolicySim-Rec-v0", **small, llm=llm)
        env.reset(seed=0)
        path = env.unwrapped.save(tmp_path / "ckpt" / "env.ckpt")
        env.close()
        from socialenv.envs.checkpoint import CheckpointError, read_checkpoint

        stored = read_checkpoint(path, "env")["config"].llm
        assert stored["api_key"] is None  # not stored: read from the environment again
        assert stored["vllm_engine_kwargs"] == {"hf_token": None, "db_password": None}
        with pytest.raises(CheckpointError, match=r"chooses an endpoint \(llm.base_url="):
            load_env(path)  # the file may not choose where requests (and the key) go
        restored = load_env(path, llm=llm)
        assert restored.config.llm is llm
        restored.close()
    written = _assert_no_secret(tmp_path)
    names = {p.name for p in _files(tmp_path)}
    assert {"config.json", "summary.json", "rounds.csv", "sweep.json", "env.ckpt"} <= names
    assert any(p.suffix == ".wandb" for p in _files(tmp_path))  # W&B offline files were grepped
    assert written >= 10


def test_secret_names_and_values() -> None:
    for name in (
        "api_key",
        "OPENAI_API_KEY",
        "hf_token",
        "password",
        "X-Api-Key",
        "client_secret",
        "Authorization",
        "aws_access_key",
    ):
        assert is_secret_name(name), name
    for name in ("max_tokens", "prompt_tokens", "tokenizer", "author", "api_key_env", "keywords"):
        assert not is_secret_name(name), name
    cfg = LLMConfig(backend="openai", model="m", base_url="http://h/v1", api_key=KEY)
    assert (
        KEY not in repr(cfg) and KEY not in cfg.model_dump_json() and cfg.resolved_api_key() == KEY
    )
    assert KEY not in to_json({"llm": cfg}) and KEY not in to_json({"nested": [{"token": KEY}]})
    assert redact({"password": None}) == {"password": None}
    assert redact_text(f"https://me:{PASSWORD}@host/v1") == f"https://{REDACTED}@host/v1"


def test_environment_secret_values_are_scrubbed_from_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", ENV_KEY)
    assert ENV_KEY not in to_json({"error": f"request failed: bad key {ENV_KEY}"})
