"""The deep-RL newcomer's literal first line, with every Stable-Baselines3 default:
``PPO("MultiInputPolicy", make_vec_env(id, n_envs=2)).learn(2048)``. SB3's default
``n_steps=2048`` per env makes that one rollout of 4,096 transitions and its update (twice the
rollout ``benchmarks/rl_libraries.py`` times). One thread; peak RSS (``ru_maxrss``) and CPU time.

    python benchmarks/sb3_default_recipe.py --env PolicySim-Rec-v0 --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

from policysim_infra.progress import add_quiet_option


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="PolicySim-Rec-v0")
    parser.add_argument("--out", type=Path, required=True, help="results folder")
    add_quiet_option(parser)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    import socialenv  # noqa: F401  (registers the ids)

    wall, cpu = time.perf_counter(), time.process_time()
    model = PPO(
        "MultiInputPolicy",
        make_vec_env(args.env, n_envs=2),
        seed=0,
        device="cpu",
        verbose=0 if args.quiet else 1,
    )
    model.learn(2048)
    result = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "env_id": args.env,
        "timesteps": int(model.num_timesteps),
        "n_steps": model.n_steps,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.perf_counter() - wall,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"sb3_default_recipe_{args.env}.json"
    if path.exists():
        raise SystemExit(
            f"{path} exists: published results are not overwritten (choose another --out)"
        )
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
