#!/usr/bin/env bash
# Set-up on Debian 12: installs the missing Debian packages (as root or through sudo), makes fp32
# GEMM fast (OpenBLAS behind libblas.so.3), then configures and builds. Idempotent: a second run
# installs nothing and rebuilds only what changed. Nothing is downloaded at build time.
#
#   tools/setup.sh                 # Debian's LibTorch 1.13 (CPU): build into ./build
#   tools/setup.sh --torch wheel   # PyTorch's wheel (LibTorch 2.x, CUDA): .venv/ and ./build-wheel
#   tools/setup.sh --fuzz          # only the libFuzzer targets (clang, ASan + UBSan): ./build-fuzz
#   BUILD_DIR=out tools/setup.sh   # elsewhere
#   tools/setup.sh --torch wheel --packages-only   # only the Debian packages (tools/test.sh)
#   tools/setup.sh --torch wheel --no-build        # the packages and the wheel's environment, no build
#
# The wheel lane makes the project's Python environment from the pinned tools/requirements.txt in
# ~/.cache/fairseq-cpp/venv-HASH (FSQ_VENV elsewhere), linked as .venv (ignored by git), and
# configures against its torch with CUDA on: nvcc and the CUDA libraries come from the CUDA 13
# toolkit in $CUDA_HOME (default /usr/local/cuda), the target is sm_90 (H100 and H200), and
# configuring stops if LibTorch's CUDA targets are missing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lane=debian
fuzz=0
stop_after=build
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) lane=${2:-}; shift $(($# < 2 ? 1 : 2)) ;;
    --torch=*) lane=${1#--torch=}; shift ;;
    --fuzz) fuzz=1; shift ;;
    --packages-only) stop_after=packages; shift ;;
    --no-build) stop_after=environment; shift ;;
    *) echo "setup: unknown argument \`$1'; usage: tools/setup.sh [--torch debian|wheel] [--fuzz]" \
      "[--packages-only | --no-build]" >&2; exit 2 ;;
  esac
done
case "$lane" in
  debian) build_dir=${BUILD_DIR:-$root/build} ;;
  wheel) build_dir=${BUILD_DIR:-$root/build-wheel} ;;
  *) echo "setup: --torch must be debian or wheel, but is \`$lane'" >&2; exit 2 ;;
esac
if [ "$fuzz" = 1 ]; then
  [ "$lane" = debian ] || { echo "setup: --fuzz builds against Debian's LibTorch, not --torch $lane" >&2; exit 2; }
  build_dir=${BUILD_DIR:-$root/build-fuzz}
fi

# What each package is for:
#   g++ cmake ninja-build ccache          the build (ccache: fast rebuilds)
#   libtorch-dev libgloo-dev              LibTorch 1.13 (CPU) and the gloo headers c10d's ProcessGroupGloo needs
#   libyaml-cpp-dev libfmt-dev nlohmann-json3-dev   config, logging, JSON
#   zlib1g-dev libssl-dev                 CRC-32 and SHA-256 of checkpoints (checkpoint/integrity)
#   libsentencepiece-dev sentencepiece    tokenization (library and spm_* tools)
#   libgtest-dev                          the test suites
#   libopenblas0-pthread                  fast fp32 GEMM behind libblas.so.3 (LIBTORCH.md, trap 1)
#   libjemalloc-dev                       the programs' allocator: a quarter less training memory (cli/allocator.cpp)
#   libblas3                              the slow reference BLAS, kept for the test of the slow-BLAS warning
#   python3-torch                         independent numerical references in tests (Debian's /usr/bin/python3)
#   munge slurmctld slurmd slurm-client   the SLURM tests: a one-node cluster on localhost, and one across two test hosts
#   iproute2 util-linux                   the multi-node tests' hosts in network namespaces (tools/netns/hosts.sh: ip,
#                                         unshare; tools/slurm/local-cluster.sh --hosts: nsenter)
#   procps                                tools/test.sh: pgrep, to stop a lane's background build
#   python3-matplotlib                    tools/plot-log (PNG of a training log)
#   python3-venv                          the wheel lane's Python environment (.venv/)
#   clang libclang-rt-14-dev              the fuzz targets (fuzz/): clang with libFuzzer, ASan and UBSan
packages=(g++ cmake ninja-build ccache libtorch-dev libgloo-dev libyaml-cpp-dev libfmt-dev nlohmann-json3-dev
  zlib1g-dev libssl-dev clang libclang-rt-14-dev
  libsentencepiece-dev sentencepiece libgtest-dev libopenblas0-pthread libjemalloc-dev libblas3 python3-torch
  munge slurmctld slurmd slurm-client iproute2 util-linux procps python3-matplotlib)
