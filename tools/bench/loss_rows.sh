#!/usr/bin/env bash
# The loss's chunks on the CPU through the row kernel (criterions/loss_rows.h: each row of logits
# read once, its gradient written once) against LibTorch's operators (the previous way,
# --loss-rows 0), in the Multi30k model's training update (tools/bench/train_step.cpp, --arch
# multi30k, 4,096 target tokens of 32-token sentences, 2 threads): PAIRS pairs of whole processes,
# the two ways in turn, in float32 and, on a CPU with bf16 products, in bf16. Prints per way the
# median step time and whole process, and the median of the pairs' ratios (operators / kernel).
#   tools/bench/loss_rows.sh [BUILD_DIR] [PAIRS] [ITERS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
pairs=${2:-5}
iters=${3:-6}
for n in "$pairs" "$iters"; do
  [ "$n" -ge 1 ] 2>/dev/null || { echo "loss_rows: PAIRS and ITERS are positive numbers, not \`$n'" >&2; exit 2; }
done
bench="$build/tools/bench/fsq_bench_train_step"
cmake --build "$build" --target fsq_bench_train_step >/dev/null ||
  { echo "loss_rows: cannot build $bench: configure the project first (tools/setup.sh)" >&2; exit 2; }
precisions=(0)
grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo && precisions+=(1)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for bf16 in "${precisions[@]}"; do
  for pair in $(seq "$pairs"); do
    for rows in 1 0; do
      name="$out/bf16-$bf16.rows-$rows.$pair"
      t0=$(date +%s.%N)
      OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4 "$bench" --cpu 1 --arch multi30k --max-tokens 4096 --len 32 \
        --iters "$iters" --warmup 1 --gemm 0 --threads 2 --bf16 "$bf16" --loss-rows "$rows" >"$name" 2>"$name.log" ||
        { echo "loss_rows: a run failed (bf16 $bf16, loss rows $rows):" >&2; cat "$name.log" >&2; exit 1; }
      echo "$t0 $(date +%s.%N)" >"$name.time"
    done
  done
done

/usr/bin/python3 - "$out" "$pairs" "$iters" "${precisions[@]}" <<'PY'
import statistics, sys
out, pairs, iters, precisions = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
def figures(bf16, rows, pair):
    base = f"{out}/bf16-{bf16}.rows-{rows}.{pair}"
    start, end = map(float, open(base + ".time").read().split())
    return float(open(base).read().split()[4]), end - start  # step ms (median of the process's), whole s
print(f"Multi30k model, 4,096 target tokens, 2 threads, 1 warm-up + {iters} updates a process, {pairs} pairs; {cpu}")
print(f"{'precision':<10} {'way':<22} {'step ms':>9} {'process s':>10} {'ratio (ops / kernel): step':>27} {'process':>8}")
for bf16 in precisions:
    runs = {rows: [figures(bf16, rows, p) for p in range(1, pairs + 1)] for rows in ("1", "0")}
    ratios = [[o[i] / k[i] for i in (0, 1)] for k, o in zip(runs["1"], runs["0"])]
    for rows, way in (("1", "row kernel"), ("0", "LibTorch's operators")):
        step = statistics.median(r[0] for r in runs[rows])
        whole = statistics.median(r[1] for r in runs[rows])
        ratio = "" if rows == "1" else f"{statistics.median(r[0] for r in ratios):26.3f}x {statistics.median(r[1] for r in ratios):7.3f}x"
        print(f"{'bf16' if bf16 == '1' else 'float32':<10} {way:<22} {step:9.1f} {whole:10.2f} {ratio}")
PY
