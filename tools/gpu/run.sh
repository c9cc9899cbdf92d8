#!/usr/bin/env bash
# Everything the GPU machine has to do, in one call: build the wheel lane against that machine's
# PyTorch, run the tests (label `gpu`, the unit suites, and every other test instance named .../cuda:
# the device-parameterized suites, tests/support/devices.h, register one where CUDA is present),
# the gradient all-reduce during backward against after it (tools/bench/overlap.sh, two Gloo
# workers sharing the GPU), the Multi30k parity runs (fp32 and bf16 on the device against fp32 on the CPU, 544
# updates), generation with the fairseq v0.9 fixture checkpoint against fairseq's own output (and in
# bf16 against float32's BLEU), and
# the throughput benchmark (transformer base and big, 32k vocabulary, bf16, ours and plain PyTorch
# eager and torch.compile'd) with one profile of a step of the big model at 16,384 tokens (shares of
# GEMM, attention, optimizer, all-reduce, other kernels and host gaps; the table in profile.txt),
# the big model's step again with activation checkpointing (its memory and speed) and without the
# low-precision copies of the weights (autocast's casts at each use, against the default), and the
# big model at the largest batch that fits the card; beside them all, on 2 of its CPU cores, bf16
# training and generation on the machine's CPU against float32 (tools/bench/cpu_bf16.sh: the CPU
# machines have no bf16 products, a GPU machine's CPU may).
# Prints one table last; writes every log and `record.md` (the table, with the commit, device,
# driver, PyTorch version and date: prepend it to docs/benchmarks/gpu.md) into LOGDIR.
#
# On a CPU machine it says that no GPU is present and runs the same steps, shortened by --quick.
#
#   tools/gpu/prepare.sh --cpu-reference                   # here, first: .gpu-deps/ and .gpu-shared
#   device run: BUDGET_S=400 LIMIT_S=540 RESULTS=$OUT tools/gpu/run.sh /tmp/gpu-logs   # timeout_s 600;
#               carry what prepare.sh prints
#   tools/gpu/run.sh LOGDIR [--quick] [--shared DIR] [--steps LIST]
#     DIR: the shared test data (default: .gpu-shared, $FSQ_SHARED, ../shared); LIST: some of build,tests,parity,generate,
#     throughput,overlap,cpu-bf16 (default all; run as build, tests, generate, parity, overlap, throughput:
#     the short ones first; torch.compile's reference compiles beside them, and cpu-bf16, bf16 on
#     this machine's CPU by tools/bench/cpu_bf16.sh, runs beside them all on its last 2 cores), or
#     cpu-reference alone (what prepare.sh runs: the CPU's fp32 parity run, kept in LOGDIR/cpu-fp32-loss).
# A session has 15 minutes of device time, the machine's start included, so one call does it all:
# - the build: prepare.sh compiles the wheel lane here (the same PyTorch 2.11 + CUDA 13 build as
#   there) and packs its programs and tests, stripped, into .gpu-deps/prebuilt.tar.xz (about 6 MB);
#   run.sh unpacks and runs them, with the machine's LibTorch first on LD_LIBRARY_PATH. It
#   compiles there only when they cannot run (about 3-4 minutes of 16 cores).
# - the tests: the prebuilt tests are listed here, without CUDA, so CTest would not know their
#   CUDA instances: they run from the test programs (fsq_gpu_tests whole, and every test named
#   .../cuda or ..._cuda in the others), 8 programs at a time.
# - the CPU's parity run comes from prepare.sh (.gpu-deps/cpu-fp32-loss) when it is for this
#   commit; else it starts there after the build, on 8 cores beside the tests and generation, and
#   the parity step waits for it.
# - BUDGET_S: a step that would start after that many seconds is skipped (and says so); LIMIT_S:
#   every long command is stopped (timeout) at that many seconds of the call, so that the call ends
#   within its limit with the table written; record.md is rewritten after each step.
# - RESULTS: a folder (the device's $OUT, of which at most 8 files come back) that gets record.md
#   and logs.tar.gz (LOGDIR without checkpoints) after each step and every 45 s (written aside and
#   renamed: a call killed meanwhile leaves the last whole one).
# - TESTS_S (default 150; 0: none): the prebuilt tests' step stops after that many seconds (a test
#   that hangs on the device took 253 of a call's 540 s on 2026-11-27); a program cut off says so.
# Environment: PYTHON (default: python3 there, .venv/bin/python here), BUILD (default build-gpu; an
# existing build folder is only rebuilt), JOBS, BUDGET_S, LIMIT_S, TESTS_S, RESULTS (default: none of
# them).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
logs=${1:?usage: tools/gpu/run.sh LOGDIR [--quick] [--shared DIR]}
shift
quick=0
shared=
steps=build,tests,parity,generate,throughput,overlap,cpu-bf16
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --shared) shared=${2:?--shared needs a folder}; shift ;;
    --steps) steps=${2:?--steps needs a list}; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
