#!/usr/bin/env bash
# Checkpoint averaging: time and peak memory of `fairseq-cpp-eval average` over N checkpoints of
# the Multi30k small Transformer (configs/multi30k_transformer_small.yaml, 7.6 M parameters, 91 MB
# files with Adam's state), next to the same average done as fairseq's scripts/average_checkpoints.py
# does it (each file loaded whole with torch.load, sums in float32), run in the same invocation with
# Debian's python3-torch. Peak RSS is each process's own (getrusage of the child).
#   tools/bench/average.sh [BUILD_DIR] [N ...]        # default N: 2 5 10
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
shift || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(2 5 10)
max=0
for n in "${counts[@]}"; do [ "$n" -gt "$max" ] && max=$n; done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# max checkpoints, one per update (the first updates of a real run: enough for memory and time).
"$build/fairseq-cpp-train" "$root/configs/multi30k_transformer_small.yaml" \
  task.data="${FSQ_SHARED:-$root/../shared}/fixtures/fairseq-v0.9/data-bin" checkpoint.save_dir="$work/ckpt" \
  checkpoint.save_interval_updates=1 dataset.max_tokens=256 dataset.disable_validation=true \
  optimization.max_update="$max" common.cpu_threads=2 2>"$work/train.log" ||
  { tail -5 "$work/train.log" >&2; exit 1; }

/usr/bin/python3 - "$build/fairseq-cpp-eval" "$work" "${counts[@]}" <<'PY'
import os, subprocess, sys
program, work, counts = sys.argv[1], sys.argv[2], [int(n) for n in sys.argv[3:]]
ckpt = os.path.join(work, "ckpt")
fairseq_way = r"""
import sys, torch
paths, out = sys.argv[1:-1], sys.argv[-1]
sums, state = {}, None
for p in paths:
    state = torch.load(p, map_location="cpu")
    for k, v in state["model"].items():
        sums[k] = v.clone() if k not in sums else sums[k] + v
state["model"] = {k: v / len(paths) if v.is_floating_point() else v // len(paths) for k, v in sums.items()}
torch.save(state, out)
"""

wrapper = r"""
import resource, subprocess, sys, time
start = time.monotonic()
subprocess.run(sys.argv[1:], check=True, stderr=subprocess.DEVNULL)
print(time.monotonic() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
"""

def measure(argv):
    # A wrapper process per command: RUSAGE_CHILDREN's peak is over all children a process had.
    out = subprocess.run([sys.executable, "-c", wrapper, *argv], check=True, capture_output=True, text=True).stdout
    seconds, mib = out.split()
    return float(seconds), float(mib)

files = sorted((f for f in os.listdir(ckpt) if f.startswith("checkpoint_1_")),
               key=lambda f: int(f.split("_")[2].split(".")[0]), reverse=True)
size = os.path.getsize(os.path.join(ckpt, files[0])) / 2**20
print(f"checkpoint averaging, Multi30k small Transformer ({size:.0f} MB files), CPU: "
      + open("/proc/cpuinfo").read().split("model name\t: ")[1].split("\n")[0])
print(f"{'N':>3}  {'fairseq-cpp-eval average':>26}  {'torch.load + float32 sums':>27}")
for n in counts:
    paths = [os.path.join(ckpt, f) for f in files[:n]]
    ours = measure([program, "average", "--inputs", *paths, "--output", os.path.join(work, "ours.pt")])
    theirs = measure(["/usr/bin/python3", "-c", fairseq_way, *paths, os.path.join(work, "theirs.pt")])
    print(f"{n:>3}  {ours[0]:>8.2f} s {ours[1]:>9.0f} MiB RSS  {theirs[0]:>8.2f} s {theirs[1]:>10.0f} MiB RSS")
PY
