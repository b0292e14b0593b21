"""Hardening probe: the one-line reproductions of issue 21, each classified by outcome.

    python benchmarks/hardening_probe.py --out runs/hardening_probe

Every case feeds one hostile or damaged input (a checkpoint choosing an endpoint, a YAML
bomb, a zip bomb, a torn replay cache, a misused gym API...) to the public API and records
what happened: ``clear_error`` (a ValueError, FileNotFoundError or, for gym-API misuse, a
RuntimeError, whose message names the file or the field), ``tolerated`` (the case expects
the input to be accepted, e.g. a torn last cache line in auto mode), ``accepted`` (no error
where one was expected: silently accepted), ``crash`` (any other exception, from deep
inside), ``timeout`` (more than ``--timeout`` seconds of CPU: CPU exhaustion) or
``memory`` (a MemoryError under the ``--memory-gib`` address-space limit), and whether a
secret was sent or a file was written where the input chose. The expected result is zero in
every column but ``clear_error`` / ``tolerated``. Writes ``hardening_probe.json`` and
``hardening_probe.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import signal
import sys
import tempfile
import time
import traceback
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from policysim_infra.progress import add_quiet_option, progress_bar

CASES: dict[str, tuple[Callable[[Path], Any], str]] = {}


def case(
    name: str, expect: str = "error"
) -> Callable[[Callable[[Path], Any]], Callable[[Path], Any]]:
    def add(fn: Callable[[Path], Any]) -> Callable[[Path], Any]:
        CASES[name] = (fn, expect)
        return fn

    return add


# ------------------------------------------------------------------ helpers
def _saved_env(tmp: Path, env_id: str = "PolicySim-Rec-v0") -> Path:
    import gymnasium as gym

    import socialenv  # noqa: F401

    env = gym.make(env_id, num_users=50, rounds=4)
    env.reset(seed=1)
    env.step(np.full(env.unwrapped.slate_size, env.unwrapped.no_op))
    return env.unwrapped.save(tmp / f"{env_id}.ckpt")


def _rewrite(path: Path, out: Path, edit: Callable[[str, bytes], bytes]) -> Path:
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, edit(name, src.read(name)))
    return out


def _plant_llm(tmp: Path, **llm: Any) -> Path:
    def edit(name: str, data: bytes) -> bytes:
        if name != "meta.json":
            return data
        meta = json.loads(data)
        meta["tree"]["config"]["fields"]["llm"] = {"backend": "openai", "model": "m", **llm}
        meta["tree"]["config"]["fields"]["users"] = "llm"
        return json.dumps(meta).encode()

    return _rewrite(_saved_env(tmp), tmp / "planted.ckpt", edit)


def _load_and_step(path: Path) -> None:
    from socialenv import load_env

    env = load_env(path)
    env.step(np.full(env.slate_size, env.no_op))


def _events(tmp: Path, text: str | bytes, suffix: str = ".yaml") -> None:
    from socialenv.mechanisms.events import load_events

    path = tmp / f"events{suffix}"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    load_events(path)


def _logged(tmp: Path) -> Path:
    from bandits.ope import RoundLogger

    rng = np.random.default_rng(0)
    logger = RoundLogger()
    logger.start_episode()
    for _ in range(6):
        logger.add(
            rng.normal(size=(8, 3)).astype(np.float32),
            np.ones(8, bool),
            np.array([1, 2]),
            np.array([0.25, 0.25]),
            "exact",
            np.array([1.0, 0.0]),
            np.ones(2, bool),
        )
    return logger.rounds().save(tmp / "logged_rounds.npz")


def _replace_member(path: Path, out: Path, name: str, raw: bytes) -> Path:
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for member in src.namelist():
            dst.writestr(member, raw if member == f"{name}.npy" else src.read(member))
        if f"{name}.npy" not in src.namelist():
            dst.writestr(f"{name}.npy", raw)
    return out


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _huge_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_2_0(
        buf, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return buf.getvalue() + b"\0" * 64


# ------------------------------------------------------------------ High 1: a file chooses
@case("ckpt_base_url")
def _(tmp: Path) -> None:
    _load_and_step(_plant_llm(tmp, base_url=["http://127.0.0.1:9"]))


@case("ckpt_api_key_env")
def _(tmp: Path) -> None:
    os.environ["PROBE_SECRET"] = "probe-secret-value"
    _load_and_step(_plant_llm(tmp, base_url=["http://127.0.0.1:9"], api_key_env="PROBE_SECRET"))


@case("ckpt_replay_record")
def _(tmp: Path) -> None:
    _load_and_step(
        _plant_llm(tmp, backend="hf", replay=str(tmp / "chosen.jsonl"), replay_mode="record")
    )


@case("ckpt_toxicity_code")
def _(tmp: Path) -> None:
    _load_and_step(_plant_llm(tmp, backend="hf", toxicity="antigravity:fly"))


# ------------------------------------------------------------------ High 2: event files
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


@case("yaml_billion_laughs_headline")
def _(tmp: Path) -> None:
    _events(tmp, LAUGHS + "events: [{kind: news, headline: *i, round: 1}]\n")


@case("yaml_billion_laughs_then")
def _(tmp: Path) -> None:
    _events(tmp, LAUGHS + "events: [{kind: news, headline: x, round: 1, then: *i}]\n")


@case("yaml_self_alias")
def _(tmp: Path) -> None:
    _events(tmp, "events:\n- &e {kind: news, headline: x, round: 1, then: [*e]}\n")


@case("json_100k_deep")
def _(tmp: Path) -> None:
    _events(tmp, "[" * 100_000 + "]" * 100_000, ".json")


@case("yaml_100k_deep")
def _(tmp: Path) -> None:
    _events(tmp, "[" * 100_000 + "]" * 100_000)


@case("grid_billion_laughs")
def _(tmp: Path) -> None:
    from policysim.sweep import load_grid

    path = tmp / "grid.yaml"
    path.write_text(LAUGHS + "parameters: {policy: {values: *i}}\n")
    load_grid(path)


@case("events_misspelt_key")
def _(tmp: Path) -> None:
    _events(tmp, "evnts:\n- {kind: news, headline: x, round: 1}\n")


@case("events_list_headline")
def _(tmp: Path) -> None:
    _events(tmp, "- {kind: news, headline: [a, b], round: 1}\n")


@case("events_nan_threshold")
def _(tmp: Path) -> None:
    _events(tmp, "- {kind: news, headline: x, when: {metric: toxicity, above: .nan}}\n")


@case("events_unknown_metric_at_make")
def _(tmp: Path) -> None:
    import gymnasium as gym

    import socialenv  # noqa: F401

    gym.make(
        "PolicySim-Rec-v0",
        num_users=50,
        rounds=2,
        events=[{"kind": "news", "headline": "x", "when": {"metric": "nope", "above": 0}}],
    )


@case("events_latin1")
def _(tmp: Path) -> None:
    _events(
        tmp, '[{"kind": "news", "headline": "caf\u00e9", "round": 1}]'.encode("latin-1"), ".json"
    )


@case("events_bad_yaml")
def _(tmp: Path) -> None:
    _events(tmp, "- {kind: news, headline: x, round: 1\n")


# ------------------------------------------------------------------ Medium 7 and Low: arrays
@case("logged_huge_header")
def _(tmp: Path) -> None:
    from bandits.ope import LoggedRounds

    LoggedRounds.load(
        _replace_member(_logged(tmp), tmp / "bad.npz", "contexts", _huge_header((10**7, 10**6, 1)))
    )


@case("logged_zip_bomb")
def _(tmp: Path) -> None:
    from bandits.ope import LoggedRounds

    path = _logged(tmp)
    out = tmp / "bomb.npz"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for member in src.namelist():
            if member != "contexts.npy":
                dst.writestr(member, src.read(member))
        with dst.open(
            "contexts.npy", "w", force_zip64=True
        ) as fh:  # 700 MB of zeros, ~0.7 MB on disk
            np.lib.format.write_array_header_2_0(
                fh,
                {"descr": "<f4", "fortran_order": False, "shape": (6, 8, 700 * 2**20 // 4 // 48)},
            )
            block = bytes(1 << 24)
            for _ in range(700 * 2**20 // len(block)):
                fh.write(block)
    LoggedRounds.load(out)


@case("logged_unknown_member")
def _(tmp: Path) -> None:
    from bandits.ope import LoggedRounds

    LoggedRounds.load(_replace_member(_logged(tmp), tmp / "bad.npz", "payload", _npy(np.zeros(3))))


@case("logged_missing_member")
def _(tmp: Path) -> None:
    from bandits.ope import LoggedRounds

    path = _logged(tmp)
    out = tmp / "missing.npz"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for member in src.namelist():
            if member != "rewards.npy":
                dst.writestr(member, src.read(member))
    LoggedRounds.load(out)


@case("logged_nan_rewards")
def _(tmp: Path) -> None:
    from bandits.ope import LoggedRounds

    LoggedRounds.load(
        _replace_member(
            _logged(tmp), tmp / "nan.npz", "rewards", _npy(np.full((6, 2), np.nan, np.float32))
        )
    )


@case("logged_truncated")
def _(tmp: Path) -> None:
    from bandits.ope import LoggedRounds

    path = _logged(tmp)
    path.write_bytes(path.read_bytes()[:-100])
    LoggedRounds.load(path)


@case("scenario_huge_header")
def _(tmp: Path) -> None:
    from socialenv import make_scenario
    from socialenv.scenarios.scenario import Scenario

    path = make_scenario("abortion", 50, seed=0).save(tmp / "s")
    out = _replace_member(path, tmp / "t.npz", "latent", _huge_header((10**7, 10**6), "<f8"))
    out.with_suffix(".json").write_text(path.with_suffix(".json").read_text())
    Scenario.load(out)


@case("ckpt_huge_header")
def _(tmp: Path) -> None:
    _load_and_step(
        _rewrite(
            _saved_env(tmp),
            tmp / "h.ckpt",
            lambda n, d: _huge_header((10**7, 10**6), "<f8") if n == "a0.npy" else d,
        )
    )


@case("ckpt_crc")
def _(tmp: Path) -> None:
    path = _saved_env(tmp)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("a3.npy")
    data[info.header_offset + 30 + len(info.filename) + info.file_size - 1] ^= 0xFF
    path.write_bytes(bytes(data))
    _load_and_step(path)


@case("ckpt_nan_stance")
def _(tmp: Path) -> None:
    path = _saved_env(tmp)
    key = json.loads(zipfile.ZipFile(path).read("meta.json"))["tree"]["sim"]["users"]["stance"][
        "__array__"
    ]
    _load_and_step(
        _rewrite(
            path,
            tmp / "n.ckpt",
            lambda n, d: (
                _npy(np.full_like(np.load(io.BytesIO(d)), np.nan)) if n == f"{key}.npy" else d
            ),
        )
    )


@case("ckpt_round_minus_5")
def _(tmp: Path) -> None:
    def edit(name: str, data: bytes) -> bytes:
        if name != "meta.json":
            return data
        meta = json.loads(data)
        meta["tree"]["sim"]["round"] = -5
        return json.dumps(meta).encode()

    _load_and_step(_rewrite(_saved_env(tmp), tmp / "r.ckpt", edit))


@case("ckpt_wrong_env_class")
def _(tmp: Path) -> None:
    from socialenv.envs.rec import RecEnv

    RecEnv.load(_saved_env(tmp, "PolicySim-Exposure-v0"))


# ------------------------------------------------------------------ Low: replay cache
def _cache(tmp: Path) -> tuple[Path, list, Any]:
    from agent_models.llm import Sampling
    from agent_models.llm.backends.base import Backend, Generation

    class Scripted(Backend):
        name = "scripted"

        def generate(self, prompts: Any, schemas: Any = None, sampling: Any = None) -> Generation:
            n = len(prompts)
            return Generation(
                [f"a{i}" for i in range(n)],
                np.zeros(n, np.int64),
                np.zeros(n, np.int64),
                ["stop"] * n,
            )

    from agent_models.llm.backends.replay import ReplayBackend

    cache = tmp / "c.jsonl"
    prompts = [[{"role": "user", "content": f"hello {i}"}] for i in range(3)]
    sampling = Sampling(temperature=1.0, max_new_tokens=8, seed=5)
    ReplayBackend(cache, "record", "m", Scripted()).generate(prompts, None, sampling)
    return cache, prompts, sampling


def _replay(cache: Path, prompts: list, sampling: Any, mode: str = "replay") -> None:
    from agent_models.llm.backends.replay import ReplayBackend

    ReplayBackend(cache, mode, "m").generate(prompts, None, sampling)


for _line, _name in (
    (b"[1, 2]", "list"),
    (b'{"key": 3}', "int_key"),
    (b'{"meta": 1}', "meta"),
    (b'{"text": "x"}', "no_key"),
):

    def _shape(tmp: Path, line: bytes = _line) -> None:
        cache, prompts, sampling = _cache(tmp)
        cache.write_bytes(cache.read_bytes() + line + b"\n")
        _replay(cache, prompts, sampling)

    case(f"replay_wrong_shape_{_name}")(_shape)


@case("replay_invalid_utf8")
def _(tmp: Path) -> None:
    cache, prompts, sampling = _cache(tmp)
    cache.write_bytes(cache.read_bytes() + b'{"key": "\xff\xfe"}\n')
    _replay(cache, prompts, sampling)


@case("replay_torn_last_line", expect="ok")
def _(tmp: Path) -> None:
    cache, prompts, sampling = _cache(tmp)
    cache.write_bytes(cache.read_bytes() + b'{"key": "abc", "messa')
    _replay(cache, prompts, sampling, "replay")


@case("replay_entry_not_its_key")
def _(tmp: Path) -> None:
    cache, prompts, sampling = _cache(tmp)
    lines = cache.read_text().splitlines()
    record = json.loads(lines[1])
    record["messages"] = [{"role": "user", "content": "other"}]
    lines[1] = json.dumps(record)
    cache.write_text("\n".join(lines) + "\n")
    _replay(cache, prompts, sampling)


# ------------------------------------------------------------------ Low: answer parser, gym, loaders, plugins
for _bad in (True, "1_0", "+10", " 10"):

    def _parser(tmp: Path, bad: Any = _bad) -> None:
        from agent_models.llm.schema import FeedView, parse_answer

        view = FeedView(user=0, post_ids=[1, 10], post_authors=[2, 3], followed=[False, False])
        got = parse_answer(
            json.dumps({"actions": [{"type": "like", "post_id": bad}]}),
            view,
            max_actions=2,
            max_text_chars=20,
            behaviours=("like",),
        )
        if isinstance(got, str):
            raise ValueError(f"post_id={bad!r}: rejected as {got!r}")

    case(f"parser_post_id_{_bad!r}")(_parser)


def _gym(**kw: Any) -> Any:
    import gymnasium as gym

    import socialenv  # noqa: F401

    return gym.make("PolicySim-Rec-v0", num_users=50, rounds=2, **kw).unwrapped


@case("gym_reset_unknown_options")
def _(tmp: Path) -> None:
    _gym().reset(seed=0, options={"nosuch": 1})


@case("gym_reset_seed_true")
def _(tmp: Path) -> None:
    _gym().reset(seed=True)


@case("gym_step_after_close")
def _(tmp: Path) -> None:
    env = _gym()
    env.reset(seed=0)
    env.close()
    env.step(np.full(env.slate_size, env.no_op))


@case("gym_complex_scores")
def _(tmp: Path) -> None:
    env = _gym(action_format="scores")
    env.reset(seed=0)
    env.step(np.ones(env.num_arms) + 1j)


@case("weibo_1e309")
def _(tmp: Path) -> None:
    import shutil

    from socialenv.scenarios.loaders import LoaderConfig, read_weibo

    root = tmp / "weibo"
    shutil.copytree(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "weibo", root)
    posts = json.loads((root / "Weibo" / "E2.json").read_text())
    posts[0]["followers_count"] = 1e309
    (root / "Weibo" / "E2.json").write_text(json.dumps(posts))
    read_weibo(root, config=LoaderConfig(encoder="hash"))


@case("plugin_fails_to_import")
def _(tmp: Path) -> None:
    import warnings

    from policysim_infra import plugins

    (tmp / "probe_broken_plugin.py").write_text("raise RuntimeError('broken')\n")
    sys.path.insert(0, str(tmp))
    os.environ[plugins.PLUGINS_ENV_VAR] = "probe_broken_plugin"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter(
                "error"
            )  # a warning alone would let the run go on without the plugin
            plugins.load_plugins()
    finally:
        del os.environ[plugins.PLUGINS_ENV_VAR]
        sys.path.remove(str(tmp))


# ------------------------------------------------------------------ Medium 5: run folders
@case("run_name_overwrites_a_finished_run")
def _(tmp: Path) -> None:
    from policysim.runner import RunConfig, run

    def config() -> RunConfig:
        return RunConfig(
            policy="random",
            env_kwargs={"num_users": 50, "rounds": 2},
            out_dir=str(tmp),
            run_name="taken",
            progress=False,
            plots=False,
        )

    run(config())
    run(config())


def classify(name: str, fn: Callable[[Path], Any], expect: str, timeout: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as root:
        tmp = Path(root)
        start = time.process_time()
        outcome, message = "accepted", ""

        def alarm(signum: int, frame: Any) -> None:
            raise TimeoutError(f"more than {timeout} s")

        signal.signal(signal.SIGALRM, alarm)
        signal.alarm(timeout)
        try:
            fn(tmp)
            outcome = "tolerated" if expect == "ok" else "accepted"
        except TimeoutError as err:
            outcome, message = "timeout", str(err)
        except MemoryError as err:
            outcome, message = "memory", f"MemoryError: {err}"
        except (ValueError, FileNotFoundError, RuntimeError) as err:
            message = f"{type(err).__name__}: {err}"
            runtime_ok = isinstance(err, RuntimeError) and name.startswith("gym_")
            clear = (not isinstance(err, RuntimeError) or runtime_ok) and type(
                err
            ).__name__ not in (
                "BadZipFile",
                "JSONDecodeError",
                "UnicodeDecodeError",
                "RecursionError",
            )
            outcome = "clear_error" if clear and expect != "ok" else "crash"
        except Exception as err:  # noqa: BLE001 - the probe classifies every failure
            outcome, message = (
                "crash",
                f"{type(err).__name__}: {err} @ {traceback.format_exc(limit=-1).strip()[-200:]}",
            )
        finally:
            signal.alarm(0)
        written = sorted(p.name for p in tmp.glob("chosen*"))
        secret_leaked = "probe-secret-value" in message
        return {
            "case": name,
            "expect": expect,
            "outcome": outcome,
            "cpu_seconds": round(time.process_time() - start, 3),
            "file_written": written,
            "secret_in_message": secret_leaked,
            "message": message[:300],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="results folder")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per case")
    parser.add_argument(
        "--memory-gib", type=float, default=4.0, help="address-space limit of the probe"
    )
    parser.add_argument("--only", nargs="*", help="case names to run (default: all)")
    add_quiet_option(parser)
    args = parser.parse_args()
    chosen = [
        (name, fn, expect)
        for name, (fn, expect) in CASES.items()
        if not args.only or name in args.only
    ]
    bar = progress_bar(chosen, unit="case", quiet=args.quiet)
    limit = int(args.memory_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    results = [classify(name, fn, expect, args.timeout) for name, fn, expect in bar]
    columns = ("clear_error", "tolerated", "accepted", "crash", "timeout", "memory")
    totals = {c: sum(r["outcome"] == c for r in results) for c in columns}
    totals["file_written"] = sum(bool(r["file_written"]) for r in results)
    totals["secret_in_message"] = sum(r["secret_in_message"] for r in results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hardening_probe.json").write_text(
        json.dumps({"totals": totals, "cases": results}, indent=2)
    )
    lines = ["| case | outcome | CPU s | message |", "|---|---|---|---|"]
    lines += [
        f"| {r['case']} | {r['outcome']} | {r['cpu_seconds']} | {r['message'][:120].replace('|', '/')} |"
        for r in results
    ]
    (args.out / "hardening_probe.md").write_text(
        "\n".join(lines) + "\n\n" + json.dumps(totals) + "\n"
    )
    print("\n".join(lines))
    print(totals)


if __name__ == "__main__":
    main()
