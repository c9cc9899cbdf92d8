#!/usr/bin/env bash
# bf16 on this machine's CPU against float32 (issue 37's figures), on 2 threads, whole processes:
#   1. training: the Multi30k preset (configs/multi30k_transformer_small.yaml on the fairseq v0.9
#      fixture's data-bin), UPDATES updates, fp32 and bf16 (common.bf16) in PAIRS interleaved pairs:
#      whole-process seconds and words/s over updates 6.. (the warm-up left out), the ratio being
#      the median of the pairs' ratios;
#   2. one update of the same model at 4,096 target tokens (fsq_bench_train_step, median of 5)
#      against a 2048^3 matrix product in the same precision: the share of the GEMM-bound ceiling,
#      and with LibTorch 2.x the profile of 2 more (LOGDIR/profile-PRECISION.txt);
#   3. generation with the fixture checkpoint (test, 1,000 sentences, beam 5, batch 128) in float32,
#      --bf16 and --quantize int8: sentences/s and sacreBLEU against the references.
# On a CPU with bf16 products (AVX512_BF16 or AMX-BF16) bf16 training runs on them; elsewhere it
# widens bf16's products to float32 (nn/widened_bf16). Generation's --bf16 needs AVX512_BF16 and is
# refused elsewhere (its row says so). The GPU run (tools/gpu/run.sh) calls this on the GPU machine's CPU, beside its GPU steps.
#
#   tools/bench/cpu_bf16.sh BUILD_DIR LOGDIR [UPDATES] [PAIRS]     (default 40 updates, 2 pairs)
# Environment: CORES (a taskset list, e.g. 14,15: every process pinned there), PYTHON (a Python with
# torch, for the fixture's import; default: .venv/bin/python, else a python3 with torch), FSQ_SHARED (the fixture).
# Prints a table; LOGDIR/cpu-bf16.rows gets one "step|result" line per row (for run.sh's record).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:?usage: tools/bench/cpu_bf16.sh BUILD_DIR LOGDIR [UPDATES] [PAIRS]}
logs=${2:?usage: tools/bench/cpu_bf16.sh BUILD_DIR LOGDIR [UPDATES] [PAIRS]}
updates=${3:-40}
pairs=${4:-2}
[[ "$updates" =~ ^[0-9]+$ ]] && ((updates > 5)) || { echo "cpu_bf16.sh: UPDATES is a number over 5, not \`$updates'" >&2; exit 2; }
[[ "$pairs" =~ ^[0-9]+$ ]] && ((pairs >= 1)) || { echo "cpu_bf16.sh: PAIRS is a positive number, not \`$pairs'" >&2; exit 2; }
[ -x "$build/fairseq-cpp-train" ] || { echo "cpu_bf16.sh: no fairseq-cpp-train in $build" >&2; exit 2; }
fixture="${FSQ_SHARED:-$root/../shared}/fixtures/fairseq-v0.9"
[ -d "$fixture/data-bin" ] || { echo "cpu_bf16.sh: no fixture data-bin at $fixture" >&2; exit 2; }
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$root/.venv/bin/python" ]; then
    PYTHON=$root/.venv/bin/python
  elif ! python3 -c 'import torch' 2>/dev/null && [ -x /usr/bin/python3 ]; then
    PYTHON=/usr/bin/python3  # Debian's, with python3-torch (tools/setup.sh), where python3 is another
  else
    PYTHON=$(command -v python3)
  fi
fi
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
: >"$logs/cpu-bf16.rows"
pin=()
if [ -n "${CORES:-}" ]; then
  command -v taskset >/dev/null && pin=(taskset -c "$CORES") || echo "cpu_bf16.sh: no taskset here: not pinned" >&2
fi
export OMP_WAIT_POLICY=PASSIVE  # as tools/bench/generate.sh

