#!/usr/bin/env bash
# The shortened demo end to end (CTest `tools.demo`, label slow): tools/demo.sh with 2 worker
# processes of 512 tokens a batch and UPDATES updates: corpus -> SentencePiece + binarization -> training (Gloo over
# TCP on localhost) -> beam search on the test split -> BLEU, examples and the loss-curve PNG.
# The BLEU floor (FLOOR) is far above what an untrained model scores: copying the English source
# scores about 2 BLEU against the German references, an untrained model's output about 0; these
# 200 updates score about 18 (1,024 tokens a worker scored 44, for 1.4x the test's CPU time; fewer
# updates with a shorter warm-up learned less, not more).
# PRECISION (DEMO_PRECISION: auto, bf16 or fp32) defaults to auto, bf16 on a CPU that multiplies
# bf16 in hardware and fp32 elsewhere; the training log must name the precision chosen.
# Usage: demo_test.sh SOURCE_DIR BUILD_DIR [UPDATES] [FLOOR] [PRECISION]
set -uo pipefail
usage="usage: demo_test.sh SOURCE_DIR BUILD_DIR [UPDATES] [FLOOR] [PRECISION]"
src=${1:?$usage}
build=${2:?$usage}
updates=${3:-200}
floor=${4:-10}
precision=${5:-auto}
expected=$precision
if [ "$precision" = auto ]; then
  expected=fp32
  if grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo; then expected=bf16; fi
fi
dir=$(mktemp -d /tmp/fsq-demo-XXXXXX)
trap 'rm -rf "$dir"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/check.sh"

DEMO_DIR="$dir" BUILD_DIR="$build" DEMO_SETUP=0 DEMO_MIN_BLEU="$floor" DEMO_PRECISION="$precision" \
  "$src/tools/demo.sh" distributed_training.distributed_world_size=2 dataset.max_tokens=512 \
  optimization.max_update="$updates" \
  >"$dir/out.txt" 2>&1
code=$?
cat "$dir/out.txt"
check "demo.sh exits 0 with BLEU >= $floor (exit code $code)" [ "$code" -eq 0 ]
check "two worker processes trained" grep -q "rank=0/2 " "$dir/out.txt"
check "the training ran in $expected (DEMO_PRECISION $precision)" grep -q "; precision $expected\b" "$dir/train.log"
check "training stopped at $updates updates" grep -q "num_updates $updates\b\|\"num_updates\": $updates\b\|num_updates=$updates\b" "$dir/train.log"
check "the best checkpoint exists" [ -s "$dir/checkpoints/checkpoint_best.pt" ]
check "the loss curve is a PNG" [ "$(head -c 8 "$dir/loss.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]
check "1,000 test hypotheses" [ "$(grep -c '^H-' "$dir/generate-test.txt" 2>/dev/null)" = 1000 ]
check "five examples, each S/T/H" [ "$(grep -cE '^  [STH]  ' "$dir/out.txt")" = 15 ]
bleu=$(sed -n 's/^demo: test BLEU \([0-9.]*\) .*/\1/p' "$dir/out.txt")
check "BLEU printed and >= $floor (got '$bleu')" awk -v b="${bleu:-0}" -v f="$floor" 'BEGIN {exit !(b >= f)}'
# The same floor rejects a model that did not learn: the source copied as the hypothesis.
"$build/fairseq-cpp-eval" score --sys "$dir/raw/test.en" --ref "$dir/raw/test.de" --metric bleu >"$dir/copy.score"
copy=$(sed -n 's/^BLEU|[^ ]* = \([0-9.]*\) .*/\1/p' "$dir/copy.score")
check "copying the source scores below the floor (got '$copy')" awk -v b="${copy:-100}" -v f="$floor" 'BEGIN {exit !(b < f)}'

check_summary "demo_test: "
