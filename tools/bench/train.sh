#!/usr/bin/env bash
# Training speed and memory on Multi30k with the fairseq v0.9 reference model
# (configs/multi30k_transformer_small.yaml on the fixture's data-bin), 2 threads, one process:
# target words/s over UPDATES updates (the first 5 left out as warm-up) and peak RSS, next to
# fairseq v0.9's figures on this machine class (fixture README) and, run in the same invocation,
# a plain PyTorch forward+backward of the same model shape (Debian's python3-torch). Each of our
# runs twice: float32, and bf16 autocast (common.bf16).
#   tools/bench/train.sh [BUILD_DIR] [UPDATES]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
updates=${2:-40}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One run per precision: float32, then bf16 autocast (common.bf16; float32 weights).
declare -A wps rss_kb
for precision in fp32 bf16; do
  /usr/bin/time -v "$build/fairseq-cpp-train" "$root/configs/multi30k_transformer_small.yaml" \
    task.data="$root/../shared/fixtures/fairseq-v0.9/data-bin" checkpoint.save_dir="$work/ckpt" \
    checkpoint.no_save=true dataset.disable_validation=true optimization.max_update="$updates" \
    common.cpu_threads=2 common.log_interval=1 common.bf16="$([ $precision = bf16 ] && echo true || echo false)" \
    2>"$work/log-$precision"
  wps[$precision]=$(grep -o '\[train_inner\] {.*}' "$work/log-$precision" | sed 's/^\[train_inner\] //' |
    /usr/bin/python3 -c 'import json,sys
rows=[json.loads(l) for l in sys.stdin][5:]
print(round(sum(r["wpb"] for r in rows) / sum(r["wpb"] / r["wps"] for r in rows)))')
  rss_kb[$precision]=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/log-$precision")
done
ref=$(/usr/bin/python3 "$root/tools/bench/model_throughput_ref.py" 128 32 32 3 2 | awk '{print $1}')

printf '%-52s %12s %12s\n' "Multi30k small Transformer, 2 threads" "words/s" "peak RSS"
for precision in fp32 bf16; do
  printf '%-52s %12s %9.2f GiB\n' "fairseq-cpp-train $precision ($updates updates, one process)" "${wps[$precision]}" \
    "$(awk -v k="${rss_kb[$precision]}" 'BEGIN {print k / 1048576}')"
done
printf '%-52s %12s %12s\n' "fairseq v0.9 (fixture README, same machine class)" "1543-1624" "1.42 GiB"
printf '%-52s %12.0f %12s\n' "PyTorch fwd+bwd only, same shape (run here)" "$ref" "-"
printf 'fp32 ratio to fairseq (1583 words/s midpoint): %.2fx words/s, %.2fx peak RSS\n' \
  "$(awk -v a="${wps[fp32]}" 'BEGIN {print a / 1583}')" "$(awk -v k="${rss_kb[fp32]}" 'BEGIN {print k / 1048576 / 1.42}')"
printf 'bf16 / fp32: %.2fx words/s, %.2fx peak RSS (CPU: %s)\n' \
  "$(awk -v a="${wps[bf16]}" -v b="${wps[fp32]}" 'BEGIN {print a / b}')" \
  "$(awk -v a="${rss_kb[bf16]}" -v b="${rss_kb[fp32]}" 'BEGIN {print a / b}')" \
  "$(lscpu | sed -n 's/^Model name: *//p')"
