#!/usr/bin/env bash
# Everything the GPU machine has to do, in one call: build the wheel lane against that machine's
# PyTorch, run the tests (label `gpu`, the unit suites, and every other test instance named .../cuda:
# the device-parameterized suites, tests/support/devices.h, register one where CUDA is present),
# the gradient all-reduce during backward against after it (tools/bench/overlap.sh, two Gloo
# workers sharing the GPU), the Multi30k parity runs (fp32 and bf16 on the device against fp32 on the CPU, 544
# updates), generation with the fairseq v0.9 fixture checkpoint against fairseq's own output, and
# the throughput benchmark (transformer base and big, 32k vocabulary, bf16, ours and plain PyTorch
# eager and torch.compile'd) with one profile of a step of the big model at 16,384 tokens (shares of
# GEMM, attention, optimizer, all-reduce, other kernels and host gaps; the table in profile.txt).
# Prints one table last; writes every log and `record.md` (the table, with the commit, device,
# driver, PyTorch version and date: prepend it to docs/benchmarks/gpu.md) into LOGDIR.
#
# On a CPU machine it says that no GPU is present and runs the same steps, shortened by --quick.
#
#   tools/gpu/prepare.sh                                   # here, first: .gpu-deps/ and .gpu-shared
#   device run: tools/gpu/run.sh $OUT                      # carry what prepare.sh prints
#   tools/gpu/run.sh LOGDIR [--quick] [--shared DIR] [--steps LIST]
#     DIR: shared/ (default: .gpu-shared, ../shared); LIST: some of build,tests,overlap,parity,
#     generate,throughput (default all). A device call runs at most 10 minutes: on a fresh machine, call once
#     with --steps build,tests,overlap and once with --steps parity,generate,throughput (the build folder
#     stays on the warm machine between calls; the build step is needed by the others once).
# Environment: PYTHON (default: python3 there, .venv/bin/python here), BUILD (default build-gpu; an
# existing build folder is only rebuilt), JOBS.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
logs=${1:?usage: tools/gpu/run.sh LOGDIR [--quick] [--shared DIR]}
shift
quick=0
shared=
steps=build,tests,overlap,parity,generate,throughput
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --shared) shared=$2; shift ;;
    --steps) steps=$2; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
if [ -z "$shared" ]; then
  for d in .gpu-shared ../shared shared; do [ -d "$d/fixtures" ] && { shared=$d; break; }; done
fi
[ -n "$shared" ] && shared=$(cd "$shared" && pwd)
fixture=$shared/fixtures/fairseq-v0.9
build=${BUILD:-build-gpu}
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=$root/.venv/bin/python; else PYTHON=$(command -v python3); fi
fi
rows=()   # "step|result" for the table
note() { rows+=("$1|$2"); echo "== $1: $2"; }
want() { [[ ",$steps," == *",$1,"* ]]; }

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
commit=$(git rev-parse --short HEAD 2>/dev/null || cut -c1-7 .gpu-deps/commit 2>/dev/null || echo unknown)
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"; echo "commit: $commit"; echo "gpu: $gpu"; echo "driver: $driver"
  echo "torch: $torch_version ($PYTHON)"; echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') x $(nproc)"; echo "glibc: $(ldd --version | head -1)"
  nvidia-smi 2>/dev/null
} >"$logs/env.txt"
note "machine" "$gpu, driver $driver, PyTorch $torch_version, commit $commit"

# --- build
if [ -d .gpu-deps/prefix ]; then
  deps=$root/.gpu-deps/prefix/usr
  export LD_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu:$root/.gpu-deps/prefix/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
