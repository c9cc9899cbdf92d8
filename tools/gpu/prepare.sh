#!/usr/bin/env bash
# Run on a CPU machine before a device run (see tools/gpu/run.sh): makes `.gpu-deps/` (ignored by
# git), which the run carries:
#   .gpu-deps/prefix          the C++ libraries the GPU machine lacks, from Debian's packages:
#                             $FSQ_SHARED/gpu/prepare-deps.sh's (yaml-cpp, fmt, SentencePiece,
#                             GoogleTest, nlohmann-json) and the project's own needs beyond them
#                             (zlib and OpenSSL's libcrypto for checkpoints, jemalloc for the programs,
#                             gloo's headers: the wheel's LibTorch has none, and c10d's
#                             ProcessGroupGloo.hpp includes them, so a build there needs them;
#                             elfutils' eu-stack, for the threads' stacks of a test that waits)
#   .gpu-deps/prebuilt.tar.xz the wheel lane's programs and tests, built here (BUILD, default
#                             build-wheel: PyTorch 2.11 with CUDA 13, the GPU machine's own), stripped;
#                             .gpu-deps/prebuilt-dir names that folder. The run uses them instead of
#                             compiling there (3-4 of the session's 15 device minutes)
#   .gpu-deps/commit          the commit the run builds (the tree travels without .git)
#   .gpu-deps/cpu-fp32-loss   with --cpu-reference: the Multi30k parity run's validation loss on
#                             this CPU (544 updates, fp32; about 11 minutes on 2 cores), kept from
#                             the last prepare.sh while the code that trains (fairseq_cpp/, cli/,
#                             configs/, CMakeLists.txt) is the same
# and the link `.gpu-shared` to the shared test data ($FSQ_SHARED, default ../shared), through
# which the run carries the fixture's checkpoint, data-bin and translations (carry the paths
# through the link that it prints: the files travel, nothing is copied into the repository).
#   tools/gpu/prepare.sh [--cpu-reference]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
cpu_reference=0
[ "${1:-}" = --cpu-reference ] && cpu_reference=1
build=${BUILD:-build-wheel}
dest=.gpu-deps
head=$(git rev-parse HEAD)
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
  echo "prepare.sh: the tree has uncommitted changes; the programs are built from it as it is" >&2
# What the CPU's parity run depends on: the trees of the code that trains.
code=$(git rev-parse HEAD:fairseq_cpp HEAD:cli HEAD:configs HEAD:CMakeLists.txt | sha1sum | cut -c1-12)
kept='' last=$dest/cpu-fp32-loss
[ -f "$last" ] || last=$root/.gpu-cpu-fp32-loss.kept  # left by a prepare.sh that failed below
if [ -f "$last" ] && [ "$(cut -d' ' -f4 "$last")" = "$code" ]; then
  kept=$(cut -d' ' -f1,2 "$last")
  # (kept beside until the end: a failure below must not lose 10 minutes of CPU)
  [ "$last" = "$root/.gpu-cpu-fp32-loss.kept" ] || cp "$last" "$root/.gpu-cpu-fp32-loss.kept"