if [ -z "$shared" ]; then
  for d in .gpu-shared "${FSQ_SHARED:-}" ../shared shared; do [ -d "$d/fixtures" ] && { shared=$d; break; }; done
fi
[ -n "$shared" ] && shared=$(cd "$shared" && pwd)
fixture=$shared/fixtures/fairseq-v0.9
build=${BUILD:-build-gpu}
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=$root/.venv/bin/python; else PYTHON=$(command -v python3); fi
fi
rows=()   # "step|result" for the table
note() { rows+=("$1|$2"); echo "== $1: $2"; write_record; }  # (after the machine's facts are known)
started_at=$(date +%s)
budget=${BUDGET_S:-0}
limit=${LIMIT_S:-0}
# Seconds left before LIMIT_S (a large number without it).
left() {
  if [ "$limit" -gt 0 ]; then
    local n=$(( started_at + limit - $(date +%s) ))
    echo $(( n > 1 ? n : 1 ))
  else
    echo 100000
  fi
}
# A long command, stopped when LIMIT_S comes (exit 124, or 137 after 5 s more).
bounded() { timeout -k 5 "$(left)" "$@"; }
# What a missing result means: "cut off (LIMIT_S)" once the limit came, else "failed".
failed() { if [ "$limit" -gt 0 ] && [ "$(left)" -le 1 ]; then echo "cut off (LIMIT_S)"; else echo failed; fi; }
# Whether --steps names STEP.
listed() { [[ ",$steps," == *",$1,"* ]]; }
# Whether STEP may start: listed, and with BUDGET_S, not after that many seconds of this call (it
# says so).
want() {
  listed "$1" || return 1
  if [ "$budget" -gt 0 ] && [ $(( $(date +%s) - started_at )) -ge "$budget" ]; then
    note "$1" "skipped: BUDGET_S=$budget seconds spent"
    return 1
  fi
}
# The table, and the record for docs/benchmarks/gpu.md (rewritten after each step: a call cut off
# at its limit still brings back what it did).
write_record() {
  {
    echo "## $(date -u '+%Y-%m-%d') · $gpu · commit $commit"
    echo
    echo "\`$([ "$budget" -gt 0 ] && echo "BUDGET_S=$budget ")$([ "$limit" -gt 0 ] && echo "LIMIT_S=$limit ")tools/gpu/run.sh LOGDIR$([ "$quick" = 1 ] && echo ' --quick')\`; driver $driver, PyTorch $torch_version."
    echo
    echo "| step | result |"
    echo "| --- | --- |"
    for row in "${rows[@]}"; do echo "| ${row%%|*} | ${row#*|} |"; done
    echo
    echo "MFU: 6 x (encoder non-embedding parameters x source tokens + decoder's x target tokens) + 6 x d x V x"
    echo "target tokens + 12 x d x (S^2 per encoder layer, T^2 + T x S per decoder layer) per sentence, over 989 TFLOP/s."
  } >"$logs/record.md"
  publish
}
# RESULTS gets record.md and the logs, each written aside and renamed into place (aside under
# this shell's pid: the periodic publisher below runs beside the steps' own).
publish() {
  [ -n "${RESULTS:-}" ] || return 0
  mkdir -p "$RESULTS"
  local aside=$RESULTS/.$BASHPID
  cp "$logs/record.md" "$aside.md" 2>/dev/null && mv -f "$aside.md" "$RESULTS/record.md"
  tar -C "$logs" --exclude='*.pt' --exclude='ckpt-*' -czf "$aside.tar.gz" . 2>/dev/null
  mv -f "$aside.tar.gz" "$RESULTS/logs.tar.gz"
}

# --- what this machine is
gpu=none
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
else
  driver=-
  echo "no GPU present: running what a CPU machine can, on the CPU"
  quick=1
fi
torch_version=$("$PYTHON" -c 'import torch; print(torch.__version__)')
# The prepared commit where prepare.sh ran (the tree travels without .git; a git above it there
# would be another repository's).
if [ -f .gpu-deps/commit ]; then commit=$(cut -c1-7 .gpu-deps/commit); else commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown); fi
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"; echo "commit: $commit"; echo "gpu: $gpu"; echo "driver: $driver"
  echo "torch: $torch_version ($PYTHON)"; echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') x $(nproc)"; echo "glibc: $(ldd --version | head -1)"
  nvidia-smi 2>/dev/null
} >"$logs/env.txt"
note "machine" "$gpu, driver $driver, PyTorch $torch_version, commit $commit"
if [ -n "${RESULTS:-}" ]; then  # the logs of a step that hangs come back too
  (while sleep 45; do publish; done) &
  publisher=$!
  trap 'kill $publisher 2>/dev/null' EXIT
