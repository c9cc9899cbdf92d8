#!/usr/bin/env bash
# The demo: from a fresh clone to a trained English->German translator, in one command.
#   1. set-up (tools/setup.sh: the missing Debian packages, then the build; quick when built)
#   2. the synthetic demo corpus (tools/make-demo-corpus, 30,000 training pairs, seed 1)
#   3. fairseq-cpp-preprocess: a joint SentencePiece model, dictionaries, binarized data-bin
#   4. fairseq-cpp-train configs/demo.yaml, with a progress bar on a terminal
#   5. fairseq-cpp-generate on the test split (beam 5), fairseq-cpp-eval: BLEU and chrF
#   6. five example translations next to their references, the loss curve as a PNG
# Everything goes under data/demo/ (not tracked); every run starts the training afresh.
#
#   tools/demo.sh                                                   # one process
#   tools/demo.sh distributed_training.distributed_world_size=2     # two worker processes
#   DEMO_DIR=/tmp/demo tools/demo.sh optimization.max_update=300    # elsewhere, shorter
# The training runs in bf16 where the CPU multiplies bf16 in hardware (AVX512_BF16 or AMX-BF16),
# in float32 elsewhere (bf16 would be slower there): the CPU's flags decide, also where the training
# runs on a GPU. DEMO_PRECISION=bf16 or fp32 chooses instead, and so does an argument that sets
# common.bf16 or common.fp16.
# Arguments are configuration overrides for fairseq-cpp-train; BUILD_DIR names the build, and
# DEMO_SETUP=0 skips the set-up (the test does). Exits 1 when the test BLEU is
# below DEMO_MIN_BLEU (default 90): a model that learned nothing shows it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
demo=${DEMO_DIR:-$root/data/demo}
min_bleu=${DEMO_MIN_BLEU:-90}
precision=${DEMO_PRECISION:-auto}
if [ "$precision" = auto ]; then
  precision=fp32
  if grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo 2>/dev/null; then precision=bf16; fi
  for arg in "$@"; do
    case $arg in *bf16* | *fp16*) precision="set by the arguments" ;; esac
  done
fi
case $precision in
  bf16) precision_args=(common.bf16=true) ;;
  fp32 | "set by the arguments") precision_args=() ;;
  *) echo "demo: DEMO_PRECISION must be auto, bf16 or fp32, not '$precision'" >&2; exit 2 ;;
esac
start=$(date +%s)
step() { printf '\n== %s (%d s)\n' "$1" "$(($(date +%s) - start))"; }
# logged LOG COMMAND...: runs the command with its standard error in LOG, shown if it fails.
logged() {
  local log=$1 code=0
  shift
  "$@" 2>"$log" || { code=$?; cat "$log" >&2; exit "$code"; }
}

if [ "${DEMO_SETUP:-1}" != 0 ]; then
  step "set-up and build"
  "$root/tools/setup.sh"
fi

step "demo corpus"
"$root/tools/make-demo-corpus" --seed 1 --outdir "$demo/raw"

step "SentencePiece and binarization"
rm -rf "$demo/bin"
# 600 pieces: the corpus has about 1,100 word types; most words stay whole, rare ones split.
logged "$demo/preprocess.log" "$build/fairseq-cpp-preprocess" --source-lang en --target-lang de --joined-dictionary \
  --trainpref "$demo/raw/train" --validpref "$demo/raw/valid" --testpref "$demo/raw/test" \
  --destdir "$demo/bin" --spm-vocab-size 600 --workers 2
grep '\[preprocess\]' "$demo/preprocess.log"  # the rest is SentencePiece's trainer talking

step "training ($precision)"
rm -rf "$demo/checkpoints" "$demo/train.log"
"$build/fairseq-cpp-train" "$root/configs/demo.yaml" task.data="$demo/bin" \
  checkpoint.save_dir="$demo/checkpoints" common.log_file="$demo/train.log" ${precision_args[@]+"${precision_args[@]}"} "$@"

step "translating the test split"
logged "$demo/generate.log" "$build/fairseq-cpp-generate" "$demo/bin" --path "$demo/checkpoints/checkpoint_best.pt" \
  --gen-subset test --beam 5 --batch-size 128 --remove-bpe sentencepiece --results-path "$demo"
out="$demo/generate-test.txt"
grep '^H-' "$out" | sort -t- -k2 -n | cut -f3 >"$demo/test.hyp.de"
"$build/fairseq-cpp-eval" score --sys "$demo/test.hyp.de" --ref "$demo/raw/test.de" | tee "$demo/test.score"

echo
echo "Five test sentences (S = source, T = reference, H = fairseq-cpp):"
for id in 0 1 2 3 4; do
  for kind in S T H; do
    line=$(grep -P "^$kind-$id\t" "$out" | cut -f2- | sed 's/^-\?[0-9.]*\t//' || true)
    printf '  %s  %s\n' "$kind" "$line"
  done
  echo
done

"$root/tools/plot-log" "$demo/train.log" -o "$demo/loss.png" >/dev/null
bleu=$(sed -n 's/^BLEU|[^ ]* = \([0-9.]*\) .*/\1/p' "$demo/test.score")
echo "checkpoint:  $demo/checkpoints/checkpoint_best.pt"
echo "loss curve:  $demo/loss.png  (log: $demo/train.log)"
echo "translations: $out"
echo "demo: test BLEU $bleu after $(($(date +%s) - start)) s"
if awk -v b="$bleu" -v m="$min_bleu" 'BEGIN {exit !(b < m)}'; then
  echo "demo: test BLEU $bleu is below $min_bleu: the model did not learn the task" >&2
  exit 1
fi
