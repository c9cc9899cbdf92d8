#!/usr/bin/env bash
# Two test hosts against one (issue 20), in one invocation. Brings up 2 test hosts (network
# namespaces fsqb0 10.213.79.1 and fsqb1 10.213.79.2, one veth each on a bridge: tools/netns/hosts.sh)
# and measures, ROUNDS times, interleaved:
#   1. all-reduce of 64 MiB fp32 (10 timed iterations, median per run) between the two hosts, one
#      rank on each (torchrun-style variables for fsq_bench_allreduce, --init-method/--rank for
#      PyTorch's allreduce_baseline.py), and for comparison 2 ranks on one host (its loopback);
#      fairseq-cpp's Gang and PyTorch's torch.distributed (Debian's python3-torch), both Gloo;
#   2. words/s of the Multi30k preset (configs/multi30k_transformer_small.yaml on the fixture's
#      data-bin, as tools/bench/train.sh and overlap.sh run it), UPDATES updates of the same batches,
#      1 intra-op thread per worker: 2 hosts x 1 worker (explicit tcp:// init, one rank per host)
#      against 1 host x 2 workers (local spawn on fsqb0). words/s counts updates 6.. (rank 0's JSON
#      log); the target tokens of every update and the last loss must be the same in every run.
# Prints each run, then a table of medians, the median of each round's own ratio 2 hosts / 1 host
# (and its range), the CPU, the load average and what the link is.
# The "hosts" are namespaces on this machine: the same cores, memory and kernel; the veth link has
# no bandwidth limit (no qdisc), its cost is the kernel's packet path (MTU 1500 against loopback's
# 65536). Needs root. The hosts are removed on exit (trap), whatever happens.
#   tools/bench/multinode.sh [BUILD_DIR] [ROUNDS]        (default: build 3; UPDATES=30 in the environment)
# FSQ_NETNS_PREFIX / FSQ_NETNS_SUBNET pick another set of hosts (default fsqb / 10.213.79, so that it
# does not collide with the tests' default set fsqh / 10.213.77).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
cmake --build "$build" --target fsq_bench_allreduce >/dev/null  # benchmarks are built on demand
rounds=${2:-3}
updates=${UPDATES:-30}
export FSQ_NETNS_PREFIX=${FSQ_NETNS_PREFIX:-fsqb} FSQ_NETNS_SUBNET=${FSQ_NETNS_SUBNET:-10.213.79}
h0=${FSQ_NETNS_PREFIX}0 h1=${FSQ_NETNS_PREFIX}1
hosts="$root/tools/netns/hosts.sh"
data="${FSQ_SHARED:-$root/../shared}/fixtures/fairseq-v0.9/data-bin"
mib=64 iters=10
work=$(mktemp -d)
trap '"$hosts" down || true; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

"$hosts" up 2 >/dev/null
on() { "$hosts" exec "$@"; }  # on HOST CMD...
port=29600
next_port() { port=$((port + 1)); }

# Waits for the background pids "$@"; fails naming the log of the first that failed.
wait_all() {
  local pid ok=0
  for pid in "$@"; do wait "$pid" || ok=1; done
  return $ok
}
fail_with() { echo "multinode.sh: $1 failed; its log:" >&2; tail -20 "$2" >&2; exit 1; }
ms_of() { sed -nE 's/.*median=([0-9.]+) ms.*/\1/p' "$1"; }

