#!/usr/bin/env bash
# The small job of examples/distributed/README.md under torchrun: torchrun starts 2 processes of
# fairseq-cpp-train (--no-python). Each process reads its rank from torchrun's environment
# (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE): mode=torchrun.
#
#   examples/distributed/torchrun.sh [BUILD_DIR] [DATA_DIR] [fairseq-cpp-train argument ...]
#
# BUILD_DIR, DATA_DIR and further arguments: as in spawn.sh.
# TORCHRUN: the torchrun to use (default: the project's .venv/bin/torchrun, which tools/setup.sh
#   --torch wheel makes, else torchrun on PATH). It must come from PyTorch 2.x: Debian 12's
#   /usr/bin/torchrun (python3-torch 1.13) fails on Python 3.11 before it starts any worker, and it does
#   not know the spelling --no-python.
# TORCHRUN_ARGS: torchrun's placement flags (default: --standalone, one node on a free port). For 2 nodes,
#   run this on each node:
#     TORCHRUN_ARGS="--nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=HOST0:29500 --rdzv-id=JOB" examples/distributed/torchrun.sh
#   (the form of the tests in tests/distributed/torchrun_test.cpp), and add --max-restarts=N to let torchrun
#   restart the group after a failure: it resumes from checkpoint_last.pt.
# Checkpoints go to checkpoints/distributed-torchrun/. A second run resumes from its checkpoint_last.pt.
set -euo pipefail
root=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
source "$root/examples/distributed/job.sh"
job_setup torchrun.sh "$root" "${1:-}" "${2:-}"
shift $(($# < 2 ? $# : 2))

default_torchrun=torchrun
[[ -x $root/.venv/bin/torchrun ]] && default_torchrun=$root/.venv/bin/torchrun
torchrun=${TORCHRUN:-$default_torchrun}
path=$(command -v "$torchrun" || true)
[[ -n $path ]] || { echo "torchrun.sh: $torchrun not found; set TORCHRUN to a PyTorch 2.x torchrun" >&2; exit 2; }
if [[ $(readlink -f "$path") == /usr/bin/torchrun ]] &&
  dpkg-query -W -f='${Version}' python3-torch 2>/dev/null | grep -q '^1\.'; then
  echo "torchrun.sh: $path is Debian's PyTorch 1.13 torchrun, which fails on Python 3.11 before it starts" \
    "a worker; set TORCHRUN to a PyTorch 2.x torchrun" >&2
  exit 2
fi
read -r -a placement <<<"${TORCHRUN_ARGS:---standalone}"

# No distributed_world_size here: WORLD_SIZE from torchrun is the truth (a different value in the
# config is refused).
exec "$torchrun" "${placement[@]}" --nproc_per_node=2 --no-python \
  "$build/fairseq-cpp-train" "${job[@]}" --save-dir "$root/checkpoints/distributed-torchrun" "$@"
