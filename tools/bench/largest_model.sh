#!/usr/bin/env bash
# The largest Transformer that trains on this machine (issue 36): transformer_vaswani_wmt_en_de_big's
# widths (d 1024, ffn 4096, 16 heads, a shared 32k vocabulary) with L encoder and L decoder layers,
# WORKERS Gloo workers of this host (one process each, the threads split between them), MAX_TOKENS
# target tokens of 32-token sentences per worker, through the trainer (tools/bench/train_step.cpp).
# The workers of a try run together in one memory cgroup of LIMIT GiB (cgroup v1's memory
# controller, as root; the machine's memory less a margin for the system), so that "fits" means what
# it means to a user: the kernel stops the try when the workers together need more.
# For each SETTING (zero_sharding:checkpointing): two one-update probes (1 and 2 layers) give the
# cgroup's peak as a line in L; from its prediction the search steps up or down until L trains
# ITERS updates and L + 1 runs out of memory. Prints, per setting, the largest L and the next.
#   tools/bench/largest_model.sh [BUILD_DIR] [PRECISION fp32|bf16] [MAX_TOKENS] [WORKERS] [ITERS] [LIMIT_GIB] [SETTING...]
# Defaults: build fp32 2048 2 3 (MemTotal - 1.5 GiB) none:0 os_grad:1
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
precision=${2:-fp32}
max_tokens=${3:-2048}
workers=${4:-2}
iters=${5:-3}
total_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
limit_gib=${6:-$(awk -v k="$total_kib" 'BEGIN {printf "%.1f", k / 1048576 - 1.5}')}
shift $(($# < 6 ? $# : 6))
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=(none:0 os_grad:1)
bench="$build/tools/bench/fsq_bench_train_step"
cgroups=/sys/fs/cgroup/memory
fail() { echo "largest_model: $1" >&2; exit "${2:-2}"; }
# Built by default only with LibTorch 2.x: built here on demand.
cmake --build "$build" --target fsq_bench_train_step >/dev/null || fail "cannot build $bench: configure the project first (tools/setup.sh)"
case "$precision" in fp32 | bf16) ;; *) fail "PRECISION is fp32 or bf16, not \`$precision'" ;; esac
[ -w "$cgroups" ] || fail "needs cgroup v1's memory controller at $cgroups, writable (run as root)"
for s in "${settings[@]}"; do
  [[ "$s" =~ ^(none|os|os_grad):[01]$ ]] || fail "a SETTING is SHARDING:CHECKPOINTING (none|os|os_grad, 0|1), not \`$s'"
done
threads=$(($(nproc) / workers))
[ "$threads" -ge 1 ] || threads=1
limit_bytes=$(awk -v g="$limit_gib" 'BEGIN {printf "%.0f", g * 2^30}')
work=$(mktemp -d)
group=
cleanup() {
  [ -z "$group" ] || { xargs -r kill -9 <"$group/cgroup.procs" 2>/dev/null; sleep 1; rmdir "$group" 2>/dev/null; }
  rm -rf "$work"
}
trap cleanup EXIT
port=$((29900 + RANDOM % 60))

