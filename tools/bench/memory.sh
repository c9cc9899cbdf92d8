#!/usr/bin/env bash
# Memory and step time of training updates at transformer-big size (transformer_vaswani_wmt_en_de_big,
# shared 32k vocabulary, MAX_TOKENS target tokens of 32-token sentences per worker) on WORKERS Gloo
# workers of this host (one process per rank, TCP, the threads split between them), through the
# trainer as fairseq-cpp-train runs it (tools/bench/train_step.cpp): zero_sharding none, os and
# os_grad, each without and with activation checkpointing (model.checkpoint_activations), one
# setting after another. Per setting, the largest over the ranks: the median step time of the timed
# updates, the model state counted from its tensors against the formula (bytes per parameter:
# 24 unsharded, 16 + 8/N with os, 4 + 12/N with os_grad, and in bf16 the low-precision copies the
# trainer reports; docs/training.md#model-state-per-worker),
# the activations one forward pass and loss hold for backward, the peak resident set and the rest
# of it (peak minus model state); then each setting's step time against `none` with the same
# checkpointing.
#   tools/bench/memory.sh [BUILD_DIR] [PRECISION fp32|bf16] [MAX_TOKENS] [WORKERS] [ITERS] [CHECKPOINTING]
# CHECKPOINTING: "0 1" (default), or 0 or 1 alone (the settings without or with it only).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
precision=${2:-bf16}
max_tokens=${3:-2048}
workers=${4:-2}
iters=${5:-2}
read -r -a recomputes <<<"${6:-0 1}"
bench="$build/tools/bench/fsq_bench_train_step"
# Built by default only with LibTorch 2.x: built here on demand.
cmake --build "$build" --target fsq_bench_train_step >/dev/null ||
  { echo "memory: cannot build $bench: configure the project first (tools/setup.sh)" >&2; exit 2; }
case "$precision" in fp32 | bf16) ;; *) echo "memory: PRECISION is fp32 or bf16, not \`$precision'" >&2; exit 2 ;; esac
[ "$workers" -ge 1 ] 2>/dev/null || { echo "memory: WORKERS is a number of workers, not \`$workers'" >&2; exit 2; }
threads=$(($(nproc) / workers))
[ "$threads" -ge 1 ] || threads=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

port=$((29600 + RANDOM % 300))
for sharding in none os os_grad; do
  for recompute in "${recomputes[@]}"; do
    case "$recompute" in 0 | 1) ;; *) echo "memory: CHECKPOINTING is 0, 1 or \"0 1\", not \`$recompute'" >&2; exit 2 ;; esac
    port=$((port + 1))
    pids=()
    for rank in $(seq 0 $((workers - 1))); do
      "$bench" --cpu 1 --arch transformer_vaswani_wmt_en_de_big --vocab 32000 --max-tokens "$max_tokens" --len 32 \
        --iters "$iters" --warmup 1 --gemm 0 --threads "$threads" --bf16 "$([ "$precision" = bf16 ] && echo 1 || echo 0)" \
        --checkpoint-activations "$recompute" --workers "$workers" --rank "$rank" --port "$port" \
        --zero-sharding "$sharding" >"$work/$sharding-$recompute-$rank" 2>"$work/$sharding-$recompute-$rank.log" &
      pids+=($!)
    done
    for rank in "${!pids[@]}"; do
      wait "${pids[$rank]}" || {
        echo "memory: rank $rank of zero_sharding $sharding, checkpointing $recompute failed:" >&2
        cat "$work/$sharding-$recompute-$rank.log" >&2
        exit 1
      }
    done
  done
done

/usr/bin/python3 - "$work" "$workers" "$precision" "$max_tokens" "$threads" "$iters" "${recomputes[@]}" <<'PY'
import re, sys
work, n, precision, tokens, threads, iters = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
recomputes = [int(r) for r in sys.argv[7:]]
GIB = 2**30
rows = {}
for sharding in ("none", "os", "os_grad"):
    for recompute in recomputes:
        ranks = []
        for rank in range(n):
            text = open(f"{work}/{sharding}-{recompute}-{rank}").read()
            step = float(text.split("\n")[0].split()[4])
            m = re.search(r"model state ([\d.]+) \(weights ([\d.]+).*low-precision copies ([\d.]+)\), "
                          r"activations ([\d.]+), peak RSS ([\d.]+)", text)
            ranks.append((step, *map(float, m.groups())))
        rows[(sharding, recompute)] = tuple(max(r[i] for r in ranks) for i in range(6))
params = rows[("none", recomputes[0])][2] * GIB / 4  # float32 weights
formula = {"none": 24 if n > 1 else 16, "os": 16 + 8 / n, "os_grad": 4 + 12 / n} if n > 1 else {"none": 16, "os": 16, "os_grad": 16}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown CPU")
print(f"transformer_vaswani_wmt_en_de_big ({params / 1e6:.1f}M parameters), 32k shared vocabulary, {precision}, "
      f"{tokens} target tokens per worker, {n} Gloo workers x {threads} thread(s), {iters} timed updates, {cpu}")
print(f"{'zero_sharding':<14} {'checkpointing':<14} {'step s':>8} {'vs none':>8} {'model state GiB':>16} "
      f"{'formula GiB':>12} {'state/formula':>14} {'activations GiB':>16} {'peak RSS GiB':>13} {'rest GiB':>9}")
for (sharding, recompute), (step, state, weights, copies, act, peak) in rows.items():
    expected = formula[sharding] * params / GIB + copies  # bf16: the linear layers' copies (trainer.h)
    base = rows[("none", recompute)][0]
    print(f"{sharding:<14} {'yes' if recompute else 'no':<14} {step / 1000:>8.1f} {step / base:>7.2f}x {state:>16.2f} "
          f"{expected:>12.2f} {state / expected:>13.2f}x {act:>16.2f} {peak:>13.2f} {peak - state:>9.2f}")
PY
