"""SHA-256 digests of env trajectories, to check that a speed change leaves results bit-identical.

    python benchmarks/trajectory_digest.py                       # print the digests
    python benchmarks/trajectory_digest.py --out runs/digest.json
    python benchmarks/trajectory_digest.py --check runs/digest.json   # exit 1 on any difference

For each case (env, population, policy) it runs one seeded episode and hashes every array of
every observation, the rewards, the slates and every ``info`` entry (metrics included), round
by round. Two code versions produce the same digest iff their trajectories are bit for bit
the same. ``POLICYSIM_KERNELS`` selects compiled or NumPy kernels (see socialenv.core.kernels).

Digests depend on the NumPy/numba versions as well as the code (floating-point reductions and
sorts change between releases), and on the CPU: OpenBLAS picks its kernels by the CPU it finds
and NumPy its SIMD loops (AVX-512 or not), and both round differently. ``--out`` records the
versions under ``"versions"`` and the BLAS kernels and NumPy SIMD extensions under
``"numerics"``; ``--check`` says when they differ from the ones it runs with, and gives the
settings that make this machine use the reference's kernels (``OPENBLAS_CORETYPE``,
``NPY_DISABLE_CPU_FEATURES``). Otherwise regenerate the reference from the code before a
change, on this machine, and compare against that.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from policysim_infra.progress import add_quiet_option, progress_bar  # noqa: E402

#: (name, env class, users, rounds, policy) of each case.
CASES: tuple[tuple[str, str, int, int, str], ...] = (
    ("rec_1k_noop", "rec", 1_000, 10, "noop"),
    ("rec_1k_random", "rec", 1_000, 10, "random"),
    ("rec_1k_scores", "rec", 1_000, 10, "scores"),
    ("exposure_1k_random", "exposure", 1_000, 10, "random"),
    ("rec_24k_random", "rec", 24_000, 3, "random"),
    ("rec_60k_random", "rec", 60_000, 3, "random"),
    ("rec_200k_random", "rec", 200_000, 2, "random"),
)


def _update(h: Any, value: Any) -> None:
    if isinstance(value, dict):
        for key in sorted(value):
            h.update(str(key).encode())
            _update(h, value[key])
    elif isinstance(value, list | tuple):
        for item in value:
            _update(h, item)
    else:
        arr = np.asarray(value)
        h.update(str(arr.dtype).encode() + str(arr.shape).encode())
        h.update(np.ascontiguousarray(arr).tobytes())


def episode_digest(env_name: str, users: int, rounds: int, policy: str, seed: int = 7) -> list[str]:
    """Per-round SHA-256 hex digests of one episode (index 0 = the reset)."""
    from socialenv.envs.exposure import ExposureEnv
    from socialenv.envs.rec import RecEnv

    cls = RecEnv if env_name == "rec" else ExposureEnv
    kwargs: dict[str, Any] = {"num_users": users, "rounds": rounds}
    if policy == "scores":
        kwargs["action_format"] = "scores"
    env = cls(**kwargs)
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    digests = []
    h = hashlib.sha256()
    _update(h, [obs, info])
    digests.append(h.hexdigest())
    for _ in range(rounds):
        if policy == "noop":
            action = np.full(env.slate_size, env.no_op, np.int64)
        elif policy == "random":
            action = rng.integers(0, env.num_arms + 1, env.slate_size)
        else:
            action = rng.uniform(-1, 1, env.num_arms).astype(np.float32)
        obs, reward, terminated, truncated, info = env.step(action)
        h = hashlib.sha256()
        _update(h, [obs, reward, terminated, truncated, info])
        digests.append(h.hexdigest())
    env.close()
    return digests


def library_versions() -> dict[str, str]:
    """Versions of the libraries whose numerics the digests depend on."""
    import numba

    return {"numpy": np.__version__, "numba": numba.__version__}


def machine_numerics() -> dict[str, Any]:
    """The kernels this process computes with: each BLAS library's name, version and the CPU
    architecture it chose (threadpoolctl), and the SIMD targets NumPy dispatches to beyond its
    baseline (those this CPU has and ``NPY_DISABLE_CPU_FEATURES`` leaves on)."""
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    from threadpoolctl import threadpool_info

    return {
        "blas": sorted(
            f"{lib.get('internal_api')} {lib.get('version')} {lib.get('architecture')}"
            for lib in threadpool_info()
            if lib.get("user_api") == "blas"
        ),
        "numpy_simd": [name for name in __cpu_dispatch__ if __cpu_features__.get(name)],
    }


def numerics_note(saved: dict[str, Any] | None, now: dict[str, Any]) -> str | None:
    """What differs between the kernels a reference was written with and this run's, and the
    settings to emulate the reference's here; None when they are the same."""
    if saved == now:
        return None
    if saved is None:
        return "the reference does not record its CPU kernels (BLAS, NumPy SIMD)"
    lines = [f"the reference was written with kernels {saved}, this run uses {now}"]
    architectures = {entry.rsplit(" ", 1)[-1] for entry in saved.get("blas", [])}
    extra = sorted(set(now.get("numpy_simd", [])) - set(saved.get("numpy_simd", [])))
    settings = []
    if len(architectures) == 1 and saved.get("blas") != now.get("blas"):
        settings.append(f"OPENBLAS_CORETYPE={architectures.pop()}")
    if extra:
        settings.append(f"NPY_DISABLE_CPU_FEATURES='{' '.join(extra)}'")
    if settings:
        lines.append("to compare on this machine, rerun with " + " ".join(settings))
    return "; ".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--check", type=Path, default=None, help="compare with a saved digest file")
    parser.add_argument("--cases", nargs="+", default=None, help="subset of case names")
    add_quiet_option(parser)
    args = parser.parse_args()
    result: dict[str, list[str]] = {}
    for name, env_name, users, rounds, policy in progress_bar(CASES, unit="case", quiet=args.quiet):
        if args.cases and name not in args.cases:
            continue
        result[name] = episode_digest(env_name, users, rounds, policy)
        print(f"{name:>20}: {result[name][-1][:16]}", flush=True)
    versions, numerics = library_versions(), machine_numerics()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"versions": versions, "numerics": numerics, **result}, indent=1)
        )
    if args.check:
        saved = json.loads(args.check.read_text())
        if saved.get("versions", versions) != versions:
            print(
                f"note: {args.check} was written with {saved.get('versions')}, this run uses {versions}"
            )
        note = numerics_note(saved.get("numerics"), numerics)
        if note:
            print(f"note: {note}")
        bad = [name for name in result if saved.get(name) != result[name]]
        for name in bad:
            first = next(
                (
                    i
                    for i, (a, b) in enumerate(zip(saved.get(name, []), result[name], strict=False))
                    if a != b
                ),
                None,
            )
            print(f"DIFFERENT: {name} (first differing round index {first})")
        if bad:
            raise SystemExit(1)
        print("identical to", args.check)


if __name__ == "__main__":
    main()