torch_dir=$("$PYTHON" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
if [ ! -f "$build/build.ninja" ]; then
  args=(-DCMAKE_PREFIX_PATH="$torch_dir;$torch_dir/share/cmake${deps:+;$deps}" -DTORCH_CUDA_ARCH_LIST=9.0
        -DFSQ_PYTHON="$PYTHON" -DFSQ_SACREBLEU_PYTHON="$PYTHON" -DPython_EXECUTABLE="$PYTHON"
        -DFSQ_TORCHRUN="$(dirname "$PYTHON")/torchrun")
  [ -n "${deps:-}" ] && args+=(-DOPENSSL_ROOT_DIR="$deps" -DZLIB_ROOT="$deps")
  [ "$gpu" != none ] && args+=(-DFSQ_REQUIRE_CUDA=ON)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${args[@]}" >"$logs/configure.log" 2>&1 ||
    { note "configure" "FAILED (configure.log)"; tail -30 "$logs/configure.log"; exit 1; }
fi
start=$(date +%s)
if ! want build && [ -x "$build/fairseq-cpp-train" ]; then
  note "build" "not rebuilt (--steps $steps): $build"
elif cmake --build "$build" -j "${JOBS:-$(nproc)}" >"$logs/build.log" 2>&1; then
  note "build" "ok in $(( $(date +%s) - start )) s ($build)"
else
  note "build" "FAILED (build.log)"; grep -m5 -B2 -A8 'error' "$logs/build.log"; exit 1
fi

# --- tests
tests() {  # NAME CTEST-ARGS...
  local name=$1; shift
  (cd "$build" && ctest "$@" --timeout 900 -j "$( [ "$quick" = 1 ] && echo 2 || echo 8 )" >"$logs/ctest-$name.log" 2>&1)
  local summary
  summary=$(grep -E 'tests passed|No tests were found' "$logs/ctest-$name.log" | tail -1)
  note "tests ($name)" "${summary:-did not finish (ctest-$name.log)}"
  grep -E '^\s+[0-9]+ - ' "$logs/ctest-$name.log" | head -10
}
if ! want tests; then
  :
elif [ "$gpu" != none ]; then
  tests gpu -L gpu
  tests unit -L unit
  # The CUDA instances of the device-parameterized suites: how many there are, and those outside
  # the unit label (the unit run above ran the others).
  cuda_all=$(cd "$build" && ctest -N -R '[/_]cuda( |$)' | grep -c 'Test *#')
  cuda_unit=$(cd "$build" && ctest -N -L unit -R '[/_]cuda( |$)' | grep -c 'Test *#')
  note "device-parameterized suites" "$cuda_all test instances on CUDA ($cuda_unit of them in the unit run)"
  tests cuda-other -LE unit -R '[/_]cuda( |$)'
else
  note "tests (gpu)" "not run: no GPU here (fsq_gpu_tests fail without CUDA, by design)"
  tests unit -L unit
fi

# --- the gradient all-reduce during backward against after it (issue 18's overlap)
if want overlap; then
  if [ "$gpu" != none ]; then
    PYTHON="$PYTHON" DATA="$fixture/data-bin" DEVICE=cuda tools/bench/overlap.sh "$build" 30 3 >"$logs/overlap.txt" 2>"$logs/overlap.log"
  else
    PYTHON="$PYTHON" DATA="$fixture/data-bin" tools/bench/overlap.sh "$build" 8 1 >"$logs/overlap.txt" 2>"$logs/overlap.log"
  fi
  hidden=$(sed -n 's/^hidden behind backward: //p' "$logs/overlap.txt")
  note "all-reduce during backward, 2 Gloo workers$([ "$gpu" != none ] && echo ' sharing the GPU')" \
    "${hidden:-failed (overlap.log)}${hidden:+; overlap.txt}"
fi

# --- Multi30k parity: fp32 and bf16 on the device, fp32 on the CPU, validation loss at the end
updates=$([ "$quick" = 1 ] && echo 20 || echo 544)
train() {  # NAME ARGS...
  local name=$1; shift
  "$build/fairseq-cpp-train" configs/multi30k_transformer_small.yaml task.data="$fixture/data-bin" \
    checkpoint.save_dir="$logs/ckpt-$name" checkpoint.no_save=true optimization.max_update="$updates" \
    dataset.validate_interval_updates="$updates" common.log_format=simple "$@" >"$logs/train-$name.log" 2>&1
  sed -n "s/.*valid on 'valid' subset | loss \([0-9.]*\).*/\1/p" "$logs/train-$name.log" | tail -1
}
if ! want parity; then
  :
elif [ -d "$fixture/data-bin" ]; then
  cpu_threads=$(( $(nproc) > 8 ? 8 : $(nproc) ))
  train cpu-fp32 common.cpu=true common.cpu_threads="$cpu_threads" >"$logs/loss-cpu" &
  cpu_job=$!
  dev_fp32=$(train dev-fp32)
  dev_bf16=$(train dev-bf16 common.bf16=true)
  wait $cpu_job
  cpu_fp32=$(cat "$logs/loss-cpu")
  rel() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "") print "n/a"; else printf "%+.2f%%", 100 * (a - b) / b }'; }
  note "Multi30k $updates updates, valid loss" \
    "device fp32 ${dev_fp32:-failed} ($(rel "$dev_fp32" "$cpu_fp32") vs CPU fp32 ${cpu_fp32:-failed}), bf16 ${dev_bf16:-failed} ($(rel "$dev_bf16" "$dev_fp32") vs fp32)"
else
  note "Multi30k parity" "skipped: no fixture at $fixture (carry .gpu-shared/fixtures/fairseq-v0.9)"