fi

# --- build
if [ -d .gpu-deps/prefix ]; then
  deps=$root/.gpu-deps/prefix/usr
  export LD_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu:$root/.gpu-deps/prefix/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
torch_dir=$("$PYTHON" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
export LD_LIBRARY_PATH=$torch_dir/lib:${LD_LIBRARY_PATH:-}  # before the prebuilt programs' RUNPATH (the CPU machine's)

# The programs and tests that prepare.sh built on the CPU machine (.gpu-deps/prebuilt.tar.xz),
# unpacked into the build folder they came from. The tests take the paths compiled into them from
# FSQ_SOURCE_DIR, FSQ_BIN_DIR and FSQ_PYTHON, and FSQ_SHARED names the carried fixture.
use_prebuilt() {
  local packed=$root/.gpu-deps/prebuilt.tar.xz dir
  [ -f "$packed" ] || return 1
  dir=$(cat "$root/.gpu-deps/prebuilt-dir")
  mkdir -p "$dir"
  # (Python's lzma where tar finds no xz)
  tar -C "$dir" -xJf "$packed" 2>/dev/null || "$PYTHON" -c 'import sys, tarfile
kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **kw)' "$packed" "$dir"
  if ! "$dir/fairseq-cpp-train" --help >"$logs/prebuilt.log" 2>&1; then
    note "prebuilt programs" "do not run here (prebuilt.log): compiling"
    return 1
  fi
  export FSQ_SOURCE_DIR=$root FSQ_BIN_DIR=$root/$dir FSQ_PYTHON=$PYTHON FSQ_SPM_LIBRARY=$root/$dir/libfsq_spm.so
  build=$dir
  prebuilt=1
}
# The tests and benchmarks read the fixture from $FSQ_SHARED: the carried one.
[ -z "$shared" ] || export FSQ_SHARED=$shared
prebuilt=0
if want build && [ ! -f "$build/build.ninja" ] && use_prebuilt; then
  note "build" "none: the programs and tests prepare.sh built on the CPU machine, for commit $commit, in $build"
fi
if [ "$prebuilt" = 0 ] && [ ! -f "$build/build.ninja" ]; then
  args=(-DCMAKE_PREFIX_PATH="$torch_dir;$torch_dir/share/cmake${deps:+;$deps}" -DTORCH_CUDA_ARCH_LIST=9.0
        -DFSQ_PYTHON="$PYTHON" -DFSQ_SACREBLEU_PYTHON="$PYTHON" -DPython_EXECUTABLE="$PYTHON"
        -DFSQ_TORCHRUN="$(dirname "$PYTHON")/torchrun")
  [ -n "${deps:-}" ] && args+=(-DOPENSSL_ROOT_DIR="$deps" -DZLIB_ROOT="$deps")
  [ "$gpu" != none ] && args+=(-DFSQ_REQUIRE_CUDA=ON)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${args[@]}" >"$logs/configure.log" 2>&1 ||
    { note "configure" "FAILED (configure.log)"; tail -30 "$logs/configure.log"; exit 1; }
fi
start=$(date +%s)
if [ "$prebuilt" = 1 ]; then
  :
elif ! listed build && [ -x "$build/fairseq-cpp-train" ]; then
  note "build" "not rebuilt (--steps $steps): $build"
elif cmake --build "$build" -j "${JOBS:-$(nproc)}" >"$logs/build.log" 2>&1; then
  note "build" "ok in $(( $(date +%s) - start )) s ($build)"
else
  note "build" "FAILED (build.log)"; grep -m5 -B2 -A8 'error' "$logs/build.log"; exit 1
fi

# --- Multi30k parity runs: fp32 and bf16 on the device, fp32 on the CPU, validation loss at the end
updates=$([ "$quick" = 1 ] && echo 20 || echo 544)
train() {  # NAME ARGS...
  local name=$1; shift
  bounded "$build/fairseq-cpp-train" configs/multi30k_transformer_small.yaml task.data="$fixture/data-bin" \
    checkpoint.save_dir="$logs/ckpt-$name" checkpoint.no_save=true optimization.max_update="$updates" \
    dataset.validate_interval_updates="$updates" common.log_format=simple "$@" >"$logs/train-$name.log" 2>&1
  sed -n "s/.*valid on 'valid' subset | loss \([0-9.]*\).*/\1/p" "$logs/train-$name.log" | tail -1
}
cpu_threads=$(( $(nproc) > 8 ? 8 : $(nproc) ))
if listed cpu-reference; then  # prepare.sh's: the full run, on this machine's CPU
  updates=544
  loss=$(train cpu-fp32 common.cpu=true common.cpu_threads="$cpu_threads")
  [ -n "$loss" ] && echo "$loss $updates" >"$logs/cpu-fp32-loss"  # prepare.sh adds the commit
  note "Multi30k $updates updates on the CPU, fp32, valid loss" "${loss:-failed (train-cpu-fp32.log)}"
