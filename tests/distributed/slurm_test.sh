#!/usr/bin/env bash
# SLURM for real (CTest label `slurm`): a one-node cluster on localhost (tools/slurm/local-cluster.sh),
# started on a port another program holds (it must move to a free one), then `srun -n2` jobs whose
# ranks come from our SLURM inference:
#   1. the probe's collective suite over Gloo (ranks agree on every all-reduce);
#   2. fairseq-cpp-train --dry-run-distributed prints mode=slurm-per-task for each task;
#   3. one task per node with distributed_world_size=2 spawns two local workers (slurm-per-node);
#   4. a short training run: srun -n2 fairseq-cpp-train on a small generated corpus.
# Usage: slurm_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
dir=$(mktemp -d /tmp/fsq-slurm-XXXXXX)
trap '"$src/tools/slurm/local-cluster.sh" stop "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT

fail() {
  echo "FAIL: $*" >&2
  tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd.log >&2 || true
  exit 1
}

# 0. a controller port that another program holds (a listener on FSQ_SLURM_PORT, taken unchecked)
# is given up for another one; the cluster comes up on that one.
busy=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
python3 -c 'import socket, sys, time
s = socket.socket()
s.bind(("", int(sys.argv[1]))); s.listen(); print("listening", flush=True); time.sleep(600)' "$busy" >"$dir/busy.out" &
holder=$!
trap 'kill "$holder" 2>/dev/null || true; "$src/tools/slurm/local-cluster.sh" stop "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
for _ in $(seq 1 50); do grep -q listening "$dir/busy.out" && break; sleep 0.1; done
grep -q listening "$dir/busy.out" || fail "could not hold port $busy"
cluster_env=$(FSQ_SLURM_PORT=$busy "$src/tools/slurm/local-cluster.sh" start "$dir" 2>"$dir/start.err") ||
  fail "local-cluster.sh start: $(cat "$dir/start.err")"
eval "$cluster_env"  # SLURM_CONF
grep -q "port $busy or $((busy + 1)) is taken (attempt 1); trying another" "$dir/start.err" ||
  fail "the taken port was not given up: $(cat "$dir/start.err")"
port=$(sed -n 's/^SlurmctldPort=//p' "$SLURM_CONF")
[ -n "$port" ] && [ "$port" != "$busy" ] || fail "slurmctld still configured on the taken port $busy"
kill "$holder" && wait "$holder" 2>/dev/null || true
echo "slurm: a taken port $busy was given up for $port"

out=$(timeout 120 srun -n2 --kill-on-bad-exit=1 "$build/tests/fsq_dist_probe" collectives --timeout 60 2>"$dir/err1") ||
  fail "srun collectives: $(cat "$dir/err1")"
echo "$out"
[ "$(grep -c 'collectives ok' <<<"$out")" = 2 ] || fail "expected two ranks to pass the collective suite"
grep -q 'rank 0/2: collectives ok' <<<"$out" || fail "rank 0 missing"
grep -q 'rank 1/2: collectives ok' <<<"$out" || fail "rank 1 missing"
grep -q 'mode=slurm-per-task rank=0/2 local=0/2' "$dir/err1" || fail "rank 0 did not resolve slurm-per-task: $(cat "$dir/err1")"

out=$(timeout 60 srun -n2 -l "$build/fairseq-cpp-train" --dry-run-distributed 2>"$dir/err2") ||
  fail "srun dry run: $(cat "$dir/err2")"
echo "$out"
grep -qE '^0: mode=slurm-per-task rank=0/2 local=0/2 master=[^:]+:[0-9]+ device=cpu$' <<<"$out" || fail "task 0: $out"
grep -qE '^1: mode=slurm-per-task rank=1/2 local=1/2 master=[^:]+:[0-9]+ device=cpu$' <<<"$out" || fail "task 1: $out"

out=$(timeout 120 srun -n1 "$build/tests/fsq_dist_probe" collectives --world-size 2 --timeout 60 2>"$dir/err3") ||
  fail "srun per-node spawn: $(cat "$dir/err3")"
echo "$out"
[ "$(grep -c 'collectives ok' <<<"$out")" = 2 ] || fail "per-node spawn: expected two workers"
grep -q 'mode=slurm-per-node rank=0/2 local=0/2' "$dir/err3" || fail "per-node mode not resolved: $(cat "$dir/err3")"
# 4. a short training run with srun -n2 (two tasks, Gloo), on a small generated corpus.
mkdir -p "$dir/corpus"
for split in train:200 valid:20; do
  name=${split%%:*}
  n=${split##*:}
  awk -v n="$n" 'BEGIN { srand(7); for (i = 0; i < n; i++) { len = 3 + int(rand() * 8); s = ""; t = "";
    for (j = 0; j < len; j++) { w = int(rand() * 20); s = s (j ? " " : "") "s" w; t = "t" w (j ? " " : "") t }
    print s > "/dev/stdout"; print t > "/dev/stderr" } }' >"$dir/corpus/$name.src" 2>"$dir/corpus/$name.tgt"
done
"$build/fairseq-cpp-preprocess" --source-lang src --target-lang tgt --trainpref "$dir/corpus/train" \
  --validpref "$dir/corpus/valid" --destdir "$dir/bin" --joined-dictionary >/dev/null 2>&1 || fail "preprocess"
timeout 300 srun -n2 --kill-on-bad-exit=1 "$build/fairseq-cpp-train" task.data="$dir/bin" model.arch=transformer_tiny \
  dataset.max_tokens=300 optimization.max_update=6 optimizer._name=adam optimization.lr=0.001 \
  checkpoint.save_dir="$dir/ckpt" common.cpu_threads=1 common.log_format=simple common.log_interval=1 \
  >"$dir/out4" 2>"$dir/err4" || fail "srun training: $(tail -n 20 "$dir/err4")"
grep -q 'mode=slurm-per-task rank=0/2' "$dir/err4" || fail "training did not run as slurm-per-task: $(cat "$dir/err4")"
grep -q 'done training' "$dir/err4" || fail "training did not finish: $(tail -n 20 "$dir/err4")"
[ -f "$dir/ckpt/checkpoint_last.pt" ] || fail "no checkpoint_last.pt"
echo "slurm: 5 passed, 0 failed"