row() { echo "$1|$2" >>"$logs/cpu-bf16.rows"; printf '%-40s %s\n' "$1" "$2"; }
# OUT ERR COMMAND...: the seconds of wall time COMMAND takes, its output and errors into OUT and ERR
# (one file where they are the same).
seconds() {
  local out=$1 err=$2 t0 t1
  shift 2
  t0=$(date +%s.%N)
  if [ "$out" = "$err" ]; then
    "${pin[@]}" "$@" >"$out" 2>&1 || return 1
  else
    "${pin[@]}" "$@" >"$out" 2>"$err" || return 1
  fi
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", b - a }'
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile' | paste -sd ' ')
products=widened
grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo && products=hardware
row "CPU" "$cpu, $(nproc) cores${CORES:+, pinned to $CORES}; flags: ${flags:-none of avx2, avx512f, avx512_bf16, amx}; bf16 products: $products"

# --- 1. training, fp32 against bf16, interleaved
train() {  # PRECISION RUN: whole-process seconds; LOGDIR/train-PRECISION-RUN.log
  local log="$logs/train-$1-$2.log"
  seconds "$log" "$log" "$build/fairseq-cpp-train" "$root/configs/multi30k_transformer_small.yaml" \
    task.data="$fixture/data-bin" checkpoint.save_dir="$logs/ckpt" checkpoint.no_save=true \
    dataset.disable_validation=true common.cpu=true optimization.max_update="$updates" common.cpu_threads=2 \
    common.log_interval=1 common.bf16="$([ "$1" = bf16 ] && echo true || echo false)"
}
words_per_second() {  # LOG: words/s over updates 6..
  grep -o '\[train_inner\] {.*}' "$1" | sed 's/^\[train_inner\] //' | "$PYTHON" -c 'import json, sys
rows = [json.loads(l) for l in sys.stdin][5:]
print(round(sum(r["wpb"] for r in rows) / sum(r["wpb"] / r["wps"] for r in rows)) if rows else "")'
}
ratios=() fp32_s=() bf16_s=() fp32_wps=() bf16_wps=()
for i in $(seq "$pairs"); do
  a=$(train fp32 "$i") || { row "training" "fp32 run $i failed (train-fp32-$i.log)"; break; }
  b=$(train bf16 "$i") || { row "training" "bf16 run $i failed (train-bf16-$i.log)"; break; }
  fp32_s+=("$a") bf16_s+=("$b")
  fp32_wps+=("$(words_per_second "$logs/train-fp32-$i.log")") bf16_wps+=("$(words_per_second "$logs/train-bf16-$i.log")")
  ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')")
done
if [ ${#ratios[@]} -gt 0 ]; then
  row "Multi30k preset, $updates updates, 2 threads" \
    "fp32 $(printf '%s\n' "${fp32_s[@]}" | median) s ($(printf '%s\n' "${fp32_wps[@]}" | median) words/s), bf16 $(printf '%s\n' "${bf16_s[@]}" | median) s ($(printf '%s\n' "${bf16_wps[@]}" | median) words/s): bf16 $(printf '%s\n' "${ratios[@]}" | median)x fp32's speed, whole process (median of ${#ratios[@]} pair(s))"
fi

# --- 2. one update against the GEMM-bound ceiling, and where its time goes (LibTorch 2.x's
# profiler, 2 more steps; a LibTorch 1.13 build has none and runs without)
for precision in fp32 bf16; do
  step=("${pin[@]}" "$build/tools/bench/fsq_bench_train_step" --arch multi30k --max-tokens 4096 --len 32 --iters 5
    --warmup 2 --threads 2 --cpu 1 --bf16 "$([ $precision = bf16 ] && echo 1 || echo 0)")
  rm -f "$logs/profile-$precision.txt"
  profile=""
  if ! out=$("${step[@]}" --profile "$logs/profile-$precision.txt" 2>"$logs/step-$precision.log"); then
    if grep -q 'needs LibTorch 2.x' "$logs/step-$precision.log"; then
      out=$("${step[@]}" 2>"$logs/step-$precision.log") || out=""
    else
      profile="profile failed (step-$precision.log)"
    fi
  fi
  echo "$out" >>"$logs/step-$precision.log"
  step_ms=$(awk '$2 == "'$precision'" {print $5; exit}' <<<"$out")
  share=$(grep -m1 -o '^GEMM .*' <<<"$out")
  [ -n "$profile" ] || profile=$(grep -m1 -o '^profile: .*' <<<"$out")
  [ -s "$logs/profile-$precision.txt" ] && profile="$profile (profile-$precision.txt)"
  share="${share:+$share${profile:+; $profile}}"
  row "one update, 4,096 tokens, $precision" "${step_ms:+$step_ms ms; }${share:-failed (step-$precision.log)}"
done

# --- 3. generation: float32, --bf16, --quantize int8
if [ ! -f "$logs/imported.pt" ] && ! "$PYTHON" "$root/tools/fairseq-import" "$fixture/checkpoint_best.pt" "$logs/imported.pt" \
  >"$logs/import.log" 2>&1; then
  row "generation" "the fixture checkpoint's import failed (import.log)"
  exit 1
fi
bleu_of() {  # GENERATE-OUTPUT: sacreBLEU of its H- lines against its T- lines
  local name=${1%.txt} kind
  for kind in H T; do grep "^$kind-" "$1" | sed "s/^$kind-//" | sort -n | awk -F '\t' '{print $NF}' >"$name.$kind"; done
  "$build/fairseq-cpp-eval" score --sys "$name.H" --ref "$name.T" --metric bleu 2>/dev/null |
    sed -n 's/^BLEU|[^ ]* = \([0-9.]*\) .*/\1/p'
}
for mode in float32 bf16 int8; do
  args=()
  [ $mode = bf16 ] && args=(--bf16)
  [ $mode = int8 ] && args=(--quantize int8)
  out="$logs/generate-$mode"
  if s=$(seconds "$out.txt" "$out.log" "$build/fairseq-cpp-generate" "$fixture/data-bin" --path "$logs/imported.pt" \
    --gen-subset test --beam 5 --batch-size 128 --remove-bpe sentencepiece --cpu --cpu-threads 2 "${args[@]}"); then
    speed=$(grep -ho '[0-9.]* sentences/s' "$out.log" "$out.txt" | tail -1)
    row "generation, fixture, $mode" "${speed:-no speed line}, whole process $s s, BLEU $(bleu_of "$out.txt")"
  else
    row "generation, fixture, $mode" "refused or failed: $(grep -m1 'error' "$out.log" | sed 's/.*error: //; s/ (.*//' | cut -c1-160)"
  fi
done