fi
# The CPU's parity run (fp32, Multi30k): prepare.sh's when it is for this commit and as many
# updates, else started here now, beside the tests and generation on $cpu_threads cores, and waited
# for in the parity step (which runs after them).
cpu_fp32= cpu_where= cpu_job=
if listed parity && [ -d "$fixture/data-bin" ]; then
  if [ -f .gpu-deps/cpu-fp32-loss ]; then
    read -r loss n for_commit _ <.gpu-deps/cpu-fp32-loss
    if [ "$n" = "$updates" ] && [ "$for_commit" = "$(cat .gpu-deps/commit 2>/dev/null)" ]; then
      cpu_fp32=$loss cpu_where=", run by prepare.sh on the CPU machine"
    fi
  fi
  if [ -z "$cpu_fp32" ]; then
    train cpu-fp32 common.cpu=true common.cpu_threads="$cpu_threads" >"$logs/loss-cpu" &
    cpu_job=$!
  fi
fi

# torch.compile's reference at transformer-big, 16,384 tokens compiles (minutes of CPU) beside the
# tests, generation, parity and overlap; its timed steps wait for the file compile.go, which the
# throughput step makes once our own rows of that size are measured (the device is then its alone).
# The throughput step's first size (profiled, compiled) and its timed and warm-up steps.
if [ "$quick" = 1 ]; then
  profiled="transformer 4000 1024 32" iters=(2 1)
else
  profiled="transformer_vaswani_wmt_en_de_big 32000 16384 64" iters=(20 5)
fi
compile_job=
if [ "$gpu" != none ] && [ "$quick" = 0 ] && listed throughput; then
  # (not through `bounded`: a function run in the background would leave timeout's pid unknown)
  timeout -k 5 "$(left)" "$PYTHON" tools/bench/train_step_ref.py $profiled bf16 "${iters[@]}" \
    compile "after=$logs/compile.go" >"$logs/compile.out" 2>"$logs/compile.log" &
  compile_job=$!
  trap 'kill ${publisher:-} $compile_job 2>/dev/null' EXIT
fi

# --- bf16 on this machine's CPU (issue 37: the CPU machines have no bf16 products; a GPU machine's
# CPU may): tools/bench/cpu_bf16.sh on its last 2 cores, beside the GPU steps, its rows added last.
# At most 300 s (about 2.5 minutes of work on a 16-core host's CPU), and waited for at the end at
# most 60 s more: the device's time is not spent waiting for the CPU.
cpu_bf16_job=
if want cpu-bf16; then
  # The last 2 of the CPUs this process may use (a container's need not start at 0).
  cores=$("$PYTHON" -c 'import os; c = sorted(os.sched_getaffinity(0)); print(",".join(map(str, c[-2:])) if len(c) >= 8 else "")')
  if [ "$quick" = 1 ]; then cpu_bf16_args=(8 1); else cpu_bf16_args=(40 2); fi
  t=$(left); t=$(( t < 300 ? t : 300 ))
  CORES=$cores PYTHON="$PYTHON" timeout -k 5 "$t" tools/bench/cpu_bf16.sh "$build" "$logs/cpu-bf16" \
    "${cpu_bf16_args[@]}" >"$logs/cpu-bf16.txt" 2>&1 &
  cpu_bf16_job=$!
  trap 'kill ${publisher:-} ${compile_job:-} $cpu_bf16_job 2>/dev/null' EXIT
fi

