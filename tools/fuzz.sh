#!/usr/bin/env bash
# The long fuzzing campaign (fuzz/README.md): builds the fuzz targets into build-fuzz/ (clang,
# ASan + UBSan), runs each for N seconds on its corpus and regressions, one after the other, and
# prints a table: target, seconds, executions, exec/s, corpus size, findings. Exits 1 on a finding;
# the inputs are in $FUZZ_OUT/<target>/artifacts/.
#   tools/fuzz.sh                             # every target, 600 s each
#   tools/fuzz.sh 60 fuzz_config fuzz_hostlist
#   FUZZ_OUT=/tmp/campaign tools/fuzz.sh      # default: build-fuzz/campaign
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-600}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_checkpoint fuzz_checkpoint_records fuzz_config fuzz_indexed_dataset
  fuzz_dictionary fuzz_sacrebleu_tokenizers fuzz_hostlist)
build_dir=${BUILD_DIR:-$root/build-fuzz}
out=${FUZZ_OUT:-$build_dir/campaign}

if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ -DFSQ_FUZZ=ON \
    -DFSQ_BUILD_TESTS=OFF -DFSQ_PCH=OFF
fi
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" --target "${targets[@]}"

rows=()
found=0
for t in "${targets[@]}"; do
  dir=$out/$t
  mkdir -p "$dir/corpus" "$dir/artifacts"
  seeds=()
  for d in "$root/fuzz/corpus/$t" "$root/fuzz/regressions/$t"; do [ -d "$d" ] && seeds+=("$d"); done
  echo "fuzz: $t for $seconds s (log: $dir/log)"
  start=$(date +%s)
  # -rss_limit_mb/-malloc_limit_mb: an allocation of a size that a file claims is a finding.
  UBSAN_OPTIONS=print_stacktrace=1 nice -n 10 "$build_dir/fuzz/$t" -max_total_time="$seconds" -print_final_stats=1 \
    -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -artifact_prefix="$dir/artifacts/" \
    "$dir/corpus" "${seeds[@]}" >"$dir/log" 2>&1 || true
  ran=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  corpus=$(grep -o 'corp: [0-9]*' "$dir/log" | tail -1 | cut -d' ' -f2)
  findings=$(find "$dir/artifacts" -type f | wc -l)
  [ "$findings" -gt 0 ] && found=1
  rows+=("$t $ran ${execs:-0} $((${execs:-0} / (ran > 0 ? ran : 1))) ${corpus:-0} $findings")
done

printf '\n%-28s %8s %12s %8s %8s %9s\n' target seconds executions exec/s corpus findings
for row in "${rows[@]}"; do
  # shellcheck disable=SC2086
  printf '%-28s %8s %12s %8s %8s %9s\n' $row
done
if [ "$found" -ne 0 ]; then
  echo "fuzz: findings; their inputs are in $out/<target>/artifacts/" >&2
  exit 1
fi
