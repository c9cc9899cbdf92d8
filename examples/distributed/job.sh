# The small job of examples/distributed/README.md, shared by spawn.sh, torchrun.sh and slurm.sbatch
# (sourced, not run). `job_setup NAME ROOT [BUILD_DIR] [DATA_DIR]` checks the build and the data and
# sets `build` and `job`, the fairseq-cpp-train arguments: a transformer_tiny on Multi30k for 200
# updates. The caller drops the first two of its own arguments and passes the rest after `job`.
# DATA_DIR defaults to $FSQ_DATA, else to data-bin/multi30k.en-de (examples/multi30k/README.md, step 2).
job_setup() {
  local name=$1 root=$2 data=${4:-${FSQ_DATA:-}}
  build=${3:-$root/build}
  local given=1
  [[ -n $data ]] || { data=$root/data-bin/multi30k.en-de; given=0; }
  [[ -x $build/fairseq-cpp-train ]] || { echo "$name: no $build/fairseq-cpp-train (run tools/setup.sh)" >&2; exit 2; }
  if [[ $given == 0 && ! -d $data ]]; then
    echo "$name: no data-bin given and no $data; pass a Multi30k en-de data-bin as DATA_DIR (the second" \
      "argument) or set FSQ_DATA to one (examples/multi30k/README.md, step 2, makes data-bin/multi30k.en-de)" >&2
    exit 2
  fi
  [[ -f $data/dict.en.txt && -f $data/dict.de.txt ]] ||
    { echo "$name: DATA_DIR $data is not an en-de data-bin: it has no dict.en.txt and dict.de.txt (see examples/multi30k/README.md)" >&2; exit 2; }
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