# try NAME SHARDING CHECKPOINTING LAYERS UPDATES: the workers in a fresh cgroup. Sets `result` to ok
# or oom (the kernel killed a worker for the cgroup's limit) and `peak` to the cgroup's peak in GiB,
# or fails with the workers' logs. Runs in this shell, so that the port moves on and the exit trap
# sees the cgroup.
try() {
  local name=$1 sharding=$2 recompute=$3 layers=$4 updates=$5 rank pids=() status=ok
  group=$cgroups/fsq-largest-$$
  mkdir "$group"
  echo "$limit_bytes" >"$group/memory.limit_in_bytes"
  port=$((port + 1))
  for rank in $(seq 0 $((workers - 1))); do
    /bin/sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$group" \
      "$bench" --cpu 1 --arch transformer_vaswani_wmt_en_de_big --layers "$layers" --vocab 32000 \
      --max-tokens "$max_tokens" --len 32 --iters "$updates" --warmup 0 --gemm 0 --threads "$threads" \
      --bf16 "$([ "$precision" = bf16 ] && echo 1 || echo 0)" --checkpoint-activations "$recompute" \
      --workers "$workers" --rank "$rank" --port "$port" --zero-sharding "$sharding" \
      >"$work/$name-$rank" 2>"$work/$name-$rank.log" &
    pids+=($!)
  done
  # A worker that fails (a kill for memory, an error) ends the try: the others would wait for it.
  local pid running=${#pids[@]}
  while [ "$running" -gt 0 ]; do
    sleep 1
    running=0
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then
        running=$((running + 1))
      elif ! wait "$pid" 2>/dev/null; then
        status=failed
      fi
    done
    if [ "$status" = failed ]; then
      kill -9 "${pids[@]}" 2>/dev/null || true
      wait "${pids[@]}" 2>/dev/null || true
      break
    fi
  done
  local kills
  peak=$(awk '{printf "%.2f", $1 / 2^30}' "$group/memory.max_usage_in_bytes")
  kills=$(awk '$1 == "oom_kill" {print $2}' "$group/memory.oom_control")
  rmdir "$group"
  group=
  if [ "$status" = ok ]; then
    result=ok
  elif [ "${kills:-0}" -gt 0 ]; then
    result=oom
  else
    for rank in $(seq 0 $((workers - 1))); do echo "--- rank $rank:" >&2; tail -5 "$work/$name-$rank.log" >&2; done
    fail "$name: a worker failed, not for memory" 1
  fi
}

# The slower rank's median step (s), the largest model state and peak RSS over the ranks (GiB).
summary() {
  /usr/bin/python3 - "$work/$1" "$workers" <<'PY'
import re, sys
prefix, n = sys.argv[1], int(sys.argv[2])
steps, states, peaks = [], [], []
for rank in range(n):
    text = open(f"{prefix}-{rank}").read()
    steps.append(float(text.split("\n")[0].split()[4]) / 1000)
    m = re.search(r"model state ([\d.]+) .*peak RSS ([\d.]+)", text)
    states.append(float(m.group(1)))
    peaks.append(float(m.group(2)))
print(f"{max(steps):.1f} {max(states):.2f} {max(peaks):.2f}")
PY
}

# Parameters of L layers a side at these widths (shared 32k embeddings, sinusoidal positions).
parameters_m() {
  awk -v l="$1" 'BEGIN { d = 1024; f = 4096; v = 32000
    attn = 4 * d * d + 4 * d; ffn = 2 * d * f + f + d; ln = 2 * d
    enc = attn + ffn + 2 * ln; dec = 2 * attn + ffn + 3 * ln
    printf "%.1f", (v * d + l * (enc + dec)) / 1e6 }'
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
rows=()
for s in "${settings[@]}"; do
  sharding=${s%:*} recompute=${s#*:}
  try "$s-probe1" "$sharding" "$recompute" 1 1
  r1=$result p1=$peak
  try "$s-probe2" "$sharding" "$recompute" 2 1
  r2=$result p2=$peak
  if [ "$r1" != ok ] || [ "$r2" != ok ]; then
    fail "$s: the probes of 1 and 2 layers need more than $limit_gib GiB ($r1 $p1, $r2 $p2)" 1
  fi
  guess=$(awk -v a="$p1" -v b="$p2" -v lim="$limit_gib" 'BEGIN {s = b - a; l = int(1 + (lim - a) / s); print (l < 1 ? 1 : l)}')
  echo "largest_model: $s: the cgroup's peak is $p1 GiB at 1 layer, $p2 at 2: $guess layers predicted" >&2
  layers=$guess fits='' over='' fits_peak='' over_peak=''
  while [ -z "$fits" ] || [ -z "$over" ]; do
    try "$s-$layers" "$sharding" "$recompute" "$layers" "$iters"
    echo "largest_model: $s: $layers layers: $result (the cgroup's peak $peak GiB)" >&2
    if [ "$result" = ok ]; then
      fits=$layers fits_peak=$peak
      [ -n "$over" ] || layers=$((layers + 1))
    else
      over=$layers over_peak=$peak
      [ -n "$fits" ] || { layers=$((layers - 1)); [ "$layers" -ge 1 ] || fail "$s: not even 1 layer fits in $limit_gib GiB" 1; }
    fi
  done
  read -r step state rss < <(summary "$s-$fits")
  rows+=("$(printf '%-14s %-14s %7s %13s %10s %15s %15s %12s %9s' "$sharding" "$([ "$recompute" = 1 ] && echo yes || echo no)" \
    "$fits" "$(parameters_m "$fits")" "$step" "$state" "$rss" "$fits_peak" "$over (oom at $over_peak)")")
done

echo "the largest transformer_vaswani_wmt_en_de_big widths (d 1024, ffn 4096, shared 32k vocabulary) that trains $iters updates:"
echo "$precision, $max_tokens target tokens per worker, $workers Gloo workers x $threads thread(s), one memory cgroup of $limit_gib GiB for them, $cpu"
printf '%-14s %-14s %7s %13s %10s %15s %15s %12s %9s\n' zero_sharding checkpointing layers "parameters M" "step s" \
  "state GiB/rank" "peak RSS/rank" "cgroup GiB" "next layers"
printf '%s\n' "${rows[@]}"