fi
rm -rf "$dest"
shared=${FSQ_SHARED:-../shared}
bash "$shared/gpu/prepare-deps.sh" "$dest" >/dev/null
extra=(zlib1g zlib1g-dev libssl3 libssl-dev libjemalloc2 libjemalloc-dev libgloo-dev elfutils libdw1 libasm1 libelf1)
mkdir -p "$dest/debs"
(cd "$dest/debs" && apt-get download "${extra[@]}" >/dev/null)
for d in "$dest"/debs/*.deb; do dpkg -x "$d" "$dest/prefix"; done
# Only what a build or the run uses travels: not the packages' documents and translations,
# GoogleTest's sources (its libraries are there), nor elfutils' programs but eu-stack (4 MiB of
# sources and 3 of programs took the carry to 65 MiB of the 64 allowed).
rm -rf "$dest/debs" "$dest/prefix/usr/share/doc" "$dest/prefix/usr/share/man" "$dest/prefix/usr/share/locale" \
  "$dest/prefix/usr/src"
[ ! -d "$dest/prefix/usr/bin" ] || find "$dest/prefix/usr/bin" -mindepth 1 ! -name eu-stack -delete
# The shared libraries are what the build links; the static archives (but GoogleTest's, which has
# no other) only weigh on the 64 MiB that travel.
find "$dest/prefix" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' -delete
echo "$head" >"$dest/commit"
ln -sfn "$(cd "$shared" && pwd)" .gpu-shared

# The programs and tests, as built here.
[ -f "$build/build.ninja" ] || { echo "prepare.sh: no $build: run tools/setup.sh --torch wheel first" >&2; exit 1; }
buildlog=$(mktemp)
cmake --build "$build" >"$buildlog" 2>&1 || { tail -30 "$buildlog" >&2; echo "prepare.sh: the build failed" >&2; exit 1; }
rm -f "$buildlog"
pack=$(mktemp -d)
trap 'rm -rf "$pack"' EXIT
mkdir -p "$pack/tests" "$pack/tools/bench"
cp "$build"/fairseq-cpp-* "$build/libfsq_spm.so" "$pack/"
cp "$build"/tests/fsq_*_tests "$build/tests/fsq_dist_probe" "$pack/tests/"
cp "$build/tools/bench/fsq_bench_train_step" "$pack/tools/bench/"
find "$pack" -type f -exec strip --strip-unneeded {} +
tar -C "$pack" -cJf "$dest/prebuilt.tar.xz" .
echo "$build" >"$dest/prebuilt-dir"

fx=.gpu-shared/fixtures/fairseq-v0.9
# "LOSS UPDATES COMMIT CODE": run.sh takes it when COMMIT is .gpu-deps/commit.
if [ -n "$kept" ]; then
  echo "$kept $head $code" >"$dest/cpu-fp32-loss"
  rm -f "$root/.gpu-cpu-fp32-loss.kept"
elif [ "$cpu_reference" = 1 ]; then
  logs=$(mktemp -d)
  BUILD=$build tools/gpu/run.sh "$logs" --steps cpu-reference >/dev/null
  [ -f "$logs/cpu-fp32-loss" ] || { echo "prepare.sh: the CPU run failed ($logs)" >&2; exit 1; }
  echo "$(cut -d' ' -f1,2 "$logs/cpu-fp32-loss") $head $code" >"$dest/cpu-fp32-loss"
  rm -rf "$logs"
fi
carried=$(du -cb "$dest" "$fx/checkpoint_best.pt" "$fx/data-bin" "$fx/generate-test-beam5.txt" | tail -1 | cut -f1)
# What travels with the tree: the tracked files and the untracked ones git does not ignore.
tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- | tail -1 | cut -f1)
if (( carried + tree > 64 * 1048576 )); then
  echo "prepare.sh: the run would carry $(( (carried + tree) / 1048576 )) MiB, over the device's 64: it would not travel" >&2
  exit 1
fi
echo "ready: $dest ($(du -sh "$dest" | cut -f1)), commit $head$([ -f "$dest/cpu-fp32-loss" ] && echo ", CPU fp32 loss $(cut -d' ' -f1 "$dest/cpu-fp32-loss")")"
echo "travels: $(( (carried + tree) / 1048576 )) MiB of 64 (the tree $(( tree / 1048576 )) MiB)"
echo "device run: command 'BUDGET_S=400 LIMIT_S=540 RESULTS=\$OUT tools/gpu/run.sh /tmp/gpu-logs', timeout_s 600, carry [\".gpu-deps\", \"$fx/checkpoint_best.pt\"," \
  "\"$fx/data-bin\", \"$fx/generate-test-beam5.txt\"]"
