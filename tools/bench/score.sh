#!/usr/bin/env bash
# fairseq-cpp-score against the sacreBLEU package (the pinned one in .venv), whole processes,
# alternating, median of RUNS each, in two settings:
#   1. corpus BLEU + chrF + TER of one system of 3,000 sentences (`sacrebleu REF -i SYS -m bleu chrf ter`);
#   2. paired bootstrap resampling of 10 systems (a baseline and 9) of 3,000 sentences with 1,000
#      resamples, BLEU + chrF + TER (`sacrebleu REF -i SYS0 ... SYS9 -m bleu chrf ter --paired-bs`).
# The references are the first 3,000 German sentences of Multi30k's training set; each system is a
# seeded perturbation of them (words dropped, repeated, swapped, recased). Both programs must print
# the same text (sacreBLEU pads its one-system lines to align the '='); the tables give the medians
# and their ratio. fairseq-cpp-score uses the cores this process may use (--cpu-threads 0).
#   tools/bench/score.sh [BUILD_DIR] [RUNS] [PAIRED_RUNS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
runs=${2:-5}
paired_runs=${3:-3}
python=$root/.venv/bin/python
[ -x "$root/.venv/bin/sacrebleu" ] || { echo "score.sh: no .venv/bin/sacrebleu; run tools/setup.sh --torch wheel" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

gzip -dc "${FSQ_SHARED:-$root/../shared}/data/multi30k/train.de.gz" | sed -n '1,3000p' >"$work/ref.de"
"$python" - "$work" <<'PY'
import random, sys
work = sys.argv[1]
refs = open(f"{work}/ref.de", encoding="utf-8").read().splitlines()
for s in range(10):
    rng = random.Random(s + 1)
    with open(f"{work}/sys{s}.de", "w", encoding="utf-8") as out:
        for line in refs:
            words = []
            for w in line.split():
                r = rng.random()
                if r < 0.05 + 0.01 * s:
                    continue
                if r < 0.1 + 0.01 * s:
                    words.append(w)
                words.append(w.lower() if r < 0.15 + 0.01 * s else w)
            if len(words) > 2 and rng.random() < 0.3:
                i = rng.randrange(len(words) - 1)
                words[i], words[i + 1] = words[i + 1], words[i]
            out.write(" ".join(words) + "\n")
PY
cd "$work"
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
version=$("$python" -c 'import sacrebleu; print(sacrebleu.__version__)')
seconds() { local s e; s=$EPOCHREALTIME; "$@" >/dev/null 2>&1; e=$EPOCHREALTIME; awk -v s="$s" -v e="$e" 'BEGIN { print e - s }'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# compare TITLE RUNS -- OURS... -- THEIRS...
compare() {
  local title=$1 n=$2
  shift 3
  local ours=() theirs=()
  while [ "$1" != "--" ]; do ours+=("$1"); shift; done
  shift
  theirs=("$@")
  diff <("${ours[@]}" | sed 's/^ *//') <("${theirs[@]}" 2>/dev/null | sed 's/^ *//') >/dev/null ||
    { echo "score.sh: the outputs differ:" >&2; "${ours[@]}" >&2; "${theirs[@]}" >&2; exit 1; }
  : >ours.t
  : >theirs.t
  for _ in $(seq "$n"); do
    seconds "${ours[@]}" >>ours.t
    seconds "${theirs[@]}" >>theirs.t
  done
  local m_ours m_theirs
  m_ours=$(median <ours.t)
  m_theirs=$(median <theirs.t)
  echo
  echo "$title; whole process, median of $n; $cpu ($(nproc) cores)"
  printf '%-28s %10s %10s %10s\n' "" "median s" "min s" "max s"
  printf '%-28s %10.3f %10.3f %10.3f\n' "fairseq-cpp-score" "$m_ours" "$(sort -g ours.t | head -1)" "$(sort -g ours.t | tail -1)"
  printf '%-28s %10.3f %10.3f %10.3f\n' "sacrebleu $version" "$m_theirs" "$(sort -g theirs.t | head -1)" \
    "$(sort -g theirs.t | tail -1)"
  echo "speed-up (sacreBLEU / ours, medians): $(awk -v a="$m_theirs" -v b="$m_ours" 'BEGIN { printf "%.1f", a / b }')x"
}

systems=(sys0.de sys1.de sys2.de sys3.de sys4.de sys5.de sys6.de sys7.de sys8.de sys9.de)
compare "corpus BLEU+chrF+TER, 1 system of 3,000 sentences, 1 reference" "$runs" -- \
  "$build/fairseq-cpp-score" --sys sys0.de --ref ref.de --metric bleu,chrf,ter -- \
  "$root/.venv/bin/sacrebleu" ref.de -i sys0.de -m bleu chrf ter -f text -w 2
"$build/fairseq-cpp-score" --sys sys0.de --ref ref.de --metric bleu,chrf,ter
compare "paired bootstrap resampling, BLEU+chrF+TER, 10 systems of 3,000 sentences, 1,000 resamples" "$paired_runs" -- \
  "$build/fairseq-cpp-score" --sys "${systems[@]}" --ref ref.de --metric bleu,chrf,ter --paired-bs -- \
  "$root/.venv/bin/sacrebleu" ref.de -i "${systems[@]}" -m bleu chrf ter --paired-bs -f text -w 2
"$build/fairseq-cpp-score" --sys "${systems[@]}" --ref ref.de --metric bleu,chrf,ter --paired-bs | sed -n '1,/^$/p'
