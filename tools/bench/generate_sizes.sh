#!/usr/bin/env bash
# Translation's peak memory and speed as the model grows (issue 37), against CTranslate2 on the
# same weights: for each size, a training checkpoint of that model (one update of
# fairseq-cpp-train on Multi30k with a joint SentencePiece vocabulary, so the file carries adam's
# state, as a user's checkpoint does), converted for CTranslate2 by tools/bench/ct2_convert.py;
# then ours (float32, --quantize int8, and --bf16 on a CPU with AVX512_BF16) and CTranslate2
# (float32, int8; it has no bf16 on the CPU, so ours in bf16 is set against its float32) on the first 256 test
# sentences, every output forced to 40 tokens (--min-len 40 --max-len-b 40 and CTranslate2's
# min/max decoding length), beam 5, batches of 64 sentences, 2 threads, each run a whole process
# timed by /usr/bin/time: wall seconds and peak RSS, medians of RUNS runs.
#
#   tools/bench/generate_sizes.sh [BUILD_DIR] [SIZES] [RUNS]
#     SIZES: a comma list of base (transformer_wmt_en_de, 8k vocabulary) and big
#     (transformer_vaswani_wmt_en_de_big, 20k vocabulary: SentencePiece learns at most 20,994
#     pieces from Multi30k, so not the 32k of WMT); default base. RUNS: default 3.
# Needs the shared Multi30k data (FSQ_SHARED, default ../shared) and the project's .venv
# (ctranslate2, tools/requirements.txt). WORK (default: a temporary folder) keeps the data-bins
# and checkpoints between invocations.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$here/build}"
sizes="${2:-base}"
runs="${3:-3}"
data="${FSQ_SHARED:-$here/../shared}/data/multi30k"
python="$here/.venv/bin/python"
[[ -f "$data/train.en.gz" ]] || { echo "generate_sizes.sh: no Multi30k at $data" >&2; exit 1; }
"$python" -c 'import ctranslate2' 2>/dev/null || { echo "generate_sizes.sh: $python lacks ctranslate2" >&2; exit 1; }
work="${WORK:-}"
if [[ -z "$work" ]]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
export OMP_WAIT_POLICY=PASSIVE  # ours (see generate.sh); CTranslate2 runs with its own setting

raw="$work/raw"
if [[ ! -f "$raw/test256.de" ]]; then
  mkdir -p "$raw"
  for split in train val; do
    for l in en de; do gunzip -c "$data/$split.$l.gz" >"$raw/$split.$l"; done
  done
  for l in en de; do gunzip -c "$data/test_2016_flickr.$l.gz" | sed -n 1,256p >"$raw/test256.$l"; done
fi

# SIZE -> "ARCH VOCAB CONFIG"
size_spec() {
  case "$1" in
    base) echo "transformer_wmt_en_de 8000 configs/transformer_wmt_en_de.yaml" ;;
    big) echo "transformer_vaswani_wmt_en_de_big 20000 configs/transformer_vaswani_wmt_en_de_big.yaml" ;;
    *) echo "generate_sizes.sh: SIZES names base and big, not \`$1'" >&2; exit 2 ;;
  esac
}

# Data-bin, checkpoint and CTranslate2 models of one size, under $work/SIZE.
prepare() {
  local size=$1 vocab config dir
  read -r _ vocab config <<<"$(size_spec "$size")"
  dir="$work/$size"
  if [[ ! -f "$dir/bin/dict.en.txt" ]]; then
    "$build/fairseq-cpp-preprocess" --source-lang en --target-lang de --joined-dictionary \
      --trainpref "$raw/train" --validpref "$raw/val" --testpref "$raw/test256" --destdir "$dir/bin" \
      --spm-vocab-size "$vocab" --workers 2 >"$dir.preprocess.log" 2>&1 ||
      { tail -5 "$dir.preprocess.log" >&2; exit 1; }
  fi
  if [[ ! -f "$dir/ckpt/checkpoint_last.pt" ]]; then
    "$build/fairseq-cpp-train" "$here/$config" task.data="$dir/bin" checkpoint.save_dir="$dir/ckpt" \
      optimization.max_update=1 dataset.max_tokens=1024 distributed_training.distributed_world_size=1 \
      common.fp16=false dataset.disable_validation=true checkpoint.no_epoch_checkpoints=true \
      >"$dir.train.log" 2>&1 ||
      { tail -5 "$dir.train.log" >&2; exit 1; }
  fi
  for q in float32 int8; do
    [[ -f "$dir/ct2-$q/model.bin" ]] && continue
    local extra=()
    [[ $q == int8 ]] && extra=(--quantization int8)
    "$python" "$here/tools/bench/ct2_convert.py" "$dir/ckpt/checkpoint_last.pt" "$dir/bin" "$dir/ct2-$q" \
      "${extra[@]}" --force >/dev/null
  done
}

