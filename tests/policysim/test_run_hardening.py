"""Run folders under faults and hostile files (issue 21): resumed runs keep their propensity
log and Minari record, a full disk never yields a "complete" run, folders are never shared,
a run checkpoint cannot choose an endpoint, a secret's source or a path to write."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bandits.ope import LoggedRounds
from policysim.runner import RunConfig, resume, run
from socialenv.envs.checkpoint import CheckpointError
from tests.support import ROOT, small_rec

SMALL = small_rec(candidates={"interest": 2, "opposite": 1, "popular": 1, "fresh": 1}, rounds=4)


class Boom(RuntimeError):
    pass


def _config(tmp_path: Path, name: str, **changes: Any) -> RunConfig:
    return RunConfig(
        policy="egreedy",
        seeds=(0, 1),
        env_kwargs=dict(SMALL),
        out_dir=str(tmp_path / "runs"),
        run_name=name,
        progress=False,
        plots=False,
        **changes,
    )


def _crash_after(n: int):
    seen: list[int] = []

    def on_round(row: dict[str, Any]) -> None:
        seen.append(1)
        if len(seen) == n:
            raise Boom(f"crash after round {n}")

    return on_round


def _same_log(a: LoggedRounds, b: LoggedRounds) -> None:
    for key in (
        "contexts",
        "mask",
        "arms",
        "propensities",
        "rewards",
        "applied",
        "episode",
        "method",
    ):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)


@pytest.mark.parametrize("crash_after", [3, 4, 6])
def test_a_resumed_run_keeps_its_propensity_log_and_minari_record(
    tmp_path: Path, crash_after: int
) -> None:
    pytest.importorskip("minari")
    import minari

    full = run(_config(tmp_path, "full", record=str(tmp_path / "ds-full")))
    with pytest.raises(Boom):
        run(
            _config(tmp_path, "broken", record=str(tmp_path / "ds")),
            on_round=_crash_after(crash_after),
        )
    folder = tmp_path / "runs" / "broken"
    with pytest.raises(
        CheckpointError, match=r"record='.*ds': the run records a Minari dataset.*--record DIR"
    ):
        resume(folder)
    resumed = resume(folder, record=str(tmp_path / "ds"))
    assert resumed.rows == full.rows
    _same_log(LoggedRounds.load(folder), LoggedRounds.load(full.out_dir))

    def episodes(folder: str) -> tuple[Any, list[Any]]:
        os.environ["MINARI_DATASETS_PATH"] = str(tmp_path / folder)
        try:
            dataset = minari.load_dataset("policysim-rec/egreedy-v0")
            return dataset.spec.env_spec, list(dataset.iterate_episodes())
        finally:
            del os.environ["MINARI_DATASETS_PATH"]

    (spec, got), (_, want) = episodes("ds"), episodes("ds-full")
    assert spec is not None and spec.id == "PolicySim-Rec-v0"
    assert len(got) == len(want) == 2
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.actions, w.actions)
        np.testing.assert_array_equal(g.rewards, w.rewards)
        np.testing.assert_array_equal(g.observations["arms"], w.observations["arms"])
        np.testing.assert_array_equal(g.infos["propensity"], w.infos["propensity"])


def test_a_full_disk_never_gives_a_complete_run_and_resume_repairs_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = run(_config(tmp_path, "full"))
    real = np.savez_compressed

    def disk_full(file: Any, **arrays: Any) -> None:
        real(file, **arrays)
        file.truncate(100)  # what reached the disk before ENOSPC
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", disk_full)
    with pytest.raises(OSError, match="No space left"):
        run(_config(tmp_path, "full-disk"))
    monkeypatch.setattr(np, "savez_compressed", real)
    folder = tmp_path / "runs" / "full-disk"
    summary = json.loads((folder / "summary.json").read_text())
    assert (
        summary["status"] == "failed"
        and "No space left" in summary["error"]
        and "resume" in summary
    )
    assert not (folder / "logged_rounds.npz").exists()  # written whole or not at all
    assert not [p.name for p in folder.iterdir() if ".tmp" in p.name]
    resume(folder)
    _same_log(LoggedRounds.load(folder), LoggedRounds.load(full.out_dir))
    assert json.loads((folder / "summary.json").read_text())["status"] == "complete"
    assert not (folder / ".resume").exists()  # the journal goes once the run is complete
    assert resume(folder).rows == full.rows  # resuming a complete run changes nothing
    # a log broken afterwards (say, by a copy on a full disk) is detected by --resume
    (folder / "logged_rounds.npz").write_bytes((folder / "logged_rounds.npz").read_bytes()[:300])
    with pytest.raises(ValueError, match="is complete but its logged_rounds.npz is damaged"):
        resume(folder)


def test_run_folders_are_never_shared(tmp_path: Path) -> None:
    from policysim.runner import RunLock, _open_run_folder

    first = run(_config(tmp_path, "taken"))
    with pytest.raises(
        ValueError, match=r"run_name='taken' is not allowed: .* already holds a run"
    ):
        run(_config(tmp_path, "taken"))
    assert (
        len(first.rows) == 8 and len((first.out_dir / "rounds.csv").read_text().splitlines()) == 9
    )
    lock = RunLock(first.out_dir)
    try:
        with pytest.raises(ValueError, match="is in use by another run"):
            resume(first.out_dir)
    finally:
        lock.release()
    unnamed = _config(tmp_path, "x")
    unnamed.run_name = None
    folders = set()
    for _ in range(30):  # many within one second (and often within one microsecond)
        folder, held = _open_run_folder(unnamed, resuming=False)
        held.release()
        folders.add(folder)
    assert len(folders) == 30


def test_a_run_checkpoint_cannot_choose_an_endpoint_or_a_secret(tmp_path: Path) -> None:
    with pytest.raises(Boom):
        run(_config(tmp_path, "r"), on_round=_crash_after(2))
    path = tmp_path / "runs" / "r" / "checkpoint.ckpt"
    planted = tmp_path / "planted.ckpt"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(planted, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == "meta.json":
                meta = json.loads(data)
                meta["tree"]["config"]["env_kwargs"]["llm"] = {
                    "backend": "openai",
                    "model": "m",
                    "base_url": ["http://elsewhere"],
                    "api_key_env": "AWS_SECRET_ACCESS_KEY",
                    "replay": str(tmp_path / "w.jsonl"),
                    "replay_mode": "record",
                }
                data = json.dumps(meta).encode()
            dst.writestr(name, data)
    planted.replace(path)
    with pytest.raises(
        CheckpointError,
        match=r"chooses an endpoint \(llm.base_url=.*chooses a secret's source "
        r"\(llm.api_key_env='AWS_SECRET_ACCESS_KEY'\).*chooses a path to write",
    ):
        resume(tmp_path / "runs" / "r")
    from typer.testing import CliRunner

    from policysim.cli import app

    cli = CliRunner().invoke(app, ["run", "--resume", str(tmp_path / "runs" / "r"), "--no-plots"])
    assert cli.exit_code == 2 and "llm.base_url" in cli.output and "--llm JSON" in cli.output
    assert not (tmp_path / "w.jsonl").exists()


def test_a_run_killed_before_its_first_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "killed"
    script = (
        "import os, sys; sys.path.insert(0, sys.argv[1]);"
        "from policysim.runner import RunConfig, run;"
        f"run(RunConfig(policy='random', env_kwargs={SMALL!r}, out_dir={str(tmp_path / 'runs')!r},"
        " run_name='killed', progress=False, plots=False, checkpoint_every=100),"
        " on_round=lambda row: os.kill(os.getpid(), 9))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(ROOT)], capture_output=True, timeout=300
    )
    assert proc.returncode == -9, proc.stderr.decode()
    assert json.loads((folder / "summary.json").read_text())["status"] == "running"
    (folder / ".checkpoint.ckpt.tmp-12345").write_bytes(b"partial")
    with pytest.raises(
        FileNotFoundError, match="stopped before its first checkpoint was written"
    ) as err:
        resume(folder)
    assert "checkpoint_every" not in str(err.value)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "failed" and "before its first checkpoint" in summary["error"]
    assert not list(folder.glob(".*.tmp-*"))


def _edit_run_checkpoint(path: Path, edit) -> None:
    out = path.with_name("edited.ckpt")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == "meta.json":
                meta = json.loads(data)
                edit(meta["tree"])
                data = json.dumps(meta).encode()
            dst.writestr(name, data)
    out.replace(path)


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (
            lambda t: t["position"].update(seed_index=99),
            r"position.seed_index=99 is not allowed: an integer in \[0, 2\)",
        ),
        (
            lambda t: t["position"].update(episode_done="yes"),
            "position.episode_done='yes' is not allowed",
        ),
        (lambda t: t["rows"].append(["x"]), r"rows\[2\] is not allowed"),
        (lambda t: t.update(policy={"nonsense": 1}), "the saved policy state does not fit"),
        (
            lambda t: t["config"].update(record_id="../../escape-v0"),
            r"record_id='..' is not allowed",
        ),
    ],
)
def test_a_tampered_run_checkpoint_is_a_clear_error(tmp_path: Path, edit, why: str) -> None:
    with pytest.raises(Boom):
        run(_config(tmp_path, "r"), on_round=_crash_after(2))
    _edit_run_checkpoint(tmp_path / "runs" / "r" / "checkpoint.ckpt", edit)
    with pytest.raises(ValueError, match=why):
        resume(tmp_path / "runs" / "r")


def test_a_minari_record_cut_by_a_full_disk_is_not_left_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    minari = pytest.importorskip("minari")
    real = minari.create_dataset_from_buffers

    def disk_full(dataset_id: str, *args: Any, **kwargs: Any) -> None:
        folder = Path(os.environ["MINARI_DATASETS_PATH"]) / dataset_id
        folder.mkdir(parents=True)
        (folder / "partial").write_bytes(b"x")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(minari, "create_dataset_from_buffers", disk_full)
    with pytest.raises(OSError, match="No space left"):
        run(_config(tmp_path, "r", record=str(tmp_path / "ds")))
    assert not (tmp_path / "ds" / "policysim-rec" / "egreedy-v0").exists()
    assert json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())["status"] == "failed"
    monkeypatch.setattr(minari, "create_dataset_from_buffers", real)
    resume(tmp_path / "runs" / "r", record=str(tmp_path / "ds"))
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "ds"))
    assert minari.load_dataset("policysim-rec/egreedy-v0").total_episodes == 2


def test_the_journal_is_checked_and_checkpoints_stay_small(tmp_path: Path) -> None:
    with pytest.raises(Boom):
        run(_config(tmp_path, "r"), on_round=_crash_after(3))
    folder = tmp_path / "runs" / "r"
    chunks = sorted((folder / ".resume").glob("logged-*.ckpt"))
    assert [c.name for c in chunks] == [
        f"logged-{i:09d}.ckpt" for i in range(3)
    ]  # one per checkpoint
    chunks[1].unlink()
    with pytest.raises(CheckpointError, match=r"the journal misses items 1..1"):
        resume(folder)


def test_checkpoint_size_does_not_grow_with_the_log(tmp_path: Path) -> None:
    sizes: list[int] = []

    def size(row: dict[str, Any]) -> None:
        sizes.append((tmp_path / "runs" / "long" / "checkpoint.ckpt").stat().st_size)

    config = _config(tmp_path, "long")
    config.env_kwargs = {**config.env_kwargs, "rounds": 8}
    config.seeds = (0,)
    run(config, on_round=size)
    assert max(sizes[2:]) < 1.2 * min(sizes[2:])  # the log (~contexts of every round) is not in it
