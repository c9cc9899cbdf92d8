#!/usr/bin/env bash
# The random-kill soak (issue 23): a 2-worker Multi30k run (the fixture's data-bin) is killed with
# SIGKILL at KILLS random moments, each time a random rank or the launcher, and restarted with the
# same command; it must end with the parameters of an uninterrupted run, and no stop may take
# longer than the run's 30 s timeout. Prints a table of the trials. CI runs 4 kills (label slow).
#   tools/soak.sh [BUILD_DIR] [KILLS] [SEED]      # defaults: ./build, 20, 23
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
binary=$build/tests/fsq_trainer_fault_tests
if [ ! -x "$binary" ]; then
  echo "soak: $binary is missing: build the project with its tests first (tools/setup.sh)" >&2
  exit 2
fi
FSQ_SOAK_KILLS=${2:-20} FSQ_SOAK_SEED=${3:-23} "$binary" \
  --gtest_filter='Faults.RandomKillsOfARankOrTheLauncherEndWithTheParametersOfAnUninterruptedRun'
