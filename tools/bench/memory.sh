#!/usr/bin/env bash
# Memory and step time of a training update at transformer-big size (transformer_vaswani_wmt_en_de_big,
# shared 32k vocabulary, MAX_TOKENS target tokens of 32-token sentences), without and with
# activation checkpointing (model.checkpoint_activations), through the trainer as
# fairseq-cpp-train runs it (tools/bench/train_step.cpp, 2 threads, one process per run; the two
# settings alternate, PAIRS times). Per setting: the median step time over the runs' timed updates,
# the model state counted from its tensors, the activations one forward pass and loss hold for
# backward, and the peak resident set; then the ratios.
#   tools/bench/memory.sh [BUILD_DIR] [PRECISION fp32|bf16] [MAX_TOKENS] [PAIRS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
precision=${2:-bf16}
max_tokens=${3:-2048}
pairs=${4:-1}
bench="$build/tools/bench/fsq_bench_train_step"
[ -x "$bench" ] || { echo "memory: $bench is missing: build the project first (tools/setup.sh)" >&2; exit 2; }
case "$precision" in fp32 | bf16) ;; *) echo "memory: PRECISION is fp32 or bf16, not \`$precision'" >&2; exit 2 ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for pair in $(seq "$pairs"); do
  for recompute in 0 1; do
    "$bench" --cpu 1 --arch transformer_vaswani_wmt_en_de_big --vocab 32000 --max-tokens "$max_tokens" --len 32 \
      --iters 2 --warmup 1 --gemm 0 --threads 2 --bf16 "$([ "$precision" = bf16 ] && echo 1 || echo 0)" \
      --checkpoint-activations "$recompute" >"$work/run-$recompute-$pair"
  done
done

/usr/bin/python3 - "$work" "$pairs" "$precision" "$max_tokens" <<'PY'
import re, statistics, sys
work, pairs, precision, tokens = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {}
for recompute in (0, 1):
    steps, lines = [], []
    for pair in range(1, pairs + 1):
        text = open(f"{work}/run-{recompute}-{pair}").read()
        steps.append(float(text.split("\n")[0].split()[4]))
        lines.append(re.search(r"model state ([\d.]+).*activations ([\d.]+), peak RSS ([\d.]+)", text).groups())
    state, act, peak = (statistics.median(float(l[i]) for l in lines) for i in range(3))
    rows[recompute] = (statistics.median(steps), state, act, peak)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown CPU")
print(f"transformer_vaswani_wmt_en_de_big, 32k shared vocabulary, {precision}, {tokens} target tokens, "
      f"2 threads, {pairs} pair(s), {cpu}")
print(f"{'setting':<26} {'step ms':>9} {'model state GiB':>16} {'activations GiB':>16} {'peak RSS GiB':>13}")
for recompute, name in ((0, "plain"), (1, "checkpoint_activations")):
    step, state, act, peak = rows[recompute]
    print(f"{name:<26} {step:>9.0f} {state:>16.2f} {act:>16.2f} {peak:>13.2f}")
plain, ckpt = rows[0], rows[1]
print(f"checkpointing: activations {plain[2] / max(ckpt[2], 1e-9):.1f}x smaller, step time {ckpt[0] / plain[0]:.2f}x")
PY
