"""Checkpoints are data only: planted payloads are refused and never run."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import socialenv  # noqa: F401 - registers the env ids
from socialenv.checkpoint import CheckpointError, read_checkpoint, write_checkpoint
from socialenv.envs import load_env
from tests.support import small_env

SMALL = small_env(num_users=50, rounds=4)


class _Payload:
    """Unpickling this writes ``marker`` (what an attacker's file would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "pwned"))


def _saved_env(tmp_path: Path) -> Path:
    env = gym.make("PolicySim-Rec-v0", **SMALL)
    env.reset(seed=1)
    env.step(env.action_space.sample())
    return env.unwrapped.save(tmp_path / "env.ckpt")


def _rewrite(path: Path, out: Path, edit) -> Path:
    """Copy the checkpoint zip at ``path`` to ``out`` with ``edit(name, bytes) -> bytes``."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, edit(name, src.read(name)))
    return out


def test_pickle_payload_is_refused_and_does_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    bad = tmp_path / "planted.pkl"
    bad.write_bytes(pickle.dumps({"version": 1, "class": "x:y", "payload": _Payload(marker)}))
    pickle.loads(pickle.dumps(_Payload(tmp_path / "control")))  # the payload does run if unpickled
    assert (tmp_path / "control").exists()
    with pytest.raises(CheckpointError, match="pickle"):
        load_env(bad)
    assert not marker.exists()


def test_object_array_payload_inside_a_valid_checkpoint_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    path = _saved_env(tmp_path)
    evil = io.BytesIO()
    np.lib.format.write_array(evil, np.array([_Payload(marker)], dtype=object), allow_pickle=True)

    def plant(name: str, data: bytes) -> bytes:
        return evil.getvalue() if name == "a0.npy" else data

    planted = _rewrite(path, tmp_path / "planted.ckpt", plant)
    with pytest.raises(CheckpointError, match="array 'a0'"):
        load_env(planted)
    assert not marker.exists()


@pytest.mark.parametrize("class_name", ["os.system", "posix:system", "Path", "RecEnv", "PolicySimEnv"])
def test_checkpoint_cannot_name_a_class_to_build(tmp_path: Path, class_name: str) -> None:
    path = _saved_env(tmp_path)

    def swap(name: str, data: bytes) -> bytes:
        if name != "meta.json":
            return data
        meta = json.loads(data)
        meta["tree"]["config"]["__data__"] = class_name
        return json.dumps(meta).encode()

    with pytest.raises(CheckpointError, match="not one of the checkpointable"):
        load_env(_rewrite(path, tmp_path / "swapped.ckpt", swap))


def test_env_id_comes_from_the_registry(tmp_path: Path) -> None:
    path = _saved_env(tmp_path)

    def swap(name: str, data: bytes) -> bytes:
        if name != "meta.json":
            return data
        meta = json.loads(data)
        meta["tree"]["env_id"] = "os:system"
        return json.dumps(meta).encode()

    with pytest.raises(CheckpointError, match="env id 'os:system' is not one of"):
        load_env(_rewrite(path, tmp_path / "swapped.ckpt", swap))


def test_format_and_version_are_checked_before_arrays(tmp_path: Path) -> None:
    path = _saved_env(tmp_path)
    marker = tmp_path / "marker"
    evil = io.BytesIO()
    np.lib.format.write_array(evil, np.array([_Payload(marker)], dtype=object), allow_pickle=True)

    def old_version(name: str, data: bytes) -> bytes:
        if name == "meta.json":
            meta = json.loads(data)
            meta["version"] = 99
            return json.dumps(meta).encode()
        return evil.getvalue()

    with pytest.raises(CheckpointError, match="version 99"):
        load_env(_rewrite(path, tmp_path / "v99.ckpt", old_version))
    not_ours = tmp_path / "other.npz"
    np.savez(not_ours, x=np.zeros(3))
    with pytest.raises(CheckpointError, match="no meta.json"):
        load_env(not_ours)
    text = tmp_path / "text.ckpt"
    text.write_text("hello")
    with pytest.raises(CheckpointError, match="not a zip"):
        load_env(text)
    assert not marker.exists()


def test_round_trip_of_data_and_refusal_of_objects(tmp_path: Path) -> None:
    tree = {"a": np.arange(3, dtype=np.int16), "s": np.float32(1.5), "t": (1, "x", None),
            1: [np.array(["ab", "c"]), {"nested": True}], "big": 2**80, "nan": float("nan"),
            "api_key": "sk-secret", "__array__": 3}
    back = read_checkpoint(write_checkpoint(tmp_path / "x.ckpt", "test", tree), "test")
    assert back["a"].dtype == np.int16 and back["a"].tolist() == [0, 1, 2]
    assert isinstance(back["s"], np.float32) and back["s"] == 1.5
    assert back["t"] == (1, "x", None) and back[1][0].tolist() == ["ab", "c"]
    assert back[1][1] == {"nested": True} and back["big"] == 2**80 and np.isnan(back["nan"])
    assert back["api_key"] is None and back["__array__"] == 3
    with pytest.raises(CheckpointError, match=r"state\.f: a builtin_function_or_method cannot be checkpointed"):
        write_checkpoint(tmp_path / "y.ckpt", "test", {"f": os.system})
    with pytest.raises(CheckpointError, match="holds a 'test' checkpoint, not 'env'"):
        read_checkpoint(tmp_path / "x.ckpt", "env")
    assert not (tmp_path / "y.ckpt").exists()


def test_a_checkpoint_cannot_choose_code_through_the_llm_config(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    path = _saved_env(tmp_path)

    def plant(name: str, data: bytes) -> bytes:
        if name != "meta.json":
            return data
        meta = json.loads(data)
        meta["tree"]["config"]["fields"]["llm"] = {"backend": "hf", "model": "m",
                                                   "toxicity": "antigravity:fly"}
        meta["tree"]["config"]["fields"]["users"] = "llm"
        return json.dumps(meta).encode()

    with pytest.raises(CheckpointError, match=r"names code to run \(llm.toxicity='antigravity:fly'\)"):
        load_env(_rewrite(path, tmp_path / "planted.ckpt", plant))
    assert not marker.exists()
