#!/usr/bin/env bash
# The test command (README's quick start, and all that CI runs): set-up if needed, then build and
# test both lanes: Debian's LibTorch 1.13 in build/, PyTorch's wheel (LibTorch 2.x with CUDA) in
# build-wheel/. The wheel lane also runs the tests with label torchrun.
#   tools/test.sh                  # both lanes, every suite but the GPU one (unless a GPU is present)
#   tools/test.sh -L unit          # extra arguments go to ctest, in each lane
#   FSQ_LANES=wheel tools/test.sh  # one lane only (debian or wheel)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
read -r -a lanes <<<"${FSQ_LANES:-debian wheel}"
start=$(date +%s)

for lane in "${lanes[@]}"; do
  case "$lane" in
    debian | wheel) ;;
    *) echo "test: FSQ_LANES names debian and wheel, not \`$lane'" >&2; exit 2 ;;
  esac
  BUILD_DIR=$root/$([ "$lane" = debian ] && echo build || echo build-wheel) "$root/tools/setup.sh" --torch "$lane"
  echo "test: $lane lane built after $(($(date +%s) - start)) s"
done

labels=()
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || labels=(-LE gpu)
failed=()
for lane in "${lanes[@]}"; do
  build_dir=$root/$([ "$lane" = debian ] && echo build || echo build-wheel)
  echo "test: $lane lane ($build_dir)"
  (cd "$build_dir" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 1200 "${labels[@]}" "$@") ||
    failed+=("$lane")
  echo "test: $lane lane tested after $(($(date +%s) - start)) s"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "test: FAILED in the ${failed[*]} lane(s) after $(($(date +%s) - start)) s" >&2
  exit 1
fi
echo "test: done after $(($(date +%s) - start)) s"
