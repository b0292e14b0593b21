#!/usr/bin/env bash
# Issue 24 on a machine with many cores (the 16-core device machine): what more threads give to
# plain compute, random-row and streaming kernels, the thread scaling of a 1M-user round (in one
# process, then across fresh processes beside the memory floor), where it stops
# scaling phase by phase, the native vector env on 2-16 worker processes
# and a 1,000-user step on one core. Every file goes to OUT_DIR; nothing is published by this.
#
#     bash benchmarks/many_cores.sh OUT_DIR [MAX_THREADS]
#
# MAX_THREADS (default: the machine's core count, at most 16) caps the thread and worker counts.
# Environment: PYTHON (default python3), USERS (default 1000000: the size of the thread sweep),
# STEPS (default 2: timed steps per 1M process), STAGE_S (default 240: each stage is stopped after
# this many seconds) and TOTAL_S (default unlimited: the script's whole budget; a stage gets what
# is left of it, and one with under 20 s left is skipped), so the script always ends and what the
# finished stages wrote stays. It first compiles the numba kernels once into NUMBA_CACHE_DIR
# (default /tmp/policysim_numba_cache), so no measured process compiles. Last, within the budget,
# HF_TESTS=1 runs the hf backend's tests (on CUDA where torch sees a GPU; where the default
# encoder's wheel is not installed, POLICYSIM_TEST_ENCODER names a local sentence-transformers
# model for them) and HEAP=1 repeats the 1M sweep at 1 and MAX_THREADS threads with glibc's
# malloc keeping freed memory (the MALLOC_* variables of README's 'Large populations',
# env_throughput.py --heap keep).
set -uo pipefail
out=${1:?usage: bash benchmarks/many_cores.sh OUT_DIR [MAX_THREADS]}
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
users=${USERS:-1000000}
steps=${STEPS:-2}
stage_s=${STAGE_S:-240}
deadline=$((SECONDS + ${TOTAL_S:-1000000}))
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-${TMPDIR:-/tmp}/policysim_numba_cache} PYTHONUNBUFFERED=1
cores=$("$py" -c "import os; print(os.cpu_count())")
max=${2:-$((cores < 16 ? cores : 16))}
counts=""
for n in 1 2 4 8 16; do
  if [ "$n" -le "$max" ]; then counts="$counts $n"; fi
done
workers=${counts# 1}
phase_threads="1 2"
if [ "$max" -gt 2 ]; then phase_threads="1 2 $max"; fi
cd "$(dirname "$0")"
status=0
run() {
  local start=$SECONDS left=$((deadline - SECONDS))
  if [ "$left" -lt 20 ]; then echo "== skipped, ${left} s left: $*"; status=1; return; fi
  echo "== $*"
  timeout "$((left < stage_s ? left : stage_s))" "$@" || { echo "== failed or stopped (exit $?)"; status=1; }
  echo "== took $((SECONDS - start)) s"
}
"$py" -c "import os, platform, numba, numpy; print(f'cpus {os.cpu_count()}, python \
{platform.python_version()}, numpy {numpy.__version__}, numba {numba.__version__}')"
grep -m1 "model name" /proc/cpuinfo
# compile every kernel once, one-thread and threaded versions, before anything is timed
run env POLICYSIM_THREADS=2 NUMBA_NUM_THREADS=2 "$py" -c "
import numpy as np
from socialenv.core import kernels
from socialenv.envs.rec import RecEnv
for threads in (1, 2):
    kernels.set_threads(threads)
    env = RecEnv(num_users=60_000, rounds=3)
    env.reset(seed=0)
    for _ in range(2):
        env.step(np.random.default_rng(0).integers(0, env.num_arms + 1, env.slate_size))
import numba; print('numba threading layer:', numba.threading_layer())"
run "$py" core_scaling.py --threads $counts --quiet --out "$out/core_scaling.json"
run "$py" threads_in_process.py --users "$users" --threads $counts --rounds 3 --quiet \
  --out "$out/threads_in_process_1m.json"
run "$py" env_throughput.py --users "$users" --steps "$steps" --long-rounds 0 --repeats 1 \
  --threads $counts --quiet --out "$out/threads_1m.json"
run "$py" round_phases.py --users "$users" --threads $phase_threads --steps "$steps" --quiet \
  --out "$out/phases_1m.json"
run "$py" vector_env.py --num-envs 16 --modes native --workers $workers --repeats 2 --quiet \
  --out "$out/vector_workers.json"
run "$py" env_throughput.py --users 1000 --steps 200 --long-rounds 0 --repeats 3 --quiet \
  --out "$out/step_1k.json"
if [ "${HF_TESTS:-0}" = 1 ]; then
  run "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  run "$py" -m pytest -q -p no:cacheprovider --rootdir=.. ../tests/agent_models/test_llm_hf.py
fi
if [ "${HEAP:-0}" = 1 ]; then
  run "$py" env_throughput.py --users "$users" --steps "$steps" --long-rounds 0 --repeats 1 \
    --threads 1 "$max" --heap keep --quiet --out "$out/threads_1m_heap.json"
fi
exit $status
