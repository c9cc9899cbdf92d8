#!/usr/bin/env bash
# Set-up on Debian 12: installs the missing Debian packages (as root or through sudo), makes fp32
# GEMM fast (OpenBLAS behind libblas.so.3), then configures and builds. Idempotent: a second run
# installs nothing and rebuilds only what changed. Nothing is downloaded at build time.
#
#   tools/setup.sh                 # build into ./build
#   BUILD_DIR=out tools/setup.sh   # elsewhere
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}

# What each package is for:
#   g++ cmake ninja-build ccache          the build (ccache: fast rebuilds)
#   libtorch-dev libgloo-dev              LibTorch 1.13 (CPU) and the gloo headers c10d's ProcessGroupGloo needs
#   libyaml-cpp-dev libfmt-dev nlohmann-json3-dev   config, logging, JSON
#   libsentencepiece-dev sentencepiece    tokenization (library and spm_* tools)
#   libgtest-dev                          the test suites
#   libopenblas0-pthread                  fast fp32 GEMM behind libblas.so.3 (LIBTORCH.md, trap 1)
#   libjemalloc-dev                       the programs' allocator: a quarter less training memory (cli/allocator.cpp)
#   libblas3                              the slow reference BLAS, kept for the test of the slow-BLAS warning
#   python3-torch                         independent numerical references in tests (Debian's /usr/bin/python3)
#   munge slurmctld slurmd slurm-client   the SLURM integration test runs a one-node cluster on localhost
#   python3-matplotlib                    tools/plot-log (PNG of a training log)
packages=(g++ cmake ninja-build ccache libtorch-dev libgloo-dev libyaml-cpp-dev libfmt-dev nlohmann-json3-dev
  libsentencepiece-dev sentencepiece libgtest-dev libopenblas0-pthread libjemalloc-dev libblas3 python3-torch
  munge slurmctld slurmd slurm-client python3-matplotlib)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "setup: need root or sudo to run: $*" >&2
    exit 1
  fi
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# libtorch's fp32 matmul goes through libblas.so.3: make sure that is OpenBLAS, not the reference.
blas_alt=libblas.so.3-x86_64-linux-gnu
openblas=/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
if [ -e "$openblas" ] && [ "$(update-alternatives --query $blas_alt 2>/dev/null | sed -n 's/^Value: //p')" != "$openblas" ]; then
  echo "setup: pointing libblas.so.3 at OpenBLAS"
  as_root update-alternatives --set $blas_alt "$openblas"
fi

if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
fi
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}"