# --- 1. all-reduce ---------------------------------------------------------------------------
# allreduce IMPL WHERE INDEX: one run (10 iterations); appends its median ms to $work/ar-IMPL-WHERE.
allreduce() {
  local impl=$1 where=$2 log="$work/ar-$1-$2-$3"
  next_port
  if [ "$impl" = ours ]; then
    if [ "$where" = hosts ]; then
      local r pids=()
      for r in 0 1; do
        on "${FSQ_NETNS_PREFIX}$r" env MASTER_ADDR="$h0" MASTER_PORT=$port WORLD_SIZE=2 RANK=$r LOCAL_RANK=0 \
          LOCAL_WORLD_SIZE=1 "$build/tools/bench/fsq_bench_allreduce" --world-size 2 --mib $mib --iters $iters \
          >"$log.$r" 2>&1 &
        pids+=($!)
      done
      wait_all "${pids[@]}" || fail_with "all-reduce $impl $where" "$log.1"
      grep -q "interface=fsqv0" "$log.0" || fail_with "rank 0 not on the veth" "$log.0"
      grep '^fairseq-cpp' "$log.0" >"$log"
    else
      on "$h0" "$build/tools/bench/fsq_bench_allreduce" --world-size 2 --mib $mib --iters $iters >"$log" 2>"$log.err" ||
        fail_with "all-reduce $impl $where" "$log.err"
    fi
  else
    local py=(/usr/bin/python3 "$root/tools/bench/allreduce_baseline.py" --world-size 2 --mib $mib --iters $iters)
    if [ "$where" = hosts ]; then
      local r pids=()
      for r in 0 1; do
        on "${FSQ_NETNS_PREFIX}$r" env GLOO_SOCKET_IFNAME="fsqv$r" "${py[@]}" --init-method "tcp://$h0:$port" \
          --rank $r >"$log.$r" 2>&1 &
        pids+=($!)
      done
      wait_all "${pids[@]}" || fail_with "all-reduce $impl $where" "$log.1"
      grep '^pytorch' "$log.0" >"$log"
    else
      on "$h0" "${py[@]}" >"$log" 2>"$log.err" || fail_with "all-reduce $impl $where" "$log.err"
    fi
  fi
  [ -n "$(ms_of "$log")" ] || fail_with "all-reduce $impl $where (no median line)" "$log"
  printf '  all-reduce %-6s %-8s %s\n' "$impl" "$where" "$(cat "$log")"
  ms_of "$log" >>"$work/ar-$impl-$where"
}

# --- 2. training -------------------------------------------------------------------------------
train_args=("$root/configs/multi30k_transformer_small.yaml" task.data="$data" checkpoint.no_save=true
  dataset.disable_validation=true optimization.max_update="$updates" common.cpu_threads=1 common.log_interval=1
  distributed_training.distributed_world_size=2 distributed_training.timeout=120)

# train LAYOUT INDEX: one training run; rank 0's log in $work/LAYOUT-INDEX, "words/s last_loss tokens..." in .wps.
train() {
  local layout=$1 log="$work/$1-$2"
  next_port
  if [ "$layout" = hosts ]; then
    local r pids=()
    for r in 0 1; do
      on "${FSQ_NETNS_PREFIX}$r" "$build/fairseq-cpp-train" "${train_args[@]}" checkpoint.save_dir="$work/ckpt-$r" \
        distributed_training.distributed_init_method="tcp://$h0:$port" distributed_training.distributed_rank=$r \
        2>"$([ $r = 0 ] && echo "$log" || echo "$log.rank1")" >/dev/null &
      pids+=($!)
    done
    wait_all "${pids[@]}" || { tail -5 "$log" >&2; fail_with "training, 2 hosts x 1 worker" "$log.rank1"; }
    grep -q "interface=fsqv0" "$log" || fail_with "training rank 0 not on the veth" "$log"
  else
    on "$h0" "$build/fairseq-cpp-train" "${train_args[@]}" checkpoint.save_dir="$work/ckpt-local" \
      distributed_training.distributed_port=$port 2>"$log" >/dev/null || fail_with "training, 1 host x 2 workers" "$log"
  fi
  grep -o '\[train_inner\] {.*}' "$log" | /usr/bin/python3 "$root/tools/bench/words_per_second.py" >"$log.wps"
  printf '  training %-21s %6s words/s (last loss %s)\n' \
    "$([ "$layout" = hosts ] && echo "2 hosts x 1 worker" || echo "1 host x 2 workers")" \
    "$(cut -d' ' -f1 "$log.wps")" "$(cut -d' ' -f2 "$log.wps")"
}

cpu=$(lscpu | sed -n 's/^Model name: *//p')
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
for i in $(seq "$rounds"); do
  echo "round $i of $rounds"
  # Alternate the order within a round, so that a drift of the machine's load favours neither side.
  if ((i % 2)); then order=(hosts local); else order=(local hosts); fi
  for impl in ours pytorch; do
    for where in "${order[@]}"; do allreduce "$impl" "$where" "$i"; done
  done
  for layout in "${order[@]}"; do train "$layout" "$i"; done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
gbs() { awk -v t="$1" -v m=$mib 'BEGIN { printf "%.2f", m * 1048576 / (t / 1000) / 1e9 }'; }
same=yes
for i in $(seq "$rounds"); do
  for layout in hosts local; do
    [ "$(cut -d' ' -f2- "$work/$layout-$i.wps")" = "$(cut -d' ' -f2- "$work/hosts-1.wps")" ] || same=no
  done
