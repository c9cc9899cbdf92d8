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
build_pid=
build_log=$(mktemp)
# A process and its descendants (a background build: setup.sh, cmake, ninja and the compilers).
kill_tree() {
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
trap '[ -z "$env_pid" ] || kill_tree "$env_pid"; [ -z "$build_pid" ] || kill_tree "$build_pid"
  rm -f "$env_log" "$build_log"' EXIT
if [[ " ${lanes[*]} " == *" wheel "* && "${lanes[0]}" != wheel ]]; then
  "$root/tools/setup.sh" --torch wheel --packages-only
  "$root/tools/setup.sh" --torch wheel --no-build >"$env_log" 2>&1 &
  env_pid=$!
fi
for lane in "${lanes[@]}"; do
  case "$lane" in
    debian | wheel | fuzz) ;;
    *) echo "test: FSQ_LANES names debian, wheel and fuzz, not \`$lane'" >&2; exit 2 ;;
  esac
done

# Builds a lane (set-up included).
build_lane() {
  case "$1" in
    debian | wheel) BUILD_DIR=$(build_dir_of "$1") "$root/tools/setup.sh" --torch "$1" ;;
    fuzz) BUILD_DIR=$(build_dir_of fuzz) "$root/tools/setup.sh" --fuzz ;;
  esac
}

# Starts a lane's build in the background, beside the tests of the lane before it, at idle priority
# (SCHED_IDLE, inherited by the compilers): it takes only the time those tests leave the cores (they
# wait on timeouts, restarts and program start-ups: about an eighth of 2 cores), not theirs. The
# wheel lane's build starts once its Python environment is ready.
start_build() {
  if [ "$1" = wheel ] && [ -n "$env_pid" ]; then
    wait "$env_pid" || { cat "$env_log" >&2; echo "test: the wheel lane's environment failed" >&2; exit 1; }
    env_pid=
    cat "$env_log"
    echo "test: wheel lane's environment ready after $(($(date +%s) - start)) s"
  fi
  (
    chrt --idle -p 0 "$BASHPID" >/dev/null 2>&1 || renice -n 19 -p "$BASHPID" >/dev/null
    build_lane "$1"
  ) >"$build_log" 2>&1 &
  build_pid=$!
}

# Waits for the build start_build started; prints its output. Returns its status.
finish_build() {
  local status=0
  wait "$build_pid" || status=$?
  build_pid=
  cat "$build_log"
  [ "$status" -eq 0 ] && echo "test: $1 lane built after $(($(date +%s) - start)) s"
  return "$status"
}

# Runs a lane's tests; returns their status.
test_lane() {
  local lane=$1 build_dir costs log skip status=0
  shift
  build_dir=$(build_dir_of "$lane")
  echo "test: $lane lane ($build_dir)"
  # A fresh build folder starts from the tests' recorded times (CTest's own file, kept up to date by
  # every later run there), so that the longest tests start first rather than last.
  costs=$build_dir/Testing/Temporary/CTestCostData.txt
  if [ ! -f "$costs" ] && [ -f "$root/tests/ctest_costs/$lane.txt" ]; then
    mkdir -p "$(dirname "$costs")" && cp "$root/tests/ctest_costs/$lane.txt" "$costs"
  fi
  if [ "$lane" = fuzz ]; then  # each target's smoke run on its corpus and regressions
    (cd "$build_dir" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" -L fuzz) || status=1
  else
    (cd "$build_dir" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 1200 "${labels[@]}" "$@") ||
      status=1
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
  return "$status"
}

labels=()
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || labels=(-LE gpu)
failed=()
# The first lane's build alone; then each lane's tests beside the next lane's build.
build_lane "${lanes[0]}"
echo "test: ${lanes[0]} lane built after $(($(date +%s) - start)) s"
built=1
for i in "${!lanes[@]}"; do
  next=${lanes[$((i + 1))]:-}
  [ -z "$next" ] || start_build "$next"
  if [ "$built" = 1 ]; then
    test_lane "${lanes[$i]}" "$@" || failed+=("${lanes[$i]}")
  fi
  built=1
  if [ -n "$next" ] && ! finish_build "$next"; then
    echo "test: the $next lane's build failed" >&2
    failed+=("$next")
    built=0
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "test: FAILED in the ${failed[*]} lane(s) after $(($(date +%s) - start)) s" >&2
  exit 1
fi
echo "test: done after $(($(date +%s) - start)) s"
