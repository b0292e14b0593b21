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
from socialenv.envs import load_env
from socialenv.envs.checkpoint import CheckpointError, read_checkpoint, write_checkpoint
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


@pytest.mark.parametrize(
    "class_name", ["os.system", "posix:system", "Path", "RecEnv", "PolicySimEnv"]
)
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
    tree = {
        "a": np.arange(3, dtype=np.int16),
        "s": np.float32(1.5),
        "t": (1, "x", None),
        1: [np.array(["ab", "c"]), {"nested": True}],
        "big": 2**80,
        "nan": float("nan"),
        "api_key": "sk-secret",
        "__array__": 3,
    }
    back = read_checkpoint(write_checkpoint(tmp_path / "x.ckpt", "test", tree), "test")
    assert back["a"].dtype == np.int16 and back["a"].tolist() == [0, 1, 2]
    assert isinstance(back["s"], np.float32) and back["s"] == 1.5
    assert back["t"] == (1, "x", None) and back[1][0].tolist() == ["ab", "c"]
    assert back[1][1] == {"nested": True} and back["big"] == 2**80 and np.isnan(back["nan"])
    assert back["api_key"] is None and back["__array__"] == 3
    with pytest.raises(
        CheckpointError, match=r"state\.f: a builtin_function_or_method cannot be checkpointed"
    ):
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
        meta["tree"]["config"]["fields"]["llm"] = {
            "backend": "hf",
            "model": "m",
            "toxicity": "antigravity:fly",
        }
        meta["tree"]["config"]["fields"]["users"] = "llm"
        return json.dumps(meta).encode()

    with pytest.raises(
        CheckpointError, match=r"names code to run \(llm.toxicity='antigravity:fly'\)"
    ):
        load_env(_rewrite(path, tmp_path / "planted.ckpt", plant))
    assert not marker.exists()


# ---------------------------------------------------------------- second hardening pass (issue 21)
def _plant_llm(path: Path, out: Path, **llm: object) -> Path:
    def plant(name: str, data: bytes) -> bytes:
        if name != "meta.json":
            return data
        meta = json.loads(data)
        meta["tree"]["config"]["fields"]["llm"] = {"backend": "openai", "model": "m", **llm}
        meta["tree"]["config"]["fields"]["users"] = "llm"
        return json.dumps(meta).encode()

    return _rewrite(path, out, plant)


@pytest.mark.parametrize(
    ("llm", "named"),
    [
        (
            {"base_url": ["http://elsewhere"]},
            r"chooses an endpoint \(llm.base_url=\['http://elsewhere'\]\)",
        ),
        (
            {"base_url": ["http://127.0.0.1:1"], "api_key_env": "AWS_SECRET_ACCESS_KEY"},
            r"chooses a secret's source \(llm.api_key_env='AWS_SECRET_ACCESS_KEY'\)",
        ),
        (
            {"backend": "hf", "replay": "{out}", "replay_mode": "record"},
            r"chooses a path to write \(llm.replay=.*written.jsonl' with replay_mode='record'\)",
        ),
        ({"backend": "hf", "replay": "{out}"}, r"chooses a path to write .*replay_mode='auto'"),
        (
            {"backend": "vllm", "vllm_engine_kwargs": {"trust_remote_code": True}},
            r"names code to run \(llm.vllm_engine_kwargs=\['trust_remote_code'\]",
        ),
    ],
)
def test_a_checkpoint_cannot_choose_an_endpoint_a_secret_source_or_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: dict, named: str
) -> None:
    written = tmp_path / "written.jsonl"
    llm = {
        k: str(v).replace("{out}", str(written)) if isinstance(v, str) else v
        for k, v in llm.items()
    }
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-value")
    planted = _plant_llm(_saved_env(tmp_path), tmp_path / "planted.ckpt", **llm)
    with pytest.raises(CheckpointError, match=named) as err:
        load_env(planted)
    assert "load_env(path, llm=...)" in str(err.value) and "aws-secret-value" not in str(err.value)
    assert not written.exists()


