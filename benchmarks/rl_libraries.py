"""Peak memory and time of the standard deep-RL recipes on the PolicySim envs, one library per
fresh subprocess.

For every env id (with its default kwargs unless ``--kwargs`` says otherwise) and every
library, a new Python process builds two envs and trains for ``--steps`` env steps (one
rollout of ``--n-envs`` envs × ``steps / n_envs`` steps, then the library's update):

- ``sb3``: ``PPO("MultiInputPolicy", make_vec_env(id, n_envs=2), n_steps=steps // 2)``
  (stable-baselines3, its defaults otherwise);
- ``cleanrl``: a CleanRL-style single-file PPO (``ppo.py``'s defaults: 4 update epochs of 4
  minibatches, clipped surrogate, GAE, a two-layer tanh MLP of 64 on the flattened
  observation and a MultiDiscrete head of ``slate_size × (K + 1)`` logits);
- ``maskable``: sb3-contrib's ``MaskablePPO("MultiInputPolicy", ...)`` with the env's
  ``action_masks()``.

The parent polls each child's resident memory (``/proc/<pid>/status``) and stops it when it
passes ``--rss-limit-gib``; the child reports its own peak RSS (``ru_maxrss``), wall and CPU
time. Every child runs on one thread (``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``).
Results go to ``<out>/rl_libraries.json`` and ``<out>/rl_libraries.md``.

    python benchmarks/rl_libraries.py --out benchmarks/results/rl_libraries_<date>
    python benchmarks/rl_libraries.py --out /tmp/rl --libraries sb3 \\
        --kwargs 'PolicySim-Rec-v0={"candidate_users": 80}'
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from policysim_infra.progress import add_quiet_option, progress_bar

ENV_IDS = ("PolicySim-Rec-v0", "PolicySim-Exposure-v0", "PolicySim-Moderation-v0")
LIBRARIES = ("sb3", "cleanrl", "maskable")
GIB = 1024**3


# ---------------------------------------------------------------------------- child side
def _train_sb3(
    env_id: str, kwargs: dict[str, Any], steps: int, n_envs: int, maskable: bool
) -> None:
    from stable_baselines3.common.env_util import make_vec_env

    if maskable:
        from sb3_contrib import MaskablePPO as algorithm
    else:
        from stable_baselines3 import PPO as algorithm
    vec = make_vec_env(env_id, n_envs=n_envs, seed=0, env_kwargs=kwargs)
    model = algorithm("MultiInputPolicy", vec, n_steps=steps // n_envs, seed=0, device="cpu")
    model.learn(steps)


def _train_cleanrl(env_id: str, kwargs: dict[str, Any], steps: int, n_envs: int) -> None:
    """CleanRL's ``ppo.py`` (defaults: lr 2.5e-4 annealed, γ 0.99, λ 0.95, 4 minibatches,
    4 epochs, clip 0.2, entropy 0.01, value 0.5, grad-norm 0.5) on a flattened observation
    with a MultiDiscrete head (``ppo_multidiscrete.py``'s split into per-slot categoricals;
    every slot has K + 1 values, so the split is a reshape)."""
    import gymnasium as gym
    import numpy as np
    import torch
    from torch import nn
    from torch.distributions.categorical import Categorical

    import socialenv  # noqa: F401  (registers the ids)

    def make_env(index: int) -> Any:
        def thunk() -> gym.Env:
            env = gym.make(env_id, **kwargs)
            env = gym.wrappers.RecordEpisodeStatistics(env)
            return gym.wrappers.FlattenObservation(env)

        return thunk

    envs = gym.vector.SyncVectorEnv([make_env(i) for i in range(n_envs)])
    nvec = envs.single_action_space.nvec
    slots, values = len(nvec), int(nvec[0])
    obs_dim = int(np.prod(envs.single_observation_space.shape))

    def layer(fan_in: int, fan_out: int, std: float = float(np.sqrt(2))) -> nn.Linear:
        out = nn.Linear(fan_in, fan_out)
        nn.init.orthogonal_(out.weight, std)
        nn.init.constant_(out.bias, 0.0)
        return out

    class Agent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.critic = nn.Sequential(
                layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0)
            )
            self.actor = nn.Sequential(
                layer(obs_dim, 64),
                nn.Tanh(),
                layer(64, 64),
                nn.Tanh(),
                layer(64, slots * values, 0.01),
            )

        def value(self, x: torch.Tensor) -> torch.Tensor:
            return self.critic(x)

        def act(
            self, x: torch.Tensor, action: torch.Tensor | None = None
        ) -> tuple[torch.Tensor, ...]:
            dist = Categorical(logits=self.actor(x).view(-1, slots, values))
            if action is None:
                action = dist.sample()
            return action, dist.log_prob(action).sum(1), dist.entropy().sum(1), self.critic(x)

    torch.manual_seed(0)
    num_steps = steps // n_envs
    batch = num_steps * n_envs
    minibatch = batch // 4
    agent = Agent()
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    obs = torch.zeros((num_steps, n_envs, obs_dim))
    actions = torch.zeros((num_steps, n_envs, slots), dtype=torch.long)
    logprobs, rewards, dones, values_buf = (torch.zeros((num_steps, n_envs)) for _ in range(4))
    next_obs = torch.tensor(envs.reset(seed=0)[0], dtype=torch.float32)
    next_done = torch.zeros(n_envs)
    for step in range(num_steps):
        obs[step], dones[step] = next_obs, next_done
        with torch.no_grad():
            action, logprob, _, value = agent.act(next_obs)
        values_buf[step], actions[step], logprobs[step] = value.flatten(), action, logprob
        raw, reward, terminated, truncated, _ = envs.step(action.numpy())
        rewards[step] = torch.tensor(reward, dtype=torch.float32)
        next_obs = torch.tensor(raw, dtype=torch.float32)
        next_done = torch.tensor(np.logical_or(terminated, truncated), dtype=torch.float32)
    with torch.no_grad():
        next_value = agent.value(next_obs).reshape(1, -1)
        advantages = torch.zeros_like(rewards)
        last = torch.zeros(n_envs)
        for t in reversed(range(num_steps)):
            not_done = 1.0 - (next_done if t == num_steps - 1 else dones[t + 1])
            following = next_value if t == num_steps - 1 else values_buf[t + 1]
            delta = rewards[t] + 0.99 * following * not_done - values_buf[t]
            advantages[t] = last = delta + 0.99 * 0.95 * not_done * last
        returns = advantages + values_buf
    b_obs, b_actions = obs.reshape(batch, obs_dim), actions.reshape(batch, slots)
    b_logprobs, b_adv = logprobs.reshape(-1), advantages.reshape(-1)
    b_returns, b_values = returns.reshape(-1), values_buf.reshape(-1)
    order = np.arange(batch)
    for _epoch in range(4):
        np.random.default_rng(_epoch).shuffle(order)
        for start in range(0, batch, minibatch):
            idx = order[start : start + minibatch]
            _, new_logprob, entropy, new_value = agent.act(b_obs[idx], b_actions[idx])
            ratio = (new_logprob - b_logprobs[idx]).exp()
            adv = (b_adv[idx] - b_adv[idx].mean()) / (b_adv[idx].std() + 1e-8)
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
            v_loss = 0.5 * ((new_value.view(-1) - b_returns[idx]) ** 2).mean()
            loss = pg_loss - 0.01 * entropy.mean() + 0.5 * v_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            optimizer.step()
    del b_values


def child(
    library: str, env_id: str, kwargs: dict[str, Any], steps: int, n_envs: int
) -> dict[str, Any]:
    """Train one library on one env in this process; its peak RSS, wall and CPU time."""
    import gymnasium as gym
    import torch

    import socialenv  # noqa: F401

    torch.set_num_threads(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probe = gym.make(env_id, **kwargs).unwrapped
    sizing = [
        str(w.message) for w in caught if type(w.message).__name__ == "LargeActionSpaceWarning"
    ]
    record: dict[str, Any] = {
        "num_arms": int(probe.num_arms),
        "slate_size": int(probe.slate_size),
        "context_dim": int(probe.context_dim),
        "logits": int(probe.slate_size) * (int(probe.num_arms) + 1),
        "sizing_warning": sizing[0] if sizing else None,
    }
    del probe
    wall, cpu = time.perf_counter(), time.process_time()
    if library == "cleanrl":
        _train_cleanrl(env_id, kwargs, steps, n_envs)
    else:
        _train_sb3(env_id, kwargs, steps, n_envs, maskable=library == "maskable")
    record.update(
        wall_s=time.perf_counter() - wall,
        cpu_s=time.process_time() - cpu,
        peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB,
    )
    return record


# ---------------------------------------------------------------------------- parent side
def _rss_bytes(pid: int) -> tuple[int, int]:
    """(current, peak) resident set size of ``pid`` from /proc, 0 when it has gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    kib = {name: int(fields.get(name, "0 kB").split()[0]) for name in ("VmRSS", "VmHWM")}
    return kib["VmRSS"] * 1024, kib["VmHWM"] * 1024


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (from /proc), 0 when it has gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_one(
    library: str,
    env_id: str,
    kwargs: dict[str, Any],
    steps: int,
    n_envs: int,
    rss_limit: float,
    timeout: float,
) -> dict[str, Any]:
    """One (library, env, kwargs) in a fresh subprocess, stopped past the RSS limit or after
    ``timeout`` CPU seconds (CPU, not wall: a busy machine slows a run, it does not stop it)."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    command = [
        sys.executable,
        __file__,
        "--child",
        library,
        env_id,
        json.dumps(kwargs),
        str(steps),
        str(n_envs),
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    peak, status, cpu = 0, None, 0.0
    while proc.poll() is None:
        rss, hwm = _rss_bytes(proc.pid)
        peak, cpu = max(peak, hwm, rss), max(cpu, _cpu_seconds(proc.pid))
        if rss > rss_limit:
            status = "over_rss"
        elif cpu > timeout:
            status = "timeout"
        if status:
            proc.kill()
            break
        time.sleep(0.1)
    stdout, stderr = proc.communicate()
    record: dict[str, Any] = {
        "library": library,
        "env_id": env_id,
        "env_kwargs": kwargs,
        "steps": steps,
        "n_envs": n_envs,
    }
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if status is None and proc.returncode == 0 and lines:
        record.update(json.loads(lines[-1]))
        record["status"] = "ok" if record["peak_rss_gib"] * GIB <= rss_limit else "over_rss"
    else:
        record.update(
            status=status or "error",
            peak_rss_gib=peak / GIB,
            wall_s=time.perf_counter() - start,
            cpu_s_at_stop=cpu,
            error=stderr.strip().splitlines()[-1] if stderr.strip() else None,
        )
    return record


def _table(records: list[dict[str, Any]], limit_gib: float) -> str:
    head = (
        f"| env | kwargs | K | logits | library | status (≤ {limit_gib:g} GiB) | peak RSS GiB "
        "| CPU s | wall s |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for r in records:
        rows.append(
            f"| {r['env_id']} | {json.dumps(r['env_kwargs']) if r['env_kwargs'] else 'defaults'} "
            f"| {r.get('num_arms', '?')} | {r.get('logits', '?')} | {r['library']} | {r['status']} "
            f"| {r['peak_rss_gib']:.2f} | {r.get('cpu_s', float('nan')):.1f} | {r['wall_s']:.1f} |"
        )
    return head + "\n".join(rows) + "\n"


def parse_kwargs(items: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """``ID=JSON`` items as (env id, kwargs); an id may appear several times."""
    out = []
    for item in items:
        env_id, sep, text = item.partition("=")
        if not sep or env_id not in ENV_IDS:
            raise ValueError(f"--kwargs={item!r} is not allowed: ID=JSON with ID one of {ENV_IDS}")
        kwargs = json.loads(text)
        if not isinstance(kwargs, dict):
            raise ValueError(f"--kwargs={item!r} is not allowed: the JSON must be an object")
        out.append((env_id, kwargs))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="results folder")
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=LIBRARIES)
    parser.add_argument(
        "--envs",
        nargs="*",
        default=list(ENV_IDS),
        choices=ENV_IDS,
        help="env ids run with their default kwargs",
    )
    parser.add_argument(
        "--kwargs",
        action="append",
        default=[],
        metavar="ID=JSON",
        help="run ID with these kwargs instead of its defaults (repeatable)",
    )
    parser.add_argument("--steps", type=int, default=2048)
    parser.add_argument("--n-envs", type=int, default=2)
    parser.add_argument("--rss-limit-gib", type=float, default=4.0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="CPU seconds per run")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs at a time (each on one thread; CPU time and peak RSS are per run)",
    )
    add_quiet_option(parser)
    args = parser.parse_args(argv)
    configs = parse_kwargs(args.kwargs)
    given = {env_id for env_id, _ in configs}
    configs = [(env_id, {}) for env_id in args.envs if env_id not in given] + configs
    runs = [(lib, env_id, kw) for env_id, kw in configs for lib in args.libraries]
    args.out.mkdir(parents=True, exist_ok=True)
    import threading
    from concurrent.futures import ThreadPoolExecutor

    lock = threading.Lock()
    done: dict[int, dict[str, Any]] = {}
    bar = progress_bar(total=len(runs), unit="run", quiet=args.quiet)
    start = time.perf_counter()

    def one(index: int) -> None:
        library, env_id, kwargs = runs[index]
        record = run_one(
            library, env_id, kwargs, args.steps, args.n_envs, args.rss_limit_gib * GIB, args.timeout
        )
        with lock:
            write(index, record, library, env_id)

    def write(index: int, record: dict[str, Any], library: str, env_id: str) -> None:
        done[index] = record
        bar.set_description(
            f"{library} {env_id.removeprefix('PolicySim-')}: {done[index]['status']}"
        )
        bar.update()
        (args.out / "rl_libraries.json").write_text(
            json.dumps(
                {
                    "command": " ".join(
                        [
                            "python benchmarks/rl_libraries.py",
                            *(argv if argv is not None else sys.argv[1:]),
                        ]
                    ),
                    "rss_limit_gib": args.rss_limit_gib,
                    "jobs": args.jobs,
                    "total_wall_s": time.perf_counter() - start,
                    "total_cpu_s": sum(r.get("cpu_s", 0.0) for r in done.values()),
                    "records": [done[i] for i in sorted(done)],
                },
                indent=1,
            )
        )

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, range(len(runs))))
    bar.close()
    records = [done[i] for i in sorted(done)]
    table = _table(records, args.rss_limit_gib) + (
        f"\n{len(records)} runs: {sum(r.get('cpu_s', 0.0) for r in records) / 60:.1f} CPU minutes in the "
        f"finished runs, {(time.perf_counter() - start) / 60:.1f} minutes wall ({args.jobs} at a time)\n"
    )
    (args.out / "rl_libraries.md").write_text(table)
    print(table)
    return 0 if all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        lib, env_id, kw, steps, n_envs = sys.argv[2:7]
        print(json.dumps(child(lib, env_id, json.loads(kw), int(steps), int(n_envs))))
        sys.exit(0)
    sys.exit(main())
