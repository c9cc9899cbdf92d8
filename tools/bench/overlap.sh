#!/usr/bin/env bash
# The gradient all-reduce during backward (distributed_training.ddp_backend c10d, the default)
# against the all-reduce after backward (legacy_ddp): 2 Gloo workers on this host (1 intra-op
# thread each), Multi30k with the fairseq v0.9 reference model (configs/multi30k_transformer_small
# .yaml on the fixture's data-bin), the same UPDATES updates of the same batches, RUNS runs of each
# interleaved. Prints, per mode, the medians of: words/s (updates 6.., from the JSON log), the
# seconds rank 0 waited for the all-reduce after its backward (the whole all-reduce after
# backward; what backward did not hide with overlap), and the share of the after-backward wait
# that overlap hid. Also checks that both modes trained on the same tokens to the same loss.
# With DEVICE=cuda (the GPU machine, tools/gpu/run.sh) the two workers share cuda:0: NCCL refuses
# two ranks on one device, so they talk over Gloo, started as two one-worker nodes (torchrun's
# variables, LOCAL_RANK 0 each) on 127.0.0.1. It shows what backward hides of a Gloo all-reduce
# that the host's cores carry while the GPU computes, not NCCL's figure between two GPUs.
#   tools/bench/overlap.sh [BUILD_DIR] [UPDATES] [RUNS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
updates=${2:-30}
runs=${3:-3}
data=${DATA:-${FSQ_SHARED:-$root/../shared}/fixtures/fairseq-v0.9/data-bin}  # tools/gpu/run.sh passes its carried copy
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

device=${DEVICE:-cpu}
py=${PYTHON:-/usr/bin/python3}  # tools/gpu/run.sh passes its own (the GPU machine has no /usr/bin/python3)
run() {  # MODE INDEX: one training run; its log in $work/MODE-INDEX
  local log="$work/$1-$2"
  local args=("$root/configs/multi30k_transformer_small.yaml" task.data="$data" checkpoint.save_dir="$work/ckpt-$1"
              checkpoint.no_save=true dataset.disable_validation=true optimization.max_update="$updates"
              common.cpu_threads=1 common.log_interval=1 distributed_training.ddp_backend="$1")
  if [ "$device" = cuda ]; then
    local port
    port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    for rank in 1 0; do
      env MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2 RANK=$rank LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
        "$build/fairseq-cpp-train" "${args[@]}" distributed_training.distributed_backend=gloo \
        2>"$log$([ $rank = 1 ] && echo .rank1)" &
    done
    wait
  else
    "$build/fairseq-cpp-train" "${args[@]}" common.cpu=true distributed_training.distributed_world_size=2 2>"$log"
  fi
  grep -o '\[train_inner\] {.*}' "$log" | "$py" "$root/tools/bench/words_per_second.py" >"$log.wps"
  sed -n 's/.*gradient all-reduce: \([0-9.]*\) s of this run.s \([0-9.]*\) s of updates.*/\1 \2/p' "$log" >"$log.wait"
  [ -s "$log.wait" ] || { echo "no all-reduce line in $log:" >&2; tail -5 "$log" >&2; exit 1; }
}

for i in $(seq "$runs"); do
  run c10d "$i"
  run legacy_ddp "$i"
done

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
same=yes
for i in $(seq "$runs"); do
  for m in c10d legacy_ddp; do
    [ "$(cut -d' ' -f2- "$work/$m-$i.wps")" = "$(cut -d' ' -f2- "$work/c10d-1.wps")" ] || same=no
  done
done
if [ "$device" = cuda ]; then
  printf 'Multi30k small Transformer, 2 Gloo workers sharing %s, %s updates, medians of %s runs\n' \
    "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" "$updates" "$runs"
else
  printf 'Multi30k small Transformer, 2 Gloo workers x 1 thread on one host, %s updates, medians of %s runs\n' \
    "$updates" "$runs"
fi
printf 'CPU: %s (%s cores)\n' "$(lscpu | sed -n 's/^Model name: *//p')" "$(nproc)"
printf '%-34s %9s %22s %18s\n' "gradient all-reduce" "words/s" "waited after backward" "of updates' time"
for m in c10d legacy_ddp; do
  wps=$(for i in $(seq "$runs"); do cut -d' ' -f1 "$work/$m-$i.wps"; done | median)
  wait=$(for i in $(seq "$runs"); do cut -d' ' -f1 "$work/$m-$i.wait"; done | median)
  steps=$(for i in $(seq "$runs"); do cut -d' ' -f2 "$work/$m-$i.wait"; done | median)
  eval "wps_$m=$wps wait_$m=$wait"
  name=$([ $m = c10d ] && echo "during backward (c10d)" || echo "after backward (legacy_ddp)")
  printf '%-34s %9s %20s s %17s\n' "$name" "$wps" "$wait" "$(awk -v w="$wait" -v s="$steps" 'BEGIN { printf "%.1f%%", 100 * w / s }')"
done
awk -v a="$wait_c10d" -v b="$wait_legacy_ddp" -v x="$wps_c10d" -v y="$wps_legacy_ddp" 'BEGIN {
  printf "hidden behind backward: %.0f%% of the after-backward wait; words/s during/after: %.2fx\n",
    (b > 0 ? 100 * (1 - a / b) : 0), x / y }'
echo "same tokens and final loss in every run: $same"