def test_the_callers_llm_config_replaces_the_files(tmp_path: Path) -> None:
    """With llm= given again, the file's LLM fields are not used at all (here a surrogate env
    whose planted LLM config would send requests elsewhere loads, with the caller's None)."""
    planted = _plant_llm(
        _saved_env(tmp_path), tmp_path / "planted.ckpt", base_url=["http://elsewhere"]
    )
    env = load_env(planted, llm=None, users="surrogate")
    assert env.config.llm is None
    env.step(np.full(env.slate_size, env.no_op))


def test_damaged_checkpoints_are_clear_errors(tmp_path: Path) -> None:
    path = _saved_env(tmp_path)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("a3.npy")
    data[info.header_offset + 30 + len(info.filename) + info.file_size - 1] ^= (
        0xFF  # last data byte
    )
    flipped = tmp_path / "crc.ckpt"
    flipped.write_bytes(bytes(data))
    with pytest.raises(
        CheckpointError, match=r"crc.ckpt is damaged at array 'a3' \(BadZipFile: Bad CRC-32"
    ):
        load_env(flipped)
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(path.read_bytes()[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated.ckpt"):
        load_env(truncated)


def _edit_meta(path: Path, out: Path, edit) -> Path:
    def apply(name: str, data: bytes) -> bytes:
        if name != "meta.json":
            return data
        meta = json.loads(data)
        edit(meta["tree"])
        return json.dumps(meta).encode()

    return _rewrite(path, out, apply)


def test_nan_state_negative_round_and_wrong_env_class_are_refused(tmp_path: Path) -> None:
    from socialenv.envs.exposure import ExposureEnv
    from socialenv.envs.rec import RecEnv

    path = _saved_env(tmp_path)
    key = json.loads(zipfile.ZipFile(path).read("meta.json"))["tree"]["sim"]["users"]["stance"][
        "__array__"
    ]

    def nan(name: str, data: bytes) -> bytes:
        if name != f"{key}.npy":
            return data
        out = io.BytesIO()
        array = np.load(io.BytesIO(data))
        np.save(out, np.full_like(array, np.nan))
        return out.getvalue()

    with pytest.raises(CheckpointError, match=r"users.stance is not allowed: finite numbers only"):
        load_env(_rewrite(path, tmp_path / "nan.ckpt", nan))

    def minus_five(tree: dict) -> None:
        tree["sim"]["round"] = -5

    with pytest.raises(
        CheckpointError, match=r"sim.round=-5 is not allowed: an integer in \[0, rounds=4\]"
    ):
        load_env(_edit_meta(path, tmp_path / "round.ckpt", minus_five))

    def unordered_round_starts(tree: dict) -> None:
        starts = tree["sim"]["round_start"]
        starts[-2], starts[-1] = starts[-1] + 1, starts[-2]

    with pytest.raises(CheckpointError, match=r"sim.round_start=\[.*\] is not allowed: round \+ 2"):
        load_env(_edit_meta(path, tmp_path / "starts.ckpt", unordered_round_starts))
    exposure = gym.make("PolicySim-Exposure-v0", **SMALL)
    exposure.reset(seed=1)
    saved = exposure.unwrapped.save(tmp_path / "exposure.ckpt")
    with pytest.raises(CheckpointError, match="holds a PolicySim-Exposure-v0 env .*not a RecEnv"):
        RecEnv.load(saved)
    assert isinstance(ExposureEnv.load(saved), ExposureEnv)


def test_array_headers_are_checked_before_reading(tmp_path: Path) -> None:
    path = _saved_env(tmp_path)
    header = io.BytesIO()
    np.lib.format.write_array_header_2_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (10**7, 10**6)}
    )

    def huge(name: str, data: bytes) -> bytes:
        return header.getvalue() + b"\0" * 64 if name == "a0.npy" else data

    with pytest.raises(
        CheckpointError, match=r"array 'a0': its header declares shape \(10000000, 1000000\)"
    ):
        load_env(_rewrite(path, tmp_path / "huge.ckpt", huge))
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp_path / "extra.ckpt", "w") as dst:
        for name in src.namelist():
            dst.writestr(name, src.read(name))
        dst.writestr("payload.pkl", pickle.dumps(1))
    with pytest.raises(CheckpointError, match=r"unknown member\(s\) \['payload.pkl'\]"):
        load_env(tmp_path / "extra.ckpt")
    bomb = tmp_path / "bomb.ckpt"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        for name in src.namelist():
            if name == "a0.npy":
                out = io.BytesIO()
                np.save(out, np.zeros(4_000_000))
                dst.writestr(name, out.getvalue())
            else:
                dst.writestr(name, src.read(name))
    with pytest.raises(CheckpointError, match="refused as a zip bomb"):
        load_env(bomb)


