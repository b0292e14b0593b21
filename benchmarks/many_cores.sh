#!/usr/bin/env bash
# Issue 24 on a machine with many cores (the 16-core device machine): thread scaling of a 1M-user
# round, where it stops scaling phase by phase, the native vector env on 2-16 worker processes
# and a 1,000-user step on one core. Every file goes to OUT_DIR; nothing is published by this.
#
#     bash benchmarks/many_cores.sh OUT_DIR [MAX_THREADS]
#
# MAX_THREADS (default: the machine's core count, at most 16) caps the thread and worker counts.
set -uo pipefail
out=${1:?usage: bash benchmarks/many_cores.sh OUT_DIR [MAX_THREADS]}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cores=$(python -c "import os; print(os.cpu_count())")
max=${2:-$((cores < 16 ? cores : 16))}
counts=""
for n in 1 2 4 8 16; do
  if [ "$n" -le "$max" ]; then counts="$counts $n"; fi
done
workers=${counts# 1}
cd "$(dirname "$0")"
python - <<'EOF' | tee "$out/machine.txt"
import os, platform
import numba, numpy
print(f"cpus {os.cpu_count()}, {platform.processor() or platform.machine()}, "
      f"python {platform.python_version()}, numpy {numpy.__version__}, numba {numba.__version__}")
EOF
grep -m1 "model name" /proc/cpuinfo | tee -a "$out/machine.txt"
status=0
run() {
  echo "== $*"
  local start=$SECONDS
  "$@" || status=1
  echo "== took $((SECONDS - start)) s"
}
run python env_throughput.py --users 1000000 --steps 3 --long-rounds 0 --repeats 1 \
  --threads $counts --quiet --out "$out/threads_1m.json"
run python vector_env.py --num-envs 16 --modes native --workers $workers --repeats 2 --quiet \
  --out "$out/vector_workers.json"
phase_threads="1 2"
if [ "$max" -gt 2 ]; then phase_threads="1 2 $max"; fi
run python round_phases.py --users 1000000 --threads $phase_threads --steps 2 \
  --out "$out/phases_1m.json"
run python env_throughput.py --users 1000 --steps 200 --long-rounds 0 --repeats 3 --quiet \
  --out "$out/step_1k.json"
exit $status
