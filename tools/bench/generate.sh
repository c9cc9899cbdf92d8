#!/usr/bin/env bash
# fairseq-cpp-generate's speed with the fairseq v0.9 fixture checkpoint (Multi30k test, 1,000
# sentences, beam 5, batch 128, 2 threads) against fairseq-generate's figure from the fixture
# README (42.26 sentences/s, 632.82 tokens/s on a quiet machine of this class), plus, run in the
# same invocation, the same search one batch at a time on both intra-op threads (how fairseq and
# fairseq-cpp before it searched) as a baseline.
#
#   tools/bench/generate.sh [BUILD_DIR] [RUNS]        (default: build, 3 runs; prints medians)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$here/build}"
runs="${2:-3}"
fixture="$here/../shared/fixtures/fairseq-v0.9"
[[ -f "$fixture/checkpoint_best.pt" ]] || { echo "fixture missing: $fixture/checkpoint_best.pt" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$here/tools/fairseq-import" "$fixture/checkpoint_best.pt" "$tmp/imported.pt" >/dev/null
# Passive OpenMP waits: LibTorch's 2 OpenMP threads spinning between parallel regions compete with
# OpenBLAS's own 2 GEMM threads; measured on a quiet 2-core machine: 37-40 s with spinning, 15 s
# without (and 15 s with --cpu-threads 1, where OpenBLAS alone uses both cores).
export OMP_WAIT_POLICY=PASSIVE

echo "fairseq-cpp-generate, $runs runs:"
for i in $(seq "$runs"); do
  "$build/fairseq-cpp-generate" "$fixture/data-bin" --path "$tmp/imported.pt" --gen-subset test --beam 5 \
    --batch-size 128 --remove-bpe sentencepiece --cpu-threads 2 --quiet 2>/dev/null | grep '^| Translated'
done | tee "$tmp/runs.txt"
median="$(sed -E 's/.*\(([0-9.]+) sentences\/s, ([0-9.]+) tokens\/s\).*/\1 \2/' "$tmp/runs.txt" | sort -n | \
  awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}')"
read -r sps tps <<<"$median"
echo
printf '%-46s %12s %11s %9s\n' "program (beam 5, batch 128, 2 threads)" "sentences/s" "tokens/s" "vs fairseq"
printf '%-46s %12.2f %11.2f %9s\n' "fairseq-generate v0.9 (README figure)" 42.26 632.82 "1.00x"
printf '%-46s %12.2f %11.2f %8.2fx\n' "fairseq-cpp-generate (median of $runs)" "$sps" "$tps" "$(echo "$sps / 42.26" | bc -l)"
echo
echo "The same search in one process: one batch at a time (baseline) vs parts on workers (median of $runs):"
"$build/tools/bench/fsq_bench_generate" "$fixture/data-bin" "$tmp/imported.pt" --threads 2 --runs "$runs" 2>/dev/null
