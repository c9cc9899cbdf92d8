#!/usr/bin/env bash
# SLURM across two hosts for real (CTest `slurm.sbatch_across_two_hosts`, labels `slurm;multinode`; issue 20).
# Two test hosts made of network namespaces (tools/netns/hosts.sh), one slurmd on each and slurmctld
# on the first (tools/slurm/local-cluster.sh --hosts 2), then `sbatch --nodes=2 --wait
# tools/slurm/train.sbatch` in both task layouts:
#   1. one task per node, 1 rank per host (--ntasks-per-node=1, world 2): mode=slurm-per-node, the
#      task is the worker;
#   2. one task per node, 2 ranks per host (--ntasks-per-node=1, world 4): mode=slurm-per-node, each
#      task spawns 2 workers;
#   3. one task per worker (--ntasks-per-node=2, world 4): mode=slurm-per-task.
# (SLURM with one task per node is always slurm-per-node; one task per worker needs 2 per node.)
# Each rank's start-up line must say its mode and name its host's veth interface (never lo), and
# each job's parameters after 12 updates must equal, within 1e-5 relative, those of one process
# with update_freq = the job's world size on the same data (the same global batch). Everything it
# starts (hosts, daemons, jobs) is removed on exit, also on failure.
#
#   sudo bash tests/distributed/slurm_multinode_test.sh SOURCE_DIR BUILD_DIR [PYTHON]
#
# PYTHON (default /usr/bin/python3) needs torch: it reads the checkpoints (tools/restricted_load.py).
# The hosts are FSQ_NETNS_PREFIX<I> on FSQ_NETNS_SUBNET (default fsqs0, fsqs1 on 10.213.78.0/24,
# apart from the C++ multinode suite's fsqh0, fsqh1 on 10.213.77.0/24). Needs root, and the packages
# munge slurmctld slurmd slurm-client (tools/setup.sh installs them).
set -euo pipefail
src=$(cd "${1:?usage: slurm_multinode_test.sh SOURCE_DIR BUILD_DIR [PYTHON]}" && pwd)
build=$(cd "${2:?usage: slurm_multinode_test.sh SOURCE_DIR BUILD_DIR [PYTHON]}" && pwd)
python=${3:-/usr/bin/python3}
export FSQ_NETNS_PREFIX=${FSQ_NETNS_PREFIX:-fsqs} FSQ_NETNS_SUBNET=${FSQ_NETNS_SUBNET:-10.213.78}
hosts_tool=$src/tools/netns/hosts.sh
cluster_tool=$src/tools/slurm/local-cluster.sh
updates=12
started=$SECONDS

fail() {
  echo "FAIL: $*" >&2
  for log in "$dir"/slurmctld.log "$dir"/slurmd-*.log; do
    [ -f "$log" ] && { echo "== the end of $(basename "$log")"; tail -n 15 "$log"; } >&2
  done
  exit 1
}

# Checked before anything is started: a missing piece is a failure that says what to install.
[ "$(id -u)" -eq 0 ] || { echo "FAIL: needs root (network namespaces and the SLURM daemons)" >&2; exit 1; }
for tool in sbatch munged slurmctld slurmd ip nsenter unshare; do
  command -v "$tool" >/dev/null 2>&1 ||
    { echo "FAIL: \`$tool' is missing; tools/setup.sh installs munge slurmctld slurmd slurm-client iproute2 util-linux" >&2; exit 1; }
done
"$python" -c 'import torch' 2>/dev/null ||
  { echo "FAIL: $python cannot import torch (it reads the checkpoints); tools/setup.sh installs python3-torch" >&2; exit 1; }
for program in fairseq-cpp-train fairseq-cpp-preprocess; do
  [ -x "$build/$program" ] || { echo "FAIL: $build/$program is missing; build it first" >&2; exit 1; }
done

dir=$(mktemp -d /tmp/fsq-slurm-hosts-XXXXXX)
cleanup() {
  "$cluster_tool" stop "$dir" >/dev/null 2>&1 || true
  "$hosts_tool" down >/dev/null 2>&1 || true  # kills the jobs' processes too: they run in the hosts
  rm -rf "$dir"
}
trap cleanup EXIT

