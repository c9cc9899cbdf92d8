#!/usr/bin/env bash
# fairseq-cpp-generate's speed with the fairseq v0.9 fixture checkpoint (Multi30k test, 1,000
# sentences, beam 5, batch 128, 2 threads) against fairseq-generate's figure from the fixture
# README (42.26 sentences/s, 632.82 tokens/s on a quiet machine of this class), plus, run in the
# same invocation, the same search one batch at a time on both intra-op threads (how fairseq and
# fairseq-cpp before it searched) as a baseline; then ours (float32 and --quantize int8, and --bf16
# on a CPU with AVX512_BF16) against CTranslate2 float32 and int8 on the same model, whole
# processes, with peak RSS and BLEU (the second half below).
#
#   tools/bench/generate.sh [BUILD_DIR] [RUNS]        (default: build, 3 runs; prints medians)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$here/build}"
cmake --build "$build" --target fsq_bench_generate >/dev/null  # benchmarks are built on demand
runs="${2:-3}"
fixture="${FSQ_SHARED:-$here/../shared}/fixtures/fairseq-v0.9"
[[ -f "$fixture/checkpoint_best.pt" ]] || { echo "fixture missing: $fixture/checkpoint_best.pt" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$here/tools/fairseq-import" "$fixture/checkpoint_best.pt" "$tmp/imported.pt" >/dev/null
# Passive OpenMP waits: LibTorch's 2 OpenMP threads spinning between parallel regions compete with
# OpenBLAS's own 2 GEMM threads; measured on a quiet 2-core machine: 37-40 s with spinning, 15 s
# without (and 15 s with --cpu-threads 1, where OpenBLAS alone uses both cores).
export OMP_WAIT_POLICY=PASSIVE

echo "fairseq-cpp-generate, $runs runs:"
for i in $(seq "$runs"); do
  "$build/fairseq-cpp-generate" "$fixture/data-bin" --path "$tmp/imported.pt" --gen-subset test --beam 5 \
    --batch-size 128 --remove-bpe sentencepiece --cpu-threads 2 --quiet 2>/dev/null | grep '^| Translated'
done | tee "$tmp/runs.txt"
median="$(sed -E 's/.*\(([0-9.]+) sentences\/s, ([0-9.]+) tokens\/s\).*/\1 \2/' "$tmp/runs.txt" | sort -n | \
  awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}')"
read -r sps tps <<<"$median"
echo
printf '%-46s %12s %11s %9s\n' "program (beam 5, batch 128, 2 threads)" "sentences/s" "tokens/s" "vs fairseq"
printf '%-46s %12.2f %11.2f %9s\n' "fairseq-generate v0.9 (README figure)" 42.26 632.82 "1.00x"
printf '%-46s %12.2f %11.2f %8.2fx\n' "fairseq-cpp-generate (median of $runs)" "$sps" "$tps" "$(echo "$sps / 42.26" | bc -l)"
echo
echo "The same search in one process: one batch at a time (baseline) vs parts on workers (median of $runs):"
"$build/tools/bench/fsq_bench_generate" "$fixture/data-bin" "$tmp/imported.pt" --threads 2 --runs "$runs" 2>/dev/null

# Against CTranslate2 (issue 22): ours (float32, and int8 with --quantize int8) and CTranslate2
# float32 and int8 on the same model (the imported fixture checkpoint, converted by
# tools/bench/ct2_convert.py), the same test sentences (the data-bin's ids), beam 5, batches of 128 sentences and 2 threads (ours: --cpu-threads 2;
# CTranslate2: intra_threads 2, inter_threads 1). Each run is a whole process (start-up and model
# loading included), timed by /usr/bin/time, the four in turn, $runs times; the table has medians.
# BLEU: sacreBLEU (default settings) of the last run's H- lines, SentencePiece removed, against the
# raw test_2016_flickr.de. Needs the project's Python environment (.venv, tools/requirements.txt).
# A busy machine hurts CTranslate2 most: its 2 spinning OpenMP threads slowed down 5-10x when another
# process took a core (measured); the load average before the runs is printed with the table.
python="$here/.venv/bin/python"
reference="${FSQ_SHARED:-$here/../shared}/data/multi30k/test_2016_flickr.de.gz"
echo
if ! "$python" -c 'import ctranslate2, sacrebleu' 2>/dev/null; then
  echo "CTranslate2 comparison skipped: $python lacks ctranslate2 or sacrebleu (tools/setup.sh --torch wheel)"
  exit 0
fi
[[ -f "$reference" ]] || { echo "reference missing: $reference" >&2; exit 1; }
gunzip -c "$reference" >"$tmp/ref.de"
"$python" "$here/tools/bench/ct2_convert.py" "$tmp/imported.pt" "$fixture/data-bin" "$tmp/ct2-float32" 2>/dev/null
"$python" "$here/tools/bench/ct2_convert.py" "$tmp/imported.pt" "$fixture/data-bin" "$tmp/ct2-int8" \
  --quantization int8 2>/dev/null
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
ct2_version="$("$python" -c 'import ctranslate2; print(ctranslate2.__version__)')"
ct2_backend="$(CT2_VERBOSE=1 "$python" -c "import ctranslate2; ctranslate2.Translator('$tmp/ct2-float32')" 2>&1 |
  sed -n 's/.*\(Selected ISA: [A-Z0-9]*\|SGEMM backend: [A-Za-z]*\|GEMM_S8 backend: [A-Za-z]*\).*/\1/p' | paste -sd, -)"