run_engine() {  # SIZE ENGINE RUN: one whole process; "SECONDS KB" in $work/SIZE.ENGINE.RUN.time
  local size=$1 engine=$2 i=$3 dir="$work/$1" out="$work/$1.$2.$3"
  case "$engine" in
    ours | ours-int8 | ours-bf16)
      local precision=(--quantize none)
      [[ $engine == ours-int8 ]] && precision=(--quantize int8)
      [[ $engine == ours-bf16 ]] && precision=(--bf16)
      /usr/bin/time -f '%e %M' -o "$out.time" "$build/fairseq-cpp-generate" "$dir/bin" \
        --path "$dir/ckpt/checkpoint_last.pt" --gen-subset test --beam 5 --batch-size 64 \
        --min-len 40 --max-len-a 0 --max-len-b 40 --cpu-threads 2 "${precision[@]}" --quiet \
        >"$out.txt" 2>"$out.err" || { tail -3 "$out.err" >&2; exit 1; }
      grep '^| Translated' "$out.txt" >"$out.log" ;;
    ct2-*)
      env -u OMP_WAIT_POLICY /usr/bin/time -f '%e %M' -o "$out.time" "$python" \
        "$here/tools/bench/ct2_translate.py" translate "$dir/${engine}" "$dir/bin" --subset test --beam 5 \
        --batch-size 64 --min-len 40 --max-len 40 --compute-type "${engine#ct2-}" --intra-threads 2 \
        --inter-threads 1 >"$out.stdout"
      grep '^| Translated' "$out.stdout" >"$out.log" ;;
  esac
}

median() { sort -g | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }
engines=(ours ct2-float32 ours-int8 ct2-int8)
# Our int8 kernel needs AVX-512 VNNI or AVX2 with FMA: without them, float32 only.
grep -qwE 'avx512_vnni|avx2' /proc/cpuinfo && grep -qw fma /proc/cpuinfo ||
  { engines=(ours ct2-float32); echo "(neither AVX-512 VNNI nor AVX2 on this CPU: float32 only)"; }
# --bf16 where the CPU has AVX512_BF16 (elsewhere the program refuses it).
grep -qw avx512_bf16 /proc/cpuinfo && engines+=(ours-bf16)
declare -A names=([ours]="fairseq-cpp-generate float32" [ours-int8]="fairseq-cpp-generate --quantize int8"
  [ours-bf16]="fairseq-cpp-generate --bf16" [ct2-float32]="CTranslate2 float32"
  [ct2-int8]="CTranslate2 int8")
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "Translation's peak RSS and wall time against CTranslate2 $("$python" -c 'import ctranslate2; print(ctranslate2.__version__)')" \
  "on $cpu, $(nproc) cores: 256 Multi30k test sentences forced to 40 tokens, beam 5, batch 64, 2 threads;" \
  "whole processes, medians of $runs runs."
printf '%-6s %-36s %11s %9s %10s %11s %14s\n' size engine parameters "wall s" "peak MiB" "tokens" "MiB vs CT2"
IFS=, read -r -a size_list <<<"$sizes"
for size in "${size_list[@]}"; do
  prepare "$size"
  for i in $(seq "$runs"); do
    for engine in "${engines[@]}"; do run_engine "$size" "$engine" "$i"; done
  done
  params="$(sed -n 's/.*loaded .* (\([0-9]*\) parameters.*/\1/p' "$work/$size.ours.1.err" | head -1)"
  declare -A rss
  for engine in "${engines[@]}"; do
    wall="$(for i in $(seq "$runs"); do cut -d' ' -f1 "$work/$size.$engine.$i.time"; done | median)"
    rss[$engine]="$(for i in $(seq "$runs"); do cut -d' ' -f2 "$work/$size.$engine.$i.time"; done | median)"
    tokens="$(sed -E 's/.*Translated [0-9]+ sentences \(([0-9]+) tokens\).*/\1/' "$work/$size.$engine.1.log")"
    peer="ct2-float32"  # also --bf16's: CTranslate2 has no bf16 on the CPU
    [[ $engine == *int8 ]] && peer="ct2-int8"
    vs="-"
    [[ $engine == ours* ]] && vs="$(printf '%.2fx' "$(echo "${rss[$engine]} / $(for i in $(seq "$runs"); do
      cut -d' ' -f2 "$work/$size.$peer.$i.time"; done | median)" | bc -l)")"
    printf '%-6s %-36s %11s %9.2f %10.0f %11s %14s\n' "$size" "${names[$engine]}" "${params:-?}" "$wall" \
      "$(echo "${rss[$engine]} / 1024" | bc -l)" "$tokens" "$vs"
  done
  unset rss
done