host() { echo "$FSQ_NETNS_PREFIX$1"; }
address() { echo "$FSQ_NETNS_SUBNET.$(($1 + 1))"; }
"$hosts_tool" up 2 || fail "tools/netns/hosts.sh up 2"
cluster_env=$("$cluster_tool" start "$dir" --hosts 2) || fail "tools/slurm/local-cluster.sh start DIR --hosts 2"
eval "$cluster_env"  # SLURM_CONF
nodes=$("$hosts_tool" exec "$(host 0)" sinfo -h -N -o '%N %T')
echo "cluster: $(tr '\n' ' ' <<<"$nodes")(slurmctld on $(host 0))"

# A small corpus (the target is the source reversed and renamed: learnable by a tiny model).
mkdir -p "$dir/corpus"
for split in train:300:1 valid:40:2; do
  IFS=: read -r name n seed <<<"$split"
  awk -v n="$n" -v seed="$seed" 'BEGIN { srand(seed); for (i = 0; i < n; i++) { len = 3 + int(rand() * 10);
    s = ""; t = ""; for (j = 0; j < len; j++) { w = int(rand() * 30); s = s (j ? " " : "") "s" w;
    t = "t" (w * 7 % 30) (j ? " " : "") t } print s > "/dev/stdout"; print t > "/dev/stderr" } }' \
    >"$dir/corpus/$name.src" 2>"$dir/corpus/$name.tgt"
done
"$build/fairseq-cpp-preprocess" --source-lang src --target-lang tgt --trainpref "$dir/corpus/train" \
  --validpref "$dir/corpus/valid" --destdir "$dir/bin" --joined-dictionary >"$dir/preprocess.log" 2>&1 ||
  fail "preprocess: $(tail -n 5 "$dir/preprocess.log")"

# config WORLD UPDATE_FREQ: the same model, data and seed; only the split of the global batch differs.
config() {
  cat >"$dir/world$1-uf$2.yaml" <<YAML
task: {data: $dir/bin, source_lang: src, target_lang: tgt}
model: {arch: transformer_tiny, dropout: 0.0, share_all_embeddings: true}
criterion: {_name: label_smoothed_cross_entropy, label_smoothing: 0.1}
optimizer: {_name: adam, adam_betas: "(0.9, 0.98)"}
lr_scheduler: {_name: inverse_sqrt, warmup_updates: 10}
optimization: {lr: 0.002, max_update: $updates, update_freq: [$2], clip_norm: 1.0}
dataset: {max_tokens: 200, required_batch_size_multiple: 1}
common: {seed: 3, cpu_threads: 1, log_format: json, log_interval: 1, log_all_ranks: true}
distributed_training: {distributed_world_size: $1, timeout: 60}
checkpoint: {save_dir: $dir/alone-uf$2, no_epoch_checkpoints: true}
YAML
  echo "$dir/world$1-uf$2.yaml"
}

# sbatch_job NAME TASKS_PER_NODE WORLD: tools/slurm/train.sbatch on both hosts, submitted from the
# first; its checkpoints go to $dir/checkpoints/NAME (the script's save_dir under --chdir).
sbatch_job() {
  local name=$1 per_node=$2 world=$3 t0=$SECONDS
  # The command line overrides the script's #SBATCH lines that ask for GPUs and 10 CPUs per task.
  timeout 300 "$hosts_tool" exec "$(host 0)" env CONFIG="$(config "$world" 1)" \
    FAIRSEQ_CPP_TRAIN="$build/fairseq-cpp-train" \
    sbatch --wait --parsable --nodes=2 --ntasks-per-node="$per_node" --cpus-per-task=1 --gpus-per-node=0 \
    --job-name="$name" --chdir="$dir" --output="$dir/$name.out" "$src/tools/slurm/train.sbatch" \
    >"$dir/$name.id" 2>"$dir/$name.err" ||
    fail "sbatch $name (--ntasks-per-node=$per_node, world $world) failed: $(cat "$dir/$name.err")
$(tail -n 30 "$dir/$name.out" 2>/dev/null)"
  echo "sbatch $name: job $(cat "$dir/$name.id"), --nodes=2 --ntasks-per-node=$per_node, world $world: $((SECONDS - t0)) s"
}