@pytest.mark.parametrize(
    "tree",
    [
        {"__items__": [[[{"a": 1}], 1]]},  # an unhashable key
        {"__tensor__": "a0"},  # a tensor of text
    ],
)
def test_odd_trees_are_checkpoint_errors(tmp_path: Path, tree: dict) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "odd.ckpt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(
            "meta.json",
            json.dumps({"format": "policysim-checkpoint", "version": 2, "kind": "x", "tree": tree}),
        )
        out = io.BytesIO()
        np.save(out, np.array(["text"]))
        zf.writestr("a0.npy", out.getvalue())
    with pytest.raises(CheckpointError, match="odd.ckpt"):
        read_checkpoint(path, "x")


def _legacy_layout(name: str, data: bytes) -> bytes:
    """A checkpoint as written before the envs had lever configs (issue 25): the lever's
    fields flat in EnvConfig (every env's, at their defaults), the moderation state under
    the simulation's "moderation" key and the Exposure lever's governed users in the env
    state."""
    if name != "meta.json":
        return data
    meta = json.loads(data)
    tree = meta["tree"]
    fields = tree["config"]["fields"]
    lever = fields.pop("lever")
    own = lever["fields"]
    fields.update(
        {
            "budget": 5,
            "lever_share": 0.15,
            "candidate_users": None,
            "candidates": {"interest": 2, "opposite": 3, "popular": 2, "fresh": 1},
            "exposure_users": None,
            "exposure_levels": {"__tuple__": [0.0, 0.25, 0.5, 0.75, 1.0]},
            "moderation": None,
            **own,
        }
    )
    sim = tree["sim"]
    state = sim.pop("lever")
    if lever["__data__"] == "ModerationLeverConfig":
        sim["moderation"] = state
    elif lever["__data__"] == "ExposureLeverConfig":
        tree["env"]["governed"] = state["governed"]
    return json.dumps(meta).encode()


@pytest.mark.parametrize(
    ("env_id", "lever"),
    [
        ("PolicySim-Rec-v0", {"candidate_users": 6, "budget": 2}),
        ("PolicySim-Exposure-v0", {"exposure_users": 6}),
        ("PolicySim-Moderation-v0", {"budget": 3}),
    ],
)
def test_a_checkpoint_of_the_flat_config_layout_still_loads(
    tmp_path: Path, env_id: str, lever: dict
) -> None:
    from tests.support import assert_same

    env = gym.make(env_id, **SMALL, **lever)
    env.reset(seed=1)
    for _ in range(2):
        env.step(env.action_space.sample())
    path = env.unwrapped.save(tmp_path / "env.ckpt")
    old = _rewrite(path, tmp_path / "old.ckpt", _legacy_layout)
    assert b'"lever"' not in zipfile.ZipFile(old).read("meta.json")
    runs = []
    for saved in (path, old):
        loaded = load_env(saved)
        assert loaded.lever_config == env.unwrapped.lever_config
        loaded.action_space.seed(0)
        runs.append([loaded.step(loaded.action_space.sample()) for _ in range(2)])
    assert_same(runs[0], runs[1])
