#!/usr/bin/env bash
# The small job of examples/distributed/README.md on one node: fairseq-cpp-train starts 2 CPU
# worker processes itself (mode=local-spawn), and they talk over Gloo.
#
#   examples/distributed/spawn.sh [BUILD_DIR] [DATA_DIR] [fairseq-cpp-train argument ...]
#
# BUILD_DIR: where fairseq-cpp-train is (default: build/).
# DATA_DIR: a Multi30k en-de data-bin. The default is $FSQ_DATA, else data-bin/multi30k.en-de
#   (examples/multi30k/README.md, step 2); without either, the script stops and says so.
# Further arguments go to fairseq-cpp-train after the job's own, so they win ("" keeps a default):
#   examples/distributed/spawn.sh "" "" --dry-run-distributed     # print the resolved topology, exit
#   examples/distributed/spawn.sh "" "" --max-update 50 --log-all-ranks
# Checkpoints go to checkpoints/distributed-spawn/. A second run resumes from its checkpoint_last.pt.
set -euo pipefail
root=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
source "$root/examples/distributed/job.sh"
job_setup spawn.sh "$root" "${1:-}" "${2:-}"
shift $(($# < 2 ? $# : 2))

# distributed_world_size > 1 and no launcher in the environment: spawn that many workers here.
exec "$build/fairseq-cpp-train" "${job[@]}" --save-dir "$root/checkpoints/distributed-spawn" \
  distributed_training.distributed_world_size=2 "$@"