# check_lines NAME MODE WORLD: every rank's start-up line, once: MODE, its host's veth interface and
# address, and the master on host 0 at the job's port.
check_lines() {
  local name=$1 mode=$2 world=$3 out=$dir/$1.out job port rank h line per_host=$(($3 / 2))
  job=$(cat "$dir/$name.id")
  port=$((15000 + job % 15000))  # fairseq-cpp-train's port for a SLURM job
  grep -q 'done training' "$out" || fail "$name: training did not finish: $(tail -n 20 "$out")"
  for ((rank = 0; rank < world; rank++)); do
    h=$((rank / per_host))
    line="mode=$mode rank=$rank/$world local=$((rank % per_host))/$per_host master=$(host 0):$port device=cpu"
    line+=" interface=fsqv$h ($(address $h), the route to the master $(host 0) $(address 0))"
    [ "$(grep -cF -- "$line" "$out")" = 1 ] || fail "$name: rank $rank's start-up line is not once \`$line':
$(grep -F '[distributed]' "$out")"
  done
  if [ "$mode" = slurm-per-node ] && ((per_host > 1)); then
    for h in 0 1; do
      line="mode=slurm-per-node rank=$((h * per_host))/$world local=0/$per_host master=$(host 0):$port device=cpu"
      line+=" spawn=$per_host (ranks $((h * per_host))-$((h * per_host + per_host - 1)))"
      grep -qF -- "$line" "$out" || fail "$name: host $h's task did not spawn its workers: \`$line':
$(grep -F '[distributed]' "$out")"
    done
  else
    ! grep -q 'spawn=' "$out" || fail "$name: a task spawned workers: $(grep 'spawn=' "$out")"
  fi
  ! grep -q 'interface=lo' "$out" || fail "$name: a rank bound loopback: $(grep 'interface=lo' "$out")"
  grep -F '[distributed]' "$out" | sed "s/^/  $name: /"
}

sbatch_job per-node-1 1 2
check_lines per-node-1 slurm-per-node 2
sbatch_job per-node-2 1 4
check_lines per-node-2 slurm-per-node 4
sbatch_job per-task 2 4
check_lines per-task slurm-per-task 4

# One process, the same global batch: update_freq = the jobs' world size.
for uf in 2 4; do
  t0=$SECONDS
  timeout 300 "$build/fairseq-cpp-train" "$(config 1 $uf)" >"$dir/alone-uf$uf.log" 2>&1 ||
    fail "the single-process run with update_freq $uf failed: $(tail -n 20 "$dir/alone-uf$uf.log")"
  echo "one process, update_freq $uf: $((SECONDS - t0)) s"
done

# The parameters, as tests/support/training_fixture.h compares them: per tensor, the largest
# difference over the largest magnitude (at least 1e-3).
PYTHONPATH=$src/tools "$python" - "$dir" "$updates" per-node-1:2 per-node-2:4 per-task:4 <<'PY' ||
import sys
import restricted_load

top, updates, jobs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def load(d):
    ckpt = restricted_load.load(d + "/checkpoint_last.pt")
    n = int(ckpt["extra_state"]["num_updates"])
    if n != updates:
        sys.exit(f"{d}: {n} updates, not {updates}")
    return ckpt["model"]

def difference(run, alone):
    if set(run) != set(alone):
        sys.exit("other parameter names than the single process's")
    worst = 0.0
    for key, x in run.items():
        x, y = x.double(), alone[key].double()
        worst = max(worst, ((x - y).abs().max() / max(1e-3, x.abs().max().item())).item())
    return worst

# The control: another global batch gives other parameters, so an equality below means something.
control = difference(load(f"{top}/alone-uf2"), load(f"{top}/alone-uf4"))
print(f"control: update_freq 2 vs 4 in one process, max relative difference {control:.3g} (must be over 1e-3)")
if not control > 1e-3:
    sys.exit("the control runs with update_freq 2 and 4 end with the same parameters: the comparison proves nothing")
for job in jobs:
    name, world = job.split(":")
    run = load(f"{top}/checkpoints/{name}")
    worst = difference(run, load(f"{top}/alone-uf{world}"))
    print(f"{name} (world {world}) vs one process with update_freq {world}: {len(run)} tensors, "
          f"{updates} updates, max relative difference {worst:.3g}")
    if not worst < 1e-5:
        sys.exit(f"{name}: the parameters differ from the single process's by {worst:.3g} (relative), over 1e-5")
PY
  fail "the parameters of the SLURM jobs and the single process's (above)"
echo "slurm across 2 hosts: 3 passed, 0 failed ($((SECONDS - started)) s)"
