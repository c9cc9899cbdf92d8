#!/usr/bin/env bash
# The test command (README's quick start, and all that CI runs): set-up if needed, build, ctest.
#   tools/test.sh                  # every suite but the GPU one (unless CUDA is present)
#   tools/test.sh -L unit          # extra arguments go to ctest
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
start=$(date +%s)

"$root/tools/setup.sh"
echo "test: build ready after $(($(date +%s) - start)) s"

labels=()
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || labels=(-LE gpu)
cd "$build_dir"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 1200 "${labels[@]}" "$@"
echo "test: done after $(($(date +%s) - start)) s"
