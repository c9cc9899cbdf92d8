#!/usr/bin/env bash
# How long translation takes to load a model, against a build of the previous way: for each of
# RUNS rounds, the baseline's fairseq-cpp-interactive and then this build's, each a whole process
# that loads CHECKPOINT (verified whole, the model built, its weights copied in and prepared as
# --quantize QUANTIZE asks) and translates one line, greedily, into at most 2 tokens. Prints per
# build the medians of the whole process (/usr/bin/time), of the load (the log's "loaded ... after
# X s": from opening the checkpoint to the weights copied into the model) and of peak RSS, and the
# whole process's ratio.
#
#   tools/bench/load.sh BUILD_DIR BASELINE_BUILD_DIR CHECKPOINT DATA_BIN [RUNS] [QUANTIZE] [SPM]
#     RUNS: default 3. QUANTIZE: none (default) or int8. SPM: the SentencePiece model that encodes
#     the line (default: DATA_BIN/spm.model).
# The baseline is a build of an earlier commit (git worktree add /tmp/old REV; tools/setup.sh
# there), or a folder holding its fairseq-cpp-interactive and fairseq-cpp-interactive.bin.
set -euo pipefail
[[ $# -ge 4 ]] || { sed -n "2,14p" "$0" >&2; exit 2; }
build=$1 baseline=$2 checkpoint=$3 data=$4 runs=${5:-3} quantize=${6:-none} spm=${7:-$4/spm.model}
[ "$runs" -ge 1 ] 2>/dev/null || { echo "load.sh: RUNS is a positive number, not \`$runs'" >&2; exit 2; }
for b in "$build" "$baseline"; do
  [[ -x "$b/fairseq-cpp-interactive" ]] || { echo "load.sh: no fairseq-cpp-interactive in $b" >&2; exit 2; }
done
[[ -f "$checkpoint" ]] || { echo "load.sh: no checkpoint $checkpoint" >&2; exit 2; }
command -v bc >/dev/null || { echo "load.sh: needs bc (apt-get install bc)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE  # as tools/bench/generate.sh

one() {  # NAME BUILD RUN: one whole process; $work/NAME.RUN.{log,time}
  local out="$work/$1.$3"
  echo "a man is walking down the street ." | /usr/bin/time -f '%e %M' -o "$out.time" \
    "$2/fairseq-cpp-interactive" "$data" --path "$checkpoint" --beam 1 --max-len-a 0 --max-len-b 2 --cpu-threads 2 \
    --quantize "$quantize" --sentencepiece-model "$spm" >"$out.txt" 2>"$out.log" || true
  grep -q '^H-' "$out.txt" || { echo "load.sh: $1 translated nothing; its log:" >&2; cat "$out.log" >&2; exit 1; }
}
for i in $(seq "$runs"); do
  one baseline "$baseline" "$i"
  one ours "$build" "$i"
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A wall loaded rss
for name in baseline ours; do
  wall[$name]=$(cat "$work/$name".*.time | awk '{print $1}' | median)
  rss[$name]=$(cat "$work/$name".*.time | awk '{printf "%.0f\n", $2 / 1024}' | median)
  loaded[$name]=$(sed -n 's/.*\] loaded .* after \([0-9.]*\) s.*/\1/p' "$work/$name".*.log | median)
  [[ -n "${loaded[$name]}" ]] || { echo "load.sh: $name's log has no \"loaded ... after X s\" line" >&2; exit 1; }
done
echo "loading $(basename "$checkpoint") ($(du -m "$checkpoint" | cut -f1) MB), --quantize $quantize," \
  "one line translated, medians of $runs, $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
printf '%-10s %10s %12s %10s %10s\n' build "whole s" "load s" "peak MiB" "vs base"
for name in baseline ours; do
  printf '%-10s %10.2f %12.2f %10d %9.2fx\n' "$name" "${wall[$name]}" "${loaded[$name]}" "${rss[$name]}" \
    "$(echo "${wall[baseline]} / ${wall[$name]}" | bc -l)"
done