engines=(ours ours-int8 ct2-float32 ct2-int8)
# Our int8 kernel needs AVX-512 VNNI or AVX2 with FMA: without them, float32 only.
grep -qwE 'avx512_vnni|avx2' /proc/cpuinfo && grep -qw fma /proc/cpuinfo ||
  { engines=(ours ct2-float32); echo "(neither AVX-512 VNNI nor AVX2 on this CPU: float32 only)"; }
# --bf16 (issue 37) where the CPU has AVX512_BF16 (elsewhere the program refuses it).
grep -qw avx512_bf16 /proc/cpuinfo && engines+=(ours-bf16)
run_engine() {  # ENGINE RUN: one whole process; its output in $tmp/ENGINE.RUN.{txt,log,time}
  local engine=$1 i=$2 out="$tmp/$1.$2"
  case "$engine" in
    ours | ours-int8 | ours-bf16)
      local precision=(--quantize none)
      [[ "$engine" == ours-int8 ]] && precision=(--quantize int8)
      [[ "$engine" == ours-bf16 ]] && precision=(--bf16)
      /usr/bin/time -f '%e %M' -o "$out.time" "$build/fairseq-cpp-generate" "$fixture/data-bin" \
        --path "$tmp/imported.pt" --gen-subset test --beam 5 --batch-size 128 --remove-bpe sentencepiece \
        --cpu-threads 2 "${precision[@]}" >"$out.txt" 2>/dev/null
      grep '^| Translated' "$out.txt" >"$out.log" ;;
    ct2-*)
      # CTranslate2 with its own OpenMP settings (libgomp's spinning waits): on a quiet machine 1.6x
      # the speed it has with the passive waits exported above for ours (4.4 s against 7.3 s).
      env -u OMP_WAIT_POLICY /usr/bin/time -f '%e %M' -o "$out.time" "$python" "$here/tools/bench/ct2_translate.py" translate \
        "$tmp/$engine" "$fixture/data-bin" --subset test --beam 5 --batch-size 128 \
        --compute-type "${engine#ct2-}" --intra-threads 2 --inter-threads 1 --remove-bpe sentencepiece \
        --output "$out.txt" >"$out.stdout"
      grep '^| Translated' "$out.stdout" >"$out.log" ;;
  esac
}
load="$(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$runs"); do
  for engine in "${engines[@]}"; do run_engine "$engine" "$i"; done
