#!/usr/bin/env bash
# bf16 training on a CPU without bf16 hardware (no AVX512_BF16 or AMX; refused elsewhere), where
# LibTorch multiplies bf16 in a scalar loop: the Multi30k model's update (tools/bench/train_step.cpp, --arch multi30k,
# TOKENS target tokens of 32-token sentences, 2 threads) three ways, RUNS whole processes each,
# interleaved: bf16 with its products widened to float32 (nn/widened_bf16.h, the default there),
# bf16 with LibTorch's own products (the previous way, --widen-bf16 0), and float32. Prints per
# way the median step time, the median whole process (model set-up, 1 warm-up and ITERS timed
# updates, and the benchmark's one forward pass that measures activations) and both against the
# widened bf16.
#   tools/bench/bf16_widened.sh [BUILD_DIR] [RUNS] [TOKENS] [ITERS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
runs=${2:-3}
tokens=${3:-1024}
iters=${4:-3}
bench="$build/tools/bench/fsq_bench_train_step"
for n in "$runs" "$tokens" "$iters"; do
  [ "$n" -ge 1 ] 2>/dev/null || { echo "bf16_widened: RUNS, TOKENS and ITERS are positive numbers, not \`$n'" >&2; exit 2; }
done
if grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo; then
  echo "bf16_widened: this CPU multiplies bf16 in hardware, where bf16 is not widened: nothing to compare" >&2
  exit 2
fi
cmake --build "$build" --target fsq_bench_train_step >/dev/null ||
  { echo "bf16_widened: cannot build $bench: configure the project first (tools/setup.sh)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

declare -A args=([widened]="--bf16 1" [libtorch]="--bf16 1 --widen-bf16 0" [fp32]="--bf16 0")
for run in $(seq "$runs"); do
  for way in widened libtorch fp32; do
    start=$(date +%s.%N)
    # shellcheck disable=SC2086  # the way's flags are words
    "$bench" --cpu 1 --arch multi30k --max-tokens "$tokens" --len 32 --iters "$iters" --warmup 1 --gemm 0 \
      --threads 2 ${args[$way]} >"$work/$way-$run" 2>"$work/$way-$run.log" ||
      { echo "bf16_widened: the $way run failed:" >&2; cat "$work/$way-$run.log" >&2; exit 1; }
    echo "$start $(date +%s.%N)" >"$work/$way-$run.time"
  done
done

/usr/bin/python3 - "$work" "$runs" "$tokens" "$iters" <<'PY'
import statistics, sys
work, runs, tokens, iters = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
rows = {}
for way in ("widened", "libtorch", "fp32"):
    step, whole = [], []
    for r in range(1, runs + 1):
        step.append(float(open(f"{work}/{way}-{r}").read().split()[4]))
        a, b = map(float, open(f"{work}/{way}-{r}.time").read().split())
        whole.append(b - a)
    rows[way] = (statistics.median(step), statistics.median(whole))
names = {"widened": "bf16, widened to float32", "libtorch": "bf16, LibTorch's products", "fp32": "float32"}
print(f"Multi30k model, {tokens} target tokens, 2 threads, 1 warm-up + {iters} updates, medians of {runs} processes; {cpu}")
print(f"{'way':<28} {'step ms':>9} {'process s':>10} {'step vs widened':>16} {'process vs widened':>19}")
w = rows["widened"]
for way, (step, whole) in rows.items():
    print(f"{names[way]:<28} {step:9.1f} {whole:10.2f} {step / w[0]:15.2f}x {whole / w[1]:18.2f}x")
PY