done
for k in ours-hosts ours-local pytorch-hosts pytorch-local; do eval "ms_${k/-/_}=$(median <"$work/ar-$k")"; done
wps_hosts=$(for i in $(seq "$rounds"); do cut -d' ' -f1 "$work/hosts-$i.wps"; done | median)
wps_local=$(for i in $(seq "$rounds"); do cut -d' ' -f1 "$work/local-$i.wps"; done | median)
range() { for i in $(seq "$rounds"); do cut -d' ' -f1 "$work/$1-$i.wps"; done | sort -n | sed -n '1p;$p' | paste -sd- -; }
# The median of the rounds' own ratios A_i / B_i (files of one number a line): each pair ran minutes
# apart at most, so a drift of the machine's load cancels better than in the ratio of the medians.
paired() { paste -d' ' "$1" "$2" | awk '{ printf "%.2f\n", $1 / $2 }' | median; }
paired_range() { paste -d' ' "$1" "$2" | awk '{ printf "%.2f\n", $1 / $2 }' | sort -g | sed -n '1p;$p' | paste -sd- -; }
for layout in hosts local; do
  for i in $(seq "$rounds"); do cut -d' ' -f1 "$work/$layout-$i.wps"; done >"$work/wps-$layout"
done

echo
printf 'Two test hosts against one, medians of %s rounds (interleaved), %s s in all\n' "$rounds" $(($(date +%s) - start))
printf 'CPU: %s, %s cores; load average before %s, after %s (shared machine: read the ratios)\n' \
  "$cpu" "$(nproc)" "$load_before" "$load_after"
printf 'link: %s and %s are network namespaces of this machine (the same cores), one veth each (MTU %s) on a bridge,\n' \
  "$h0" "$h1" "$(ip -n "$h0" -o link show fsqv0 | sed -nE 's/.* mtu ([0-9]+) .*/\1/p')"
printf '      qdisc %s: no bandwidth limit; one host = 2 ranks on %s'"'"'s loopback (MTU %s)\n' \
  "$(tc -n "$h0" qdisc show dev fsqv0 2>/dev/null | awk '{print $2; exit}')" "$h0" \
  "$(ip -n "$h0" -o link show lo | sed -nE 's/.* mtu ([0-9]+) .*/\1/p')"
echo
printf '%-44s %12s %12s %15s\n' "all-reduce, $mib MiB fp32, Gloo, 2 ranks" "2 hosts" "1 host" "2 hosts/1 host"
printf '%-44s %12s %12s %15s\n' "" "median" "median" "paired, range"
for impl in ours pytorch; do
  eval "a=\$ms_${impl}_hosts b=\$ms_${impl}_local"
  printf '%-44s %9s ms %9s ms %15s\n' "$([ $impl = ours ] && echo "fairseq-cpp (Gang)" || echo "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') torch.distributed")" \
    "$a" "$b" "$(paired "$work/ar-$impl-hosts" "$work/ar-$impl-local")x"
  printf '%-44s %12s %12s %15s\n' "" "" "" "$(paired_range "$work/ar-$impl-hosts" "$work/ar-$impl-local")"
  printf '%-44s %7s GB/s %7s GB/s\n' "  algorithm bandwidth" "$(gbs "$a")" "$(gbs "$b")"
done
printf '%-44s %12s %12s\n' "  time ratio fairseq-cpp / PyTorch" \
  "$(awk -v a="$ms_ours_hosts" -v b="$ms_pytorch_hosts" 'BEGIN { printf "%.2f", a / b }')" \
  "$(awk -v a="$ms_ours_local" -v b="$ms_pytorch_local" 'BEGIN { printf "%.2f", a / b }')"
echo
printf '%-44s %12s %12s %15s\n' "Multi30k preset, $updates updates, 1 thread/worker" "2 hosts x 1" "1 host x 2" "2 hosts/1 host"
printf '%-44s %12s %12s %15s\n' "words/s (updates 6..), median; paired ratio" "$wps_hosts" "$wps_local" \
  "$(paired "$work/wps-hosts" "$work/wps-local")x"
printf '%-44s %12s %12s %15s\n' "  range over the rounds" "$(range hosts)" "$(range local)" \
  "$(paired_range "$work/wps-hosts" "$work/wps-local")"
echo "same target tokens at every update and the same last loss in every run: $same"
