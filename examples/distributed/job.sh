# The small job of examples/distributed/README.md, shared by spawn.sh, torchrun.sh and slurm.sbatch
# (sourced, not run). `job_setup NAME ROOT [BUILD_DIR] [DATA_DIR]` checks the build and the data and
# sets `build` and `job`, the fairseq-cpp-train arguments: a transformer_tiny on Multi30k for 200
# updates. The caller drops the first two of its own arguments and passes the rest after `job`.
# DATA_DIR defaults to data-bin/multi30k.en-de (examples/multi30k/README.md, step 2), or to
# ../shared/fixtures/fairseq-v0.9/data-bin when that directory does not exist.
job_setup() {
  local name=$1 root=$2 data=${4:-}
  build=${3:-$root/build}
  if [[ -z $data ]]; then
    data=$root/data-bin/multi30k.en-de
    [[ -d $data ]] || data=$root/../shared/fixtures/fairseq-v0.9/data-bin
  fi
  [[ -x $build/fairseq-cpp-train ]] || { echo "$name: no $build/fairseq-cpp-train (run tools/setup.sh)" >&2; exit 2; }
  [[ -f $data/dict.en.txt && -f $data/dict.de.txt ]] ||
    { echo "$name: $data is not an en-de data-bin (see examples/multi30k/README.md)" >&2; exit 2; }
  # On GPU nodes, drop --cpu (and, under SLURM, ask for one task per GPU).
  job=(
    --data "$data" --source-lang en --target-lang de
    --arch transformer_tiny --share-all-embeddings
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1
    --optimizer adam --adam-betas "(0.9, 0.98)" --lr 0.001 --lr-scheduler inverse_sqrt --warmup-updates 100
    --max-tokens 4096 --max-update 200
    --cpu --log-interval 10 --no-epoch-checkpoints
  )
}