# --- tests
tests() {  # NAME CTEST-ARGS...
  local name=$1; shift
  local t
  t=$(left)
  (cd "$build" && bounded ctest "$@" --timeout $(( t < 900 ? t : 900 )) -j "$( [ "$quick" = 1 ] && echo 2 || echo 8 )" \
    >"$logs/ctest-$name.log" 2>&1)
  local summary
  summary=$(grep -E 'tests passed|No tests were found' "$logs/ctest-$name.log" | tail -1)
  note "tests ($name)" "${summary:-did not finish (ctest-$name.log)}"
  grep -E '^\s+[0-9]+ - ' "$logs/ctest-$name.log" | head -10
}
# The prebuilt tests, from their programs: NAME FILTER PROGRAMS... (8 programs at a time, each
# running its tests matching FILTER in one process; a crash shows as its exit status).
gtests() {
  local name=$1 filter=$2; shift 2
  local t
  t=$(left)
  [ "${TESTS_S:-150}" -gt 0 ] && [ "${TESTS_S:-150}" -lt "$t" ] && t=${TESTS_S:-150}
  printf '%s\n' "$@" | timeout -k 5 "$t" xargs -P 8 -I{} sh -c \
    '"$1" --gtest_filter="$2" >"$3/gtest-$4-$(basename "$1").log" 2>&1; rc=$?; echo "$(basename "$1") $rc"' \
    _ {} "$filter" "$logs" "$name" >"$logs/gtest-$name.status"
  local out passed failures failed skipped abnormal
  out=$(cat "$logs"/gtest-"$name"-*.log)
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' <<<"$out" | awk '{s += $1} END {print s + 0}')
  # Each test once (gtest names a failed or skipped test when it ends and again in its summary).
  each() { grep "^\[  $1 \] [A-Za-z]" <<<"$out" | sed 's/ (.*//' | sort -u; }
  failures=$(each 'FAILED ')
  failed=$(grep -c . <<<"$failures")
  skipped=$(each SKIPPED | grep -c .)
  # A program that did not end with 0 or its tests' failure (1 with a failed test); one that never
  # ended (LIMIT_S) is missing from the status file.
  abnormal=$(awk -v failed="$failed" '$2 != 0 && !($2 == 1 && failed > 0) {printf "%s%s (exit %s)", sep, $1, $2; sep = ", "}' "$logs/gtest-$name.status")
  local ended
  ended=$(wc -l <"$logs/gtest-$name.status")
  [ "$ended" -lt $# ] && abnormal="${abnormal:+$abnormal, }$(( $# - ended )) of $# programs cut off after $t s (TESTS_S or LIMIT_S)"
  note "tests ($name)" "$passed passed, $failed failed, $skipped skipped${abnormal:+; ended abnormally: $abnormal} (gtest-$name-*.log)"
  head -10 <<<"$failures"
}
late_test='*AMissingBucketAllReduceNamesItself/cuda'
others=()  # every test program but the GPU suite
for t in "$build"/tests/fsq_*_tests; do [ "$(basename "$t")" != fsq_gpu_tests ] && others+=("$t"); done
if ! want tests; then
  :
elif [ "$prebuilt" = 1 ]; then
  if [ "$gpu" != none ]; then
    gtests gpu '*' "$build/tests/fsq_gpu_tests"
    # Devices/Suite.Test/cuda, Variants/...Test/postnorm_cuda; the one that has taken minutes on
    # CUDA ($late_test) runs alone, last (below), so that it cuts no other test off.
    gtests cuda "*/cuda:*_cuda:-$late_test" "${others[@]}"
  else
    note "tests (gpu)" "not run: no GPU here (fsq_gpu_tests fail without CUDA, by design)"
    gtests cpu-instances '*/cpu:*_cpu' "${others[@]}"  # the same runner, on the CPU twins
  fi
elif [ "$gpu" != none ]; then
  # Built here: CTest has one test per executable, so the CUDA instances (their CPU twins ran in
  # CI) go through the prebuilt tests' runner, by their names.
  tests gpu -L gpu
  gtests cuda '*/cuda:*_cuda' "${others[@]}"
else
  note "tests (gpu)" "not run: no GPU here (fsq_gpu_tests fail without CUDA, by design)"
  tests unit -L unit
fi

# --- generation with the fixture checkpoint against fairseq's own output
if ! want generate; then
  :
elif [ ! -f "$fixture/checkpoint_best.pt" ]; then
  note "generation" "skipped: no $fixture/checkpoint_best.pt (carry it)"
elif ! "$PYTHON" tools/fairseq-import "$fixture/checkpoint_best.pt" "$logs/imported.pt" >"$logs/import.log" 2>&1; then
  note "generation" "failed: the fixture checkpoint's import (import.log)"
else
  bounded "$build/fairseq-cpp-generate" "$fixture/data-bin" --path "$logs/imported.pt" --gen-subset test --beam 5 \
    --batch-size 128 --remove-bpe sentencepiece >"$logs/generate.txt" 2>"$logs/generate.log"
  same=$("$PYTHON" - "$logs/generate.txt" "$fixture/generate-test-beam5.txt" <<'PY'
import sys
def hyps(path):
    out = {}
    for line in open(path, encoding="utf-8"):
        if line.startswith("H-"):
            key, _, text = line.rstrip("\n").split("\t", 2)
            out[key] = text
    return out
ours, theirs = hyps(sys.argv[1]), hyps(sys.argv[2])
print(f"{sum(ours.get(k) == v for k, v in theirs.items())} of {len(theirs)}")
PY
)
  speed=$(grep -ho "([0-9.]* sentences/s, [0-9.]* tokens/s)" "$logs/generate.log" "$logs/generate.txt" | tail -1)
  note "generation, fixture checkpoint, beam 5" "H- lines equal to fairseq's: $same; ${speed:-no speed line: $(failed) (generate.log)}"
  # The same in bf16 (--bf16: weights, activations and caches in bf16), each run's sacreBLEU against
  # the T- lines (the references as the data-bin holds them).
  bounded "$build/fairseq-cpp-generate" "$fixture/data-bin" --path "$logs/imported.pt" --gen-subset test --beam 5 \
    --batch-size 128 --remove-bpe sentencepiece --bf16 >"$logs/generate-bf16.txt" 2>"$logs/generate-bf16.log"
  bleu_of() {  # GENERATE-OUTPUT: sacreBLEU of its H- lines against its T- lines
    local name=${1%.txt}
    for kind in H T; do
      grep "^$kind-" "$1" | sed "s/^$kind-//" | sort -n | awk -F '\t' '{print $NF}' >"$name.$kind"
    done
    "$build/fairseq-cpp-eval" score --sys "$name.H" --ref "$name.T" --metric bleu 2>>"$logs/generate.log" |
      sed -n 's/^BLEU|[^ ]* = \([0-9.]*\) .*/\1/p'
  }
  bleu32=$(bleu_of "$logs/generate.txt") bleu16=$(bleu_of "$logs/generate-bf16.txt")
  speed16=$(grep -ho "([0-9.]* sentences/s, [0-9.]* tokens/s)" "$logs/generate-bf16.log" "$logs/generate-bf16.txt" | tail -1)
  note "generation in bf16 (the same)" \
    "BLEU ${bleu16:-$(failed) (generate-bf16.log)} against float32's ${bleu32:-?}; ${speed16:-no speed line}"
fi

# --- Multi30k parity: the device's runs, and the CPU's
if ! want parity; then
  [ -n "$cpu_job" ] && kill $cpu_job 2>/dev/null
elif [ -d "$fixture/data-bin" ]; then
  dev_fp32=$(train dev-fp32)
  dev_bf16=$(train dev-bf16 common.bf16=true)
  if [ -n "$cpu_job" ]; then
    wait $cpu_job
    cpu_fp32=$(cat "$logs/loss-cpu") cpu_job=
    cpu_where=", run beside the steps above on $cpu_threads of this machine's cores"
  fi
  rel() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "") print "n/a"; else printf "%+.2f%%", 100 * (a - b) / b }'; }
  note "Multi30k $updates updates, valid loss" \
    "device fp32 ${dev_fp32:-$(failed)} ($(rel "$dev_fp32" "$cpu_fp32") vs CPU fp32 ${cpu_fp32:-$(failed)}$cpu_where), bf16 ${dev_bf16:-$(failed)} ($(rel "$dev_bf16" "$dev_fp32") vs fp32)"