done
median() { sort -g | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }
declare -A whole_sps search_sps
echo "CPU translation against CTranslate2 $ct2_version ($ct2_backend) on $cpu, $(nproc) cores:"
echo "Multi30k test (1,000 sentences), beam 5, batch 128, 2 threads; whole process, median of $runs runs" \
  "(load average before them: $load)."
printf '%-36s %12s %11s %10s %14s %7s\n' "engine" "sentences/s" "tokens/s" "peak RSS" "search only" "BLEU"
for engine in "${engines[@]}"; do
  read -r sentences tokens < <(sed -E 's/.*Translated ([0-9]+) sentences \(([0-9]+) tokens\).*/\1 \2/' "$tmp/$engine.1.log")
  wall="$(for i in $(seq "$runs"); do cut -d' ' -f1 "$tmp/$engine.$i.time"; done | median)"
  rss="$(for i in $(seq "$runs"); do cut -d' ' -f2 "$tmp/$engine.$i.time"; done | median)"
  search="$(for i in $(seq "$runs"); do sed -E 's/.*\(([0-9.]+) sentences\/s.*/\1/' "$tmp/$engine.$i.log"; done | median)"
  grep '^H-' "$tmp/$engine.$runs.txt" | sed 's/^H-//' | sort -n -k1,1 | cut -f3 >"$tmp/$engine.hyp"
  bleu="$("$python" -m sacrebleu "$tmp/ref.de" -i "$tmp/$engine.hyp" -b -w 2)"
  case "$engine" in
    ours) name="fairseq-cpp-generate float32" ;;
    ours-int8) name="fairseq-cpp-generate --quantize int8" ;;
    ours-bf16) name="fairseq-cpp-generate --bf16" ;;
    ct2-float32) name="CTranslate2 float32" ;;
    ct2-int8) name="CTranslate2 int8 (weights and GEMMs)" ;;
  esac
  whole_sps[$engine]="$(echo "$sentences / $wall" | bc -l)"
  search_sps[$engine]="$search"
  printf '%-36s %12.2f %11.1f %6.0f MiB %9.2f s/s %7.2f\n' "$name" "${whole_sps[$engine]}" \
    "$(echo "$tokens / $wall" | bc -l)" "$(echo "$rss / 1024" | bc -l)" "$search" "$bleu"
done
echo "(search only: each program's own | Translated line, loading left out; tokens with </s>, as fairseq counts)"
ratio() { echo "${whole_sps[$1]} / ${whole_sps[$2]}" | bc -l; }
search_ratio() { echo "${search_sps[$1]} / ${search_sps[$2]}" | bc -l; }
printf 'ours float32 / CTranslate2 float32: %.2fx whole process, %.2fx search only\n' "$(ratio ours ct2-float32)" \
  "$(search_ratio ours ct2-float32)"
if [[ -n "${whole_sps[ours-bf16]:-}" ]]; then
  printf 'ours bf16 / ours float32: %.2fx whole process, %.2fx search only\n' "$(ratio ours-bf16 ours)" \
    "$(search_ratio ours-bf16 ours)"
  [[ -n "${whole_sps[ours-int8]:-}" ]] && printf 'ours bf16 / ours int8: %.2fx whole process, %.2fx search only\n' \
    "$(ratio ours-bf16 ours-int8)" "$(search_ratio ours-bf16 ours-int8)"
fi
[[ -n "${whole_sps[ours-int8]:-}" ]] || exit 0
printf 'ours int8 / CTranslate2 int8: %.2fx whole process, %.2fx search only\n' "$(ratio ours-int8 ct2-int8)" \
  "$(search_ratio ours-int8 ct2-int8)"
printf 'ours int8 / ours float32: %.2fx whole process, %.2fx search only\n' "$(ratio ours-int8 ours)" \
  "$(search_ratio ours-int8 ours)"
printf 'ours int8 / CTranslate2 float32: %.2fx whole process, %.2fx search only\n' "$(ratio ours-int8 ct2-float32)" \
  "$(search_ratio ours-int8 ct2-float32)"
