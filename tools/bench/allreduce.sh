#!/usr/bin/env bash
# All-reduce bandwidth of a float tensor between local processes over Gloo: fairseq-cpp's Gang
# against PyTorch's torch.distributed (Debian's python3-torch) in the same invocation, each run
# ROUNDS times; prints each run and the medians with their ratio.
#   tools/bench/allreduce.sh [BUILD_DIR] [ROUNDS]      (64 MiB, 2 processes, 10 iterations each)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
cmake --build "$build" --target fsq_bench_allreduce >/dev/null  # benchmarks are built on demand
rounds=${2:-3}
ours=() theirs=()
for _ in $(seq "$rounds"); do
  line=$("$build/tools/bench/fsq_bench_allreduce" --world-size 2 --mib 64 --iters 10 2>/dev/null)
  echo "$line"
  ours+=("$(sed -E 's/.*median=([0-9.]+) ms.*/\1/' <<<"$line")")
  line=$(/usr/bin/python3 "$root/tools/bench/allreduce_baseline.py" --world-size 2 --mib 64 --iters 10)
  echo "$line"
  theirs+=("$(sed -E 's/.*median=([0-9.]+) ms.*/\1/' <<<"$line")")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
m_ours=$(median "${ours[@]}")
m_theirs=$(median "${theirs[@]}")
echo
printf '%-14s %12s %12s\n' "64 MiB, 2 procs" "median ms" "GB/s (alg)"
printf '%-14s %12s %12.2f\n' "fairseq-cpp" "$m_ours" "$(awk -v t="$m_ours" 'BEGIN {print 67108864 / (t / 1000) / 1e9}')"
printf '%-14s %12s %12.2f\n' "pytorch" "$m_theirs" "$(awk -v t="$m_theirs" 'BEGIN {print 67108864 / (t / 1000) / 1e9}')"
printf 'time ratio fairseq-cpp / pytorch: %.2f\n' "$(awk -v a="$m_ours" -v b="$m_theirs" 'BEGIN {print a / b}')"
