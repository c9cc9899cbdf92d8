#!/usr/bin/env bash
# The small job of examples/distributed/README.md on one node: fairseq-cpp-train starts 2 CPU
# worker processes itself (mode=local-spawn), and they talk over Gloo.
#
#   examples/distributed/spawn.sh [BUILD_DIR] [DATA_DIR] [fairseq-cpp-train argument ...]
#
# BUILD_DIR: where fairseq-cpp-train is (default: build/).
# DATA_DIR: a Multi30k en-de data-bin. The default is data-bin/multi30k.en-de (examples/multi30k/README.md,
#   step 2), or ../shared/fixtures/fairseq-v0.9/data-bin when that directory does not exist.
# Further arguments go to fairseq-cpp-train after the job's own, so they win ("" keeps a default):
#   examples/distributed/spawn.sh "" "" --dry-run-distributed     # print the resolved topology, exit
#   examples/distributed/spawn.sh "" "" --max-update 50 --log-all-ranks
# Checkpoints go to checkpoints/distributed-spawn/. A second run resumes from its checkpoint_last.pt.
set -euo pipefail
root=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
build=${1:-$root/build}
data=${2:-}
shift $(($# < 2 ? $# : 2))
if [[ -z $data ]]; then
  data=$root/data-bin/multi30k.en-de
  [[ -d $data ]] || data=$root/../shared/fixtures/fairseq-v0.9/data-bin
fi
[[ -x $build/fairseq-cpp-train ]] || { echo "spawn.sh: no $build/fairseq-cpp-train (run tools/setup.sh)" >&2; exit 2; }
[[ -f $data/dict.en.txt && -f $data/dict.de.txt ]] ||
  { echo "spawn.sh: $data is not an en-de data-bin (see examples/multi30k/README.md)" >&2; exit 2; }

# The job: a transformer_tiny on Multi30k for 200 updates (the same in spawn.sh, torchrun.sh, slurm.sbatch).
job=(
  --data "$data" --source-lang en --target-lang de
  --arch transformer_tiny --share-all-embeddings
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1
  --optimizer adam --adam-betas "(0.9, 0.98)" --lr 0.001 --lr-scheduler inverse_sqrt --warmup-updates 100
  --max-tokens 4096 --max-update 200
  --cpu --log-interval 10 --no-epoch-checkpoints
)

# distributed_world_size > 1 and no launcher in the environment: spawn that many workers here.
exec "$build/fairseq-cpp-train" "${job[@]}" --save-dir "$root/checkpoints/distributed-spawn" \
  distributed_training.distributed_world_size=2 "$@"