else
  note "Multi30k parity" "skipped: no fixture at $fixture (carry .gpu-shared/fixtures/fairseq-v0.9)"
fi

# --- the gradient all-reduce during backward against after it (issue 18's overlap)
if want overlap; then
  if [ "$gpu" != none ]; then
    PYTHON="$PYTHON" DATA="$fixture/data-bin" DEVICE=cuda bounded tools/bench/overlap.sh "$build" 30 3 >"$logs/overlap.txt" 2>"$logs/overlap.log"
  else
    PYTHON="$PYTHON" DATA="$fixture/data-bin" bounded tools/bench/overlap.sh "$build" 8 1 >"$logs/overlap.txt" 2>"$logs/overlap.log"
  fi
  hidden=$(sed -n 's/^hidden behind backward: //p' "$logs/overlap.txt")
  note "all-reduce during backward, 2 Gloo workers$([ "$gpu" != none ] && echo ' sharing the GPU')" \
    "${hidden:-$(failed) (overlap.log)}${hidden:+; overlap.txt}"
fi

# --- throughput: ours and plain PyTorch on the same model, batch and precision
# Rows: transformer-big at 16,384 tokens (the issue's goal: MFU, the PyTorch ratio, the profile),
# the same with activation checkpointing and without the low-precision copies, base at 16,384, torch.compile's reference at
# transformer-big's 16,384 (compiled beside the earlier steps: compile_job), and transformer-big at
# the largest batch that fits (tried from the top down: a batch that does not fit fails at its first
# step; the compiled reference has given its memory back).
if [ "$quick" = 1 ]; then
  sizes=("$profiled" checkpointing copies-off); largest=()
