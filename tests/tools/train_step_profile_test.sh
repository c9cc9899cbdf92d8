#!/usr/bin/env bash
# fsq_bench_train_step --profile (CTest `tools.train_step_profile`, LibTorch 2.x): one profile of
# Multi30k-model training steps on the CPU must print its six shares of the step's wall time in
# order, each in [0, 100], adding up to 100, with time in GEMM, attention and the optimizer, none in
# all-reduce (one process), and write the same shares into its table file.
# Usage: train_step_profile_test.sh BENCH (the fsq_bench_train_step binary)
set -uo pipefail
bench=${1:?usage: train_step_profile_test.sh BENCH}
dir=$(mktemp -d /tmp/fsq-profile-XXXXXX)
trap 'rm -rf "$dir"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/check.sh"

"$bench" --arch multi30k --max-tokens 256 --len 16 --bf16 0 --iters 1 --warmup 1 --gemm 0 --cpu 1 \
  --threads 2 --profile "$dir/profile.txt" >"$dir/out" 2>"$dir/err"
rc=$?
check "the bench exits 0" [ "$rc" = 0 ]
line=$(sed -n 's/^profile: //p' "$dir/out")
echo "profile: $line"
[ "$rc" = 0 ] || tail -5 "$dir/err" >&2

# "GEMM 41.0%, attention 9.3%, optimizer 2.1%, all-reduce 0.0%, other 30.2%, host gaps 17.4% of ..."
shares='^GEMM ([0-9.]+)%, attention ([0-9.]+)%, optimizer ([0-9.]+)%, all-reduce ([0-9.]+)%, other ([0-9.]+)%, host gaps ([0-9.]+)% of ([0-9.]+) ms \(CPU ops, 2 steps\); largest after GEMM: .+'
values=()
[[ $line =~ $shares ]] && values=("${BASH_REMATCH[@]:1:6}")
check "one profile line: six shares in order, the step time, the pointer" [ "${#values[@]}" = 6 ]
awk_check() { echo "${values[*]}" | awk "{ exit !($1) }"; }  # $1..$6: GEMM ... host gaps
if [ "${#values[@]}" = 6 ]; then
  check "every share is in [0, 100]" awk_check '$1<=100 && $2<=100 && $3<=100 && $4<=100 && $5<=100 && $6<=100'
  check "the shares add up to 100 (within rounding)" awk_check '($1+$2+$3+$4+$5+$6) >= 99.7 && ($1+$2+$3+$4+$5+$6) <= 100.3'
  check "GEMM has time (aten::mm and its backward)" awk_check '$1 > 10'
  check "attention has time (scaled_dot_product ops)" awk_check '$2 > 0'
  check "the optimizer has time (ops on its flat buffers)" awk_check '$3 > 0'
  check "all-reduce has none (one process)" awk_check '$4 == 0'
  check "GEMM is not all: other ops have time" awk_check '$5 > 0'
fi

# The table file: the same six shares, then the step, then the largest ops.
table=$dir/profile.txt
check "the table file is written" [ -s "$table" ]
for i in 0 1 2 3 4 5; do
  name=(GEMM attention optimizer all-reduce other "host gaps")
  row=$(grep -m1 -E "^${name[$i]} +[0-9.]+ +[0-9.]+%$" "$table" | awk '{ print $NF }')
  check "the table's ${name[$i]} row matches the line" [ "${row%\%}" = "${values[$i]:-none}" ]
done
check "the table has the step row at 100%" grep -qE '^step +[0-9.]+ +100\.0%$' "$table"
check "the table lists aten::mm as GEMM, with its dtypes" grep -qE '^GEMM +[0-9.]+ +[0-9.]+% +[0-9.]+ +aten::mm\(float,float\)' "$table"
check "and a gradient's op with its autograd node" grep -qE ' in [A-Za-z]+Backward0$' "$table"

check_summary ""
