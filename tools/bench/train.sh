#!/usr/bin/env bash
# Training speed and memory on Multi30k with the fairseq v0.9 reference model
# (configs/multi30k_transformer_small.yaml on the fixture's data-bin), 2 threads, one process each,
# all in this invocation over the same UPDATES updates of the same batches:
#   - fairseq-cpp-train in float32 and in bf16 (common.bf16), built on Debian's LibTorch 1.13 (BUILD_DIR)
#     and, where that build exists, on the wheel's LibTorch 2.x (WHEEL_BUILD_DIR, default build-wheel):
#     the same BLAS as the wheel's PyTorch loop below;
#   - a plain PyTorch training loop of the same model (tools/bench/train_ref.py: fairseq's batches,
#     label-smoothed loss, Adam, the same schedule and clipping) on Debian's PyTorch 1.13 and, where
#     the project's environment exists (.venv, PyTorch 2.x), eager and under torch.compile.
# words/s counts updates 6.. (warm-up left out); whole process is the wall time from start to exit
# (warm-up, data loading and Python's imports included). Also checks that every run trained on the
# same number of target tokens at every update (the same batches), and names the CPU and BLAS.
#   tools/bench/train.sh [BUILD_DIR] [UPDATES] [WHEEL_BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
updates=${2:-40}
wheel_build=${3:-$root/build-wheel}
data="${FSQ_SHARED:-$root/../shared}/fixtures/fairseq-v0.9/data-bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# /usr/bin/time -v's wall clock ("m:ss.ss" or "h:mm:ss") and peak RSS of a log, as "SECONDS GiB".
time_of() {
  local wall rss
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$1")
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$1")
  awk -v w="$wall" -v k="$rss" 'BEGIN { n = split(w, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i];
    printf "%.1f %.2f\n", s, k / 1048576 }'
}

rows=()   # "name|words/s|seconds|GiB"
same=yes
# Ours: the target tokens of each update from the JSON log (log_interval 1), then words/s over 6...
builds=("$build|")
[ -x "$wheel_build/fairseq-cpp-train" ] && [ -x "$root/.venv/bin/python" ] &&
  builds+=("$wheel_build|, LibTorch $("$root/.venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')")
for entry in "${builds[@]}"; do
IFS='|' read -r bin lane <<<"$entry"
for precision in fp32 bf16; do
  log="$work/ours-$precision${lane:+-wheel}"
  /usr/bin/time -v "$bin/fairseq-cpp-train" "$root/configs/multi30k_transformer_small.yaml" \
    task.data="$data" checkpoint.save_dir="$work/ckpt" checkpoint.no_save=true dataset.disable_validation=true \
    optimization.max_update="$updates" common.cpu_threads=2 common.log_interval=1 \
    common.bf16="$([ $precision = bf16 ] && echo true || echo false)" 2>"$log"
  grep -o '\[train_inner\] {.*}' "$log" | sed 's/^\[train_inner\] //' |
    /usr/bin/python3 -c 'import json,sys
rows=[json.loads(l) for l in sys.stdin]
print(" ".join(str(round(r["wpb"])) for r in rows))
rows=rows[5:]
print(round(sum(r["wpb"] for r in rows) / sum(r["wpb"] / r["wps"] for r in rows)))' >"$log.tokens"
  read -r seconds gib < <(time_of "$log")
  [ "$(sed -n 1p "$log.tokens")" = "$(sed -n 1p "$work/ours-fp32.tokens")" ] || same=no
  rows+=("fairseq-cpp-train $precision$lane|$(sed -n 2p "$log.tokens")|$seconds|$gib")
done
done

# The PyTorch loops, on the same batches.
refs=("Debian PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') eager|/usr/bin/python3|")
if [ -x "$root/.venv/bin/python" ]; then
  v=$("$root/.venv/bin/python" -c 'import torch; print(torch.__version__)')
  refs+=("PyTorch $v eager|$root/.venv/bin/python|" "PyTorch $v torch.compile|$root/.venv/bin/python|compile")
fi
for ref in "${refs[@]}"; do
  IFS='|' read -r name python mode <<<"$ref"
  log="$work/ref-${#rows[@]}"
  if ! /usr/bin/time -v "$python" "$root/tools/bench/train_ref.py" "$data" "$updates" 2 $mode >"$log.out" 2>"$log"; then
    rows+=("$name|failed (see below)|-|-")
    tail -3 "$log" >&2
    continue
  fi
  tokens=$(sed -n 's/^update [0-9]* ntokens \([0-9]*\) .*/\1/p' "$log.out" | tr '\n' ' ' | sed 's/ $//')
  [ "$tokens" = "$(sed -n 1p "$work/ours-fp32.tokens")" ] || same=no
  read -r seconds gib < <(time_of "$log")
  rows+=("$name|$(sed -n 's/^words\/s //p' "$log.out")|$seconds|$gib")
done

blas_of() { "$1" -c 'import re, torch; m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show()); print(m.group(1) if m else "?")'; }
blas="Debian's PyTorch (ours on it too): $(blas_of /usr/bin/python3)"
[ -x "$root/.venv/bin/python" ] && blas+=", the wheel (ours on it too): $(blas_of "$root/.venv/bin/python")"
printf 'Multi30k small Transformer, %s updates, 2 threads, CPU: %s; BLAS: %s\n' \
  "$updates" "$(lscpu | sed -n 's/^Model name: *//p')" "$blas"
printf '%-44s %10s %16s %10s %12s\n' "run" "words/s" "whole process s" "peak RSS" "ours fp32 /"
base=$(cut -d'|' -f2 <<<"${rows[0]}")
for row in "${rows[@]}"; do
  IFS='|' read -r name wps seconds gib <<<"$row"
  ratio=$(awk -v a="$base" -v b="$wps" 'BEGIN { if (b + 0 > 0) printf "%.2fx", a / b; else print "-" }')
  printf '%-44s %10s %16s %9s G %12s\n' "$name" "$wps" "$seconds" "$gib" "$ratio"
done
printf 'fairseq v0.9 on this machine class (fixture README): 1543-1624 words/s, 1.42 GiB\n'
printf 'same batches (target tokens of every update equal in every run): %s\n' "$same"
