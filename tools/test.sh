#!/usr/bin/env bash
# The test command (README's quick start, and all that CI runs): set-up if needed, then build and
# test the lanes: Debian's LibTorch 1.13 in build/, PyTorch's wheel (LibTorch 2.x with CUDA) in
# build-wheel/, and the fuzz targets' smoke runs (clang, ASan + UBSan) in build-fuzz/. The wheel
# lane also runs the tests with label torchrun.
#   tools/test.sh                  # every lane, every suite but the GPU one (unless a GPU is present)
#   tools/test.sh -L unit          # extra arguments go to ctest, in the debian and wheel lanes
#   FSQ_LANES=wheel tools/test.sh  # one lane only (debian, wheel or fuzz)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
read -r -a lanes <<<"${FSQ_LANES:-debian wheel fuzz}"
start=$(date +%s)

# The build folder of a lane.
build_dir_of() {
  case "$1" in
    debian) echo "$root/build" ;;
    wheel) echo "$root/build-wheel" ;;
    fuzz) echo "$root/build-fuzz" ;;
  esac
}

# With the wheel lane after another: every lane's Debian packages first (one apt-get), then the wheel
# lane's Python environment in the background while the lanes before it build (pip downloads and
# unpacks several GB on a fresh machine: the network and the disk, where the build needs the CPU).
env_pid=
env_log=$(mktemp)
trap '[ -z "$env_pid" ] || kill "$env_pid" 2>/dev/null; rm -f "$env_log"' EXIT
if [[ " ${lanes[*]} " == *" wheel "* && "${lanes[0]}" != wheel ]]; then
  "$root/tools/setup.sh" --torch wheel --packages-only
  "$root/tools/setup.sh" --torch wheel --no-build >"$env_log" 2>&1 &
  env_pid=$!
fi

for lane in "${lanes[@]}"; do
  if [ "$lane" = wheel ] && [ -n "$env_pid" ]; then
    wait "$env_pid" || { cat "$env_log" >&2; echo "test: the wheel lane's environment failed" >&2; exit 1; }
    env_pid=
    cat "$env_log"
    echo "test: wheel lane's environment ready after $(($(date +%s) - start)) s"
  fi
  case "$lane" in
    debian | wheel) BUILD_DIR=$(build_dir_of "$lane") "$root/tools/setup.sh" --torch "$lane" ;;
    fuzz) BUILD_DIR=$(build_dir_of fuzz) "$root/tools/setup.sh" --fuzz ;;
    *) echo "test: FSQ_LANES names debian, wheel and fuzz, not \`$lane'" >&2; exit 2 ;;
  esac
  echo "test: $lane lane built after $(($(date +%s) - start)) s"
done

labels=()
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || labels=(-LE gpu)
failed=()
for lane in "${lanes[@]}"; do
  build_dir=$(build_dir_of "$lane")
  echo "test: $lane lane ($build_dir)"
  # A fresh build folder starts from the tests' recorded times (CTest's own file, kept up to date by
  # every later run there), so that the longest tests start first rather than last.
  costs=$build_dir/Testing/Temporary/CTestCostData.txt
  if [ ! -f "$costs" ] && [ -f "$root/tests/ctest_costs/$lane.txt" ]; then
    mkdir -p "$(dirname "$costs")" && cp "$root/tests/ctest_costs/$lane.txt" "$costs"
  fi
  if [ "$lane" = fuzz ]; then  # each target's smoke run on its corpus and regressions
    (cd "$build_dir" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" -L fuzz) || failed+=("$lane")
  else
    (cd "$build_dir" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 1200 "${labels[@]}" "$@") ||
      failed+=("$lane")
  fi
  # GoogleTest's skips (a CPU without AVX-512 skips the AVX2-against-AVX-512 checks) are inside the
  # executables' output, which CTest shows only on failure: name them here, with their reasons.
  log=$build_dir/Testing/Temporary/LastTest.log
  skip='^\[  SKIPPED \] .* ([0-9]* ms)$'  # a test's end line; the reason is the line before
  if [ -f "$log" ] && grep -q "$skip" "$log"; then
    echo "test: skipped in the $lane lane on this machine:"
    grep -B1 "$skip" "$log" | grep -v '^--$' | paste - - | sort -u |
      sed -E 's/^(.*)\t\[  SKIPPED \] ([^ ]+) .*/  \2: \1/'
  fi
  echo "test: $lane lane tested after $(($(date +%s) - start)) s"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "test: FAILED in the ${failed[*]} lane(s) after $(($(date +%s) - start)) s" >&2
  exit 1
fi
echo "test: done after $(($(date +%s) - start)) s"