else
  sizes=("$profiled" checkpointing copies-off "transformer 32000 16384 64" compiled largest)
  # Target tokens a step, by the card's memory: 16,384 took 12.8 GiB, each 16,384 more 8.4 GiB.
  mem_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  mem_gib=$(( ${mem_gib:-0} / 1024 ))
  largest=()
  for n in 15 14 12 10 8 6 4; do
    [ $(( 4 + 9 * n )) -le "$mem_gib" ] && largest+=($(( 16384 * n )))
  done
fi
echo "arch precision device tokens/step step_ms tokens/s peak_GiB TFLOP/s MFU" >"$logs/throughput.txt"
cpu_flag=$([ "$gpu" = none ] && echo cpu)
# ours ARCH VOCAB TOKENS LEN [BENCH-FLAGS...]: our step's row (throughput.txt's columns).
ours() {
  local arch=$1 vocab=$2 tokens=$3 len=$4; shift 4
  bounded "$build/tools/bench/fsq_bench_train_step" --arch "$arch" --vocab "$vocab" --max-tokens "$tokens" --len "$len" \
    --bf16 1 --iters "${iters[0]}" --warmup "${iters[1]}" "$@" 2>>"$logs/throughput.log"
}
# reference ARCH VOCAB TOKENS LEN: PyTorch eager's "tokens/s median_ms peak_GiB".
reference() {
  bounded "$PYTHON" tools/bench/train_step_ref.py "$1" "$2" "$3" "$4" bf16 "${iters[0]}" "${iters[1]}" $cpu_flag \
    2>>"$logs/throughput.log"
}
compare() {  # ARCH VOCAB TOKENS LEN PROFILE-FLAGS...: ours and PyTorch eager, one row
  local arch=$1 vocab=$2 tokens=$3 len=$4; shift 4
  local out eager our_tps our_gib our_mfu eager_tps beside=
  out=$(ours "$arch" "$vocab" "$tokens" "$len" "$@")
  grep -v '^profile: ' <<<"$out" | grep . >>"$logs/throughput.txt"
  read -r _ _ _ _ _ our_tps our_gib _ our_mfu <<<"$(grep -v '^profile: ' <<<"$out")"
  [ -z "$our_tps" ] && [ "${trying_largest:-0}" = 1 ] && return 1  # (did not fit: the next size)
  eager=$(reference "$arch" "$vocab" "$tokens" "$len")
  read -r eager_tps _ <<<"$eager"
  [ -n "$cpu_job" ] && kill -0 "$cpu_job" 2>/dev/null && beside=" (the CPU's parity run on $cpu_threads cores beside)"
  note "train step $arch bf16, $tokens tokens" \
    "ours ${our_tps:-$(failed)} tok/s, ${our_gib:-?} GiB, MFU ${our_mfu:-?}; PyTorch eager ${eager_tps:-$(failed)}; ours/eager $(ratio "$our_tps" "$eager_tps")$beside${row_note:-}"
  [ "$arch $vocab $tokens $len" = "$profiled" ] && our_profiled_tps=$our_tps eager_profiled_tps=$eager_tps
  if [ $# -gt 0 ]; then
    local shares
    shares=$(sed -n 's/^profile: //p' <<<"$out")
    note "profile of a step ($arch bf16, $tokens tokens)" "${shares:-$(failed) (throughput.log)}${shares:+; table: profile.txt}"
  fi
  return 0
}
ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
want throughput || sizes=()
for size in "${sizes[@]}"; do
  want throughput || break
  case $size in
    checkpointing)  # model.checkpoint_activations at the first size: memory and speed against its row
      read -r arch vocab tokens len <<<"$profiled"
      out=$(ours "$arch" "$vocab" "$tokens" "$len" --gemm 0 --checkpoint-activations 1 | head -1)
      [ -n "$out" ] && echo "$out checkpoint_activations" >>"$logs/throughput.txt"
      read -r _ _ _ _ _ ckpt_tps ckpt_gib _ <<<"$out"
      note "train step $arch bf16, $tokens tokens, checkpoint_activations" \
        "${ckpt_tps:-$(failed)} tok/s, ${ckpt_gib:-?} GiB (the plain run: the row of this size above)" ;;
    copies-off)  # trainer's low_precision_copies off at the first size: autocast's casts, the step before them
      read -r arch vocab tokens len <<<"$profiled"
      out=$(ours "$arch" "$vocab" "$tokens" "$len" --gemm 0 --low-precision-copies 0 | head -1)
      [ -n "$out" ] && echo "$out low_precision_copies=0" >>"$logs/throughput.txt"
      read -r _ _ _ _ _ off_tps off_gib _ <<<"$out"
      note "train step $arch bf16, $tokens tokens, low_precision_copies off" \
        "${off_tps:-$(failed)} tok/s, ${off_gib:-?} GiB; ours (copies on)/off $(ratio "${our_profiled_tps:-}" "$off_tps")" ;;
    compiled)  # torch.compile's reference, compiled beside the steps above: its timed steps now
      read -r arch vocab tokens len <<<"$profiled"
      if [ -n "$compile_job" ]; then
        touch "$logs/compile.go"
        wait "$compile_job"
        compile_job=
        read -r compiled_tps _ <"$logs/compile.out"
        best=$(printf '%s\n%s\n' "${eager_profiled_tps:-0}" "${compiled_tps:-0}" | sort -g | tail -1)
        note "torch.compile, $arch bf16, $tokens tokens" \
          "${compiled_tps:-$(failed) (compile.log)} tok/s; ours/compile $(ratio "${our_profiled_tps:-}" "$compiled_tps"), ours/best $(ratio "${our_profiled_tps:-}" "$best")"
      fi ;;
    largest)  # transformer-big at the largest batch that fits, fewer steps
      iters=(8 3) trying_largest=1 fitted= too_large=
      for tokens in "${largest[@]}"; do
        want throughput || break
        row_note="; the largest batch that fits${too_large:+ (not: $too_large)}"
        if compare transformer_vaswani_wmt_en_de_big 32000 "$tokens" 64; then fitted=$tokens; break; fi
        too_large="${too_large:+$too_large, }$tokens"
        echo "largest: $tokens tokens did not fit" >>"$logs/throughput.log"
      done
      trying_largest=0 row_note=
      [ -z "$fitted" ] && [ ${#largest[@]} -gt 0 ] && note "train step transformer_vaswani_wmt_en_de_big bf16, largest batch" \
        "none of ${largest[*]} tokens ran (throughput.log)" ;;
    *)
      read -r arch vocab tokens len <<<"$size"
      profile=()
      [ "$size" = "$profiled" ] && { profile=(--profile "$logs/profile.txt"); rm -f "$logs/profile.txt"; }
      compare "$arch" "$vocab" "$tokens" "$len" "${profile[@]}" ;;
  esac
done
# --- the test whose error has come minutes late on CUDA (docs/benchmarks/gpu.md), alone, last:
# when rank 0's error arrived (the test prints it) and when the test ended.
if [ "$prebuilt" = 1 ] && [ "$gpu" != none ] && listed tests && [ "$(left)" -gt 30 ]; then
  t=$(left); t=$(( t > 300 ? 300 : t - 10 ))
  start=$(date +%s)
  timeout -k 5 "$t" "$build/tests/fsq_trainer_tests" --gtest_filter="$late_test" >"$logs/late-test.log" 2>&1 &
  late=$!
  # Where its threads wait, if it still runs 30 and 90 s in (eu-stack, carried in .gpu-deps).
  for at in 30 90; do
    while kill -0 "$late" 2>/dev/null && [ $(( $(date +%s) - start )) -lt "$at" ]; do sleep 1; done
    kill -0 "$late" 2>/dev/null || break
    pid=$(pgrep -P "$late" | head -1)
    [ -n "$pid" ] && [ -x "${deps:-/nonexistent}/bin/eu-stack" ] && "$deps/bin/eu-stack" -p "$pid" >"$logs/late-stacks-$at.txt" 2>&1
  done
  wait "$late"
  rc=$?
  arrived=$(grep -m1 -o "rank 0's update 2 ended after [0-9.]* s" "$logs/late-test.log")
  note "test ${late_test//\*/}" "${arrived:-no error line}; the test $([ "$rc" = 0 ] && echo passed || echo "ended with $rc") after $(( $(date +%s) - start )) s (late-test.log)"
fi

# --- the CPU's bf16 rows (started after the build, on 2 cores beside the GPU steps: contended)
if [ -n "$cpu_bf16_job" ]; then
  for _ in $(seq 60); do kill -0 "$cpu_bf16_job" 2>/dev/null || break; sleep 1; done
  kill "$cpu_bf16_job" 2>/dev/null
  wait "$cpu_bf16_job"
  rc=$?
  if [ -f "$logs/cpu-bf16/cpu-bf16.rows" ]; then
    while IFS='|' read -r step result; do
      note "CPU bf16 (2 cores beside the GPU steps): $step" "$result"
    done <"$logs/cpu-bf16/cpu-bf16.rows"
  fi
  [ "$rc" = 0 ] || note "CPU bf16" "ended with $rc$([ "$rc" -ge 124 ] && echo ' (stopped: its time ran out)') (cpu-bf16.txt)"
fi

# --- the table (record.md, for docs/benchmarks/gpu.md, is already written)
write_record
echo
cat "$logs/record.md"
