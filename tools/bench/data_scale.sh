#!/usr/bin/env bash
# WMT-sized data (issue 22): preprocessing and training start-up as the corpus grows.
#   tools/bench/data_scale.sh [BUILD_DIR] [PAIRS...]        (default pairs: 29000 500000 4500000)
# For each corpus size N (tools/make-demo-corpus --seed 1 --train-size N, 500 valid pairs):
#   1. the new user's path: fairseq-cpp-preprocess --spm-vocab-size V --workers 2 on the raw text
#      (SentencePiece trained on every sentence: there is no --spm-input-sentence-size), only for
#      N <= FULL_SPM_MAX; wall, peak RSS, pairs/s;
#   2. the bounded path with the programs as they are: spm_train on a sample of SPM_SAMPLE sentences
#      (--input_sentence_size, 2 threads), then fairseq-cpp-preprocess --spm-model M --workers 2
#      (encoding + dictionary + binarizing): wall, peak RSS, pairs/s;
#   3. spm_encode of the same text with the same model, en and de side by side on the 2 cores;
#      our encoding time = wall of (2) - wall of (4): everything else in (2) is (4);
#   4. binarizing the already-encoded text (spm_encode's output): median of RUNS, pairs/s; the
#      data-bin must equal (2)'s byte for byte;
#   5. fairseq-cpp-train CONFIG on (4)'s data-bin, UPDATES updates, log_interval 1: seconds from
#      process start to the first update's line and to the "[data] ... examples" line (the log is
#      timestamped as it streams), peak RSS (/usr/bin/time -v), peak anonymous RSS (RssAnon of
#      /proc/PID/status sampled every 0.1 s: memory beyond the mmapped files and the binaries);
#      and the growth of both per sentence pair between consecutive sizes.
# Environment: WORK (kept when given; corpora there are reused), SPM_VOCAB (600), SPM_SAMPLE
# (200000), FULL_SPM_MAX (500000), RUNS (3), UPDATES (20), CONFIG
# (configs/multi30k_transformer_small.yaml), THREADS (2), APPEND (1: add these sizes' rows to the
# table of an earlier invocation with the same WORK, for a corpus generated meanwhile).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
shift || true
pairs=("$@")
[[ ${#pairs[@]} -gt 0 ]] || pairs=(29000 500000 4500000)
spm_vocab=${SPM_VOCAB:-600}
spm_sample=${SPM_SAMPLE:-200000}
full_spm_max=${FULL_SPM_MAX:-500000}
runs=${RUNS:-3}
updates=${UPDATES:-20}
config=${CONFIG:-$root/configs/multi30k_transformer_small.yaml}
threads=${THREADS:-2}
if [[ -n ${WORK:-} ]]; then
  work=$WORK
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
for tool in spm_encode spm_train /usr/bin/time python3; do
  command -v "$tool" >/dev/null || { echo "data_scale.sh: $tool is missing (apt-get install sentencepiece time)" >&2; exit 2; }
done
pre=$build/fairseq-cpp-preprocess
train=$build/fairseq-cpp-train
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

cat >"$work/stamp.py" <<'PY'
import sys, time
t0 = float(sys.argv[1])
for line in sys.stdin:
    sys.stdout.write("%9.3f %s" % (time.time() - t0, line))
    sys.stdout.flush()
PY

# wall seconds and peak RSS in KiB from a /usr/bin/time -v report
tv_wall() { awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s}' "$1"; }
tv_rss() { awk -F': ' '/Maximum resident set size/ {print $2}' "$1"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", b - a}'; }
log() { echo "[data_scale $(date +%T)] $*" >&2; }

results=$work/results.tsv
[[ ${APPEND:-0} == 1 ]] || : >"$results"
for n in "${pairs[@]}"; do
  corpus=$work/corpus-$n
  if [[ ! -f $corpus/train.en || $(wc -l <"$corpus/train.en") -ne $n ]]; then
    log "N=$n: generating the corpus"
    python3 "$root/tools/make-demo-corpus" --seed 1 --outdir "$corpus" --train-size "$n" --valid-size 500 \
      --test-size 10 >&2
  fi
  common=(--source-lang en --target-lang de --validpref "$corpus/valid" --joined-dictionary --workers 2)

  # 1. the new user's path: SentencePiece trained on all of the training text
  full_wall=- full_rss=- full_pps=-
  if ((n <= full_spm_max)); then
    log "N=$n: preprocess --spm-vocab-size $spm_vocab (trained on every sentence)"
    rm -rf "$work/full-$n"
    /usr/bin/time -v -o "$work/full-$n.time" "$pre" "${common[@]}" --trainpref "$corpus/train" \
      --destdir "$work/full-$n" --spm-vocab-size "$spm_vocab" >"$work/full-$n.log" 2>&1
    full_wall=$(tv_wall "$work/full-$n.time")
    full_rss=$(tv_rss "$work/full-$n.time")
    full_pps=$(awk -v n="$n" -v w="$full_wall" 'BEGIN {printf "%.0f", n / w}')
    rm -rf "$work/full-$n"
  fi

  # 2. a model trained on a bounded sample by spm_train, then encoding + binarizing by us
  log "N=$n: spm_train on a sample of $spm_sample sentences"
  t0=$(now)
  spm_train --input="$corpus/train.en,$corpus/train.de" --model_prefix="$work/spm-$n" --vocab_size="$spm_vocab" \
    --model_type=unigram --character_coverage=1.0 --input_sentence_size="$spm_sample" \
    --shuffle_input_sentence=true --num_threads="$threads" >"$work/spm_train-$n.log" 2>&1
  spm_train_s=$(elapsed "$t0" "$(now)")
  log "N=$n: preprocess --spm-model (encoding + binarizing)"
  rm -rf "$work/enc-bin-$n"
  /usr/bin/time -v -o "$work/encbin-$n.time" "$pre" "${common[@]}" --trainpref "$corpus/train" \
    --destdir "$work/enc-bin-$n" --spm-model "$work/spm-$n.model" >"$work/encbin-$n.log" 2>&1
  encbin_wall=$(tv_wall "$work/encbin-$n.time")
  encbin_rss=$(tv_rss "$work/encbin-$n.time")

  # 3. spm_encode, the two languages at once on the 2 cores
  log "N=$n: spm_encode"
  mkdir -p "$work/pieces-$n"
  t0=$(now)
  for split in train valid; do
    for lang in en de; do
      spm_encode --model="$work/spm-$n.model" --output_format=piece <"$corpus/$split.$lang" \
        >"$work/pieces-$n/$split.$lang" &
    done
    wait
  done
  spm_encode_s=$(elapsed "$t0" "$(now)")

  # 4. binarizing already-encoded text
  walls=()
  for r in $(seq "$runs"); do
    log "N=$n: binarize run $r/$runs"
    rm -rf "$work/bin-$n"
    /usr/bin/time -v -o "$work/bin-$n.time" "$pre" --source-lang en --target-lang de --trainpref "$work/pieces-$n/train" \
      --validpref "$work/pieces-$n/valid" --joined-dictionary --workers 2 --destdir "$work/bin-$n" >"$work/bin-$n.log" 2>&1
    walls+=("$(tv_wall "$work/bin-$n.time")")
  done
  bin_wall=$(printf '%s\n' "${walls[@]}" | median)
  bin_rss=$(tv_rss "$work/bin-$n.time")
  bin_pps=$(awk -v n="$n" -v w="$bin_wall" 'BEGIN {printf "%.0f", n / w}')
  same=yes
  for f in train.en-de.en.bin train.en-de.de.bin train.en-de.en.idx dict.en.txt; do
    cmp -s "$work/bin-$n/$f" "$work/enc-bin-$n/$f" || same=NO
  done
  rm -rf "$work/enc-bin-$n"
  encbin_pps=$(awk -v n="$n" -v w="$encbin_wall" 'BEGIN {printf "%.0f", n / w}')
  ours_enc_s=$(awk -v a="$encbin_wall" -v b="$bin_wall" 'BEGIN {printf "%.2f", a - b}')
  enc_ratio=$(awk -v a="$ours_enc_s" -v b="$spm_encode_s" 'BEGIN {printf "%.2f", a / b}')

  # 5. training: start-up and memory
  log "N=$n: fairseq-cpp-train, $updates updates"
  rm -f "$work/fifo"
  mkfifo "$work/fifo"
  t0=$(now)
  python3 "$work/stamp.py" "$t0" <"$work/fifo" >"$work/train-$n.log" &
  stamp_pid=$!
  /usr/bin/time -v -o "$work/train-$n.time" "$train" "$config" task.data="$work/bin-$n" checkpoint.no_save=true \
    checkpoint.save_dir="$work/ckpt" dataset.disable_validation=true optimization.max_update="$updates" \
    common.log_interval=1 common.log_format=simple common.cpu_threads="$threads" >"$work/fifo" 2>&1 &
  time_pid=$!
  anon_max=0
  train_pid=
  while kill -0 "$time_pid" 2>/dev/null; do
    [[ -n $train_pid ]] || train_pid=$(pgrep -P "$time_pid" || true)
    if [[ -n $train_pid && -r /proc/$train_pid/status ]]; then
      a=$(awk '/^RssAnon:/ {print $2}' "/proc/$train_pid/status" 2>/dev/null || true)
      [[ -n $a ]] && ((a > anon_max)) && anon_max=$a
    fi
    sleep 0.1
  done
  wait "$time_pid" || { echo "data_scale.sh: training failed, see $work/train-$n.log" >&2; exit 1; }
  wait "$stamp_pid"
  train_rss=$(tv_rss "$work/train-$n.time")
  first_s=$(awk '/num_updates=1,/ {print $1; exit}' "$work/train-$n.log")
  data_s=$(awk '/\[data\].* train .* examples/ {print $1; exit}' "$work/train-$n.log")
  model_s=$(awk '/\[train\] model / {print $1; exit}' "$work/train-$n.log")
  log1_s=$(awk '{print $1; exit}' "$work/train-$n.log")
  second_s=$(awk '/num_updates=2,/ {print $1; exit}' "$work/train-$n.log")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
    "$n" "$full_wall" "$full_rss" "$full_pps" "$spm_train_s" "$encbin_wall" "$encbin_rss" "$encbin_pps" \
    "$bin_wall" "$bin_rss" "$bin_pps" "$same" "$ours_enc_s" "$spm_encode_s" "$enc_ratio" \
    "$log1_s" "$model_s" "$data_s" "$first_s" "$second_s" "$train_rss $anon_max" >>"$results"
done

load_end=$(cut -d' ' -f1-3 /proc/loadavg)
echo
echo "data_scale: $cpu, $(nproc) cores; load average $load_start at the start, $load_end at the end"
echo "SentencePiece: $spm_vocab pieces, unigram; binarize: median of $runs; training: $(basename "$config"), $updates updates, $threads threads"
echo "pairs/s count sentence pairs (2 sentences each); RSS in MiB; 'ours enc' = wall(--spm-model) - wall(binarize)"
awk -F'\t' -v full_max="$full_spm_max" '
function mib(k) { return (k == "-" || k == "") ? "-" : sprintf("%.0f", k / 1024) }
BEGIN {
  printf "| pairs | preprocess --spm-vocab-size (all text): wall s / RSS MiB / pairs/s | spm_train sample s | preprocess --spm-model: wall s / RSS MiB / pairs/s | binarize encoded: wall s / RSS MiB / pairs/s (same bin) | SentencePiece encoding: ours s / spm_encode s (ratio) | train: first log / model / data loaded / first update / second update s | train peak RSS / peak anon MiB | growth per pair, RSS / anon bytes: since the previous size; since the smallest |\n"
  printf "|---|---|---|---|---|---|---|---|---|\n"
}
{
  split($21, m, " ")
  full = ($2 == "-") ? "skipped (N > " full_max ")" : sprintf("%.2f / %s / %s", $2, mib($3), $4)
  growth = "-"
  if (NR == 1) { fn = $1; frss = m[1]; fanon = m[2] }
  if (NR > 1) growth = sprintf("%.0f / %.0f", (m[1] - prss) * 1024 / ($1 - pn), (m[2] - panon) * 1024 / ($1 - pn))
  if (NR > 2) growth = growth sprintf("; since %s: %.0f / %.0f", fn, (m[1] - frss) * 1024 / ($1 - fn), (m[2] - fanon) * 1024 / ($1 - fn))
  printf "| %s | %s | %.2f | %.2f / %s / %s | %.2f / %s / %s (%s) | %s / %.2f (x%s) | %.2f / %.2f / %.2f / %.2f / %.2f | %s / %s | %s |\n",
    $1, full, $5, $6, mib($7), $8, $9, mib($10), $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, mib(m[1]), mib(m[2]), growth
  pn = $1; prss = m[1]; panon = m[2]
}' "$results"
[[ -n ${WORK:-} ]] && echo "logs and data in $work"
exit 0