fi

# --- generation with the fixture checkpoint against fairseq's own output
if want generate && [ -f "$fixture/checkpoint_best.pt" ]; then
  tools/fairseq-import "$fixture/checkpoint_best.pt" "$logs/imported.pt" >/dev/null 2>&1
  "$build/fairseq-cpp-generate" "$fixture/data-bin" --path "$logs/imported.pt" --gen-subset test --beam 5 \
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
  note "generation, fixture checkpoint, beam 5" "H- lines equal to fairseq's: $same; $speed"
fi

# --- throughput: ours and plain PyTorch on the same model, batch and precision
if [ "$quick" = 1 ]; then
  sizes=("transformer 4000 1024 32"); iters=(2 1)
else
  sizes=("transformer 32000 16384 64" "transformer_vaswani_wmt_en_de_big 32000 16384 64"
         "transformer_vaswani_wmt_en_de_big 32000 32768 64" "transformer_vaswani_wmt_en_de_big 32000 65536 64")
  iters=(20 5)
fi
# One size is also profiled after its timed steps (tools/bench/step_profile.h): its shares make a row.
profiled=${sizes[$([ "$quick" = 1 ] && echo 0 || echo 1)]}
echo "arch precision device tokens/step step_ms tokens/s peak_GiB TFLOP/s MFU" >"$logs/throughput.txt"
want throughput || sizes=()
for size in "${sizes[@]}"; do
  read -r arch vocab tokens len <<<"$size"
  profile=()
  [ "$size" = "$profiled" ] && { profile=(--profile "$logs/profile.txt"); rm -f "$logs/profile.txt"; }
  out=$("$build/tools/bench/fsq_bench_train_step" --arch "$arch" --vocab "$vocab" --max-tokens "$tokens" --len "$len" \
    --bf16 1 --iters "${iters[0]}" --warmup "${iters[1]}" "${profile[@]}" 2>>"$logs/throughput.log")
  ours=$(grep -v '^profile: ' <<<"$out")
  echo "$ours" >>"$logs/throughput.txt"
  cpu_flag=$([ "$gpu" = none ] && echo cpu)
  eager=$("$PYTHON" tools/bench/train_step_ref.py "$arch" "$vocab" "$tokens" "$len" bf16 "${iters[0]}" "${iters[1]}" \
    $cpu_flag 2>>"$logs/throughput.log")
  # torch.compile takes minutes per shape: at the 16,384-token sizes only.
  compiled=$([ "$gpu" = none ] || [ "$tokens" != 16384 ] && echo "- -" || "$PYTHON" tools/bench/train_step_ref.py "$arch" "$vocab" "$tokens" \
    "$len" bf16 "${iters[0]}" "${iters[1]}" compile 2>>"$logs/throughput.log")
  read -r _ _ _ _ _ our_tps our_gib _ our_mfu <<<"$ours"
  read -r eager_tps _ <<<"$eager"
  read -r compiled_tps _ <<<"$compiled"
  best=$(printf '%s\n%s\n' "${eager_tps:-0}" "${compiled_tps:-0}" | sort -g | tail -1)
  ratio=$(awk -v a="${our_tps:-0}" -v b="$best" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "n/a" }')
  note "train step $arch bf16, $tokens tokens" \
    "ours ${our_tps:-failed} tok/s, ${our_gib:-?} GiB, MFU ${our_mfu:-?}; PyTorch eager ${eager_tps:-failed}, compile ${compiled_tps:--}; ours/best $ratio"
  if [ ${#profile[@]} -gt 0 ]; then
    shares=$(sed -n 's/^profile: //p' <<<"$out")
    note "profile of a step ($arch bf16, $tokens tokens)" "${shares:-failed (throughput.log)}${shares:+; table: profile.txt}"
  fi
done

# --- the table, and the record for docs/benchmarks/gpu.md
{
  echo "## $(date -u '+%Y-%m-%d') · $gpu · commit $commit"
  echo
  echo "\`tools/gpu/run.sh LOGDIR$([ "$quick" = 1 ] && echo ' --quick')\`; driver $driver, PyTorch $torch_version."
  echo
  echo "| step | result |"
  echo "| --- | --- |"
  for row in "${rows[@]}"; do echo "| ${row%%|*} | ${row#*|} |"; done
  echo
  echo "MFU: 6 x (encoder non-embedding parameters x source tokens + decoder's x target tokens) + 6 x d x V x"
  echo "target tokens + 12 x d x (S^2 per encoder layer, T^2 + T x S per decoder layer) per sentence, over 989 TFLOP/s."
} >"$logs/record.md"
echo
cat "$logs/record.md"