[ "$lane" = wheel ] && packages+=(python3-venv)

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
[ "$stop_after" = packages ] && exit 0

cmake_args=()
if [ "$lane" = wheel ]; then
  cuda=${CUDA_HOME:-/usr/local/cuda}
  if [ ! -x "$cuda/bin/nvcc" ]; then
    echo "setup: the wheel lane compiles the CUDA sources and needs the CUDA 13 toolkit's nvcc, but" \
      "$cuda/bin/nvcc is missing (set CUDA_HOME to the toolkit)" >&2
    exit 1
  fi
  requirements=$root/tools/requirements.txt
  # One environment per version of the requirements, shared by every clone (.venv links to it): the
  # LibTorch headers then have the same path in each clone, so a clone's build hits the ccache of
  # another, as the Debian lane's /usr/include does. A .venv folder of its own is used as it is.
  venv=$root/.venv
  if [ ! -d "$venv" ] || [ -L "$venv" ]; then
    venv=${FSQ_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fairseq-cpp/venv-$(sha256sum <"$requirements" | cut -c1-12)}
    mkdir -p "$(dirname "$venv")"
    ln -sfn "$venv" "$root/.venv"
  else
    echo "setup: .venv is a folder of this clone; remove it to share one environment across clones (ccache hits)"
  fi
  stamp=$venv/.requirements.sha256
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$(sha256sum <"$requirements")" ]; then
    echo "setup: installing tools/requirements.txt into $venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements"
    sha256sum <"$requirements" >"$stamp"
  fi
  # Every library that libtorch_cuda.so needs must resolve, from the wheels or the toolkit.
  if ! torch_dir=$("$venv/bin/python" -c 'import os, torch; print(os.path.dirname(os.path.realpath(torch.__file__)))'); then
    echo "setup: torch from $requirements does not import (a CUDA library missing?)" >&2
    exit 1
  fi
  cmake_args=(-DCMAKE_PREFIX_PATH="$torch_dir;$torch_dir/share/cmake" -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc"
    -DCUDAToolkit_ROOT="$cuda" -DCUDA_TOOLKIT_ROOT_DIR="$cuda" -DTORCH_CUDA_ARCH_LIST=9.0 -DFSQ_REQUIRE_CUDA=ON
    -DFSQ_PYTHON="$venv/bin/python" -DFSQ_TORCHRUN="$venv/bin/torchrun" -DFSQ_SACREBLEU_PYTHON="$venv/bin/python"
    -DPython_EXECUTABLE="$venv/bin/python")
fi

[ "$stop_after" = environment ] && exit 0

if [ "$fuzz" = 1 ]; then
  cmake_args=(-DCMAKE_CXX_COMPILER=clang++ -DFSQ_FUZZ=ON -DFSQ_BUILD_TESTS=OFF -DFSQ_PCH=OFF)
fi

# Configure a new build folder, and again whenever this script's CMake arguments change.
args_stamp=$(printf '%s\n' "${cmake_args[@]}" "${CMAKE_ARGS:-}" | sha256sum)
if [ ! -f "$build_dir/build.ninja" ] || [ "$(cat "$build_dir/.setup-args" 2>/dev/null)" != "$args_stamp" ]; then
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" ${CMAKE_ARGS:-}
  echo "$args_stamp" >"$build_dir/.setup-args"
fi
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}"
