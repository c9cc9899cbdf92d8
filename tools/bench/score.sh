#!/usr/bin/env bash
# Corpus BLEU + chrF + TER of one system of 3,000 sentences: fairseq-cpp-score against the
# sacreBLEU package (the pinned one in .venv, `sacrebleu REF -i SYS -m bleu chrf ter`), whole
# processes, alternating, median of RUNS each. The references are the first 3,000 German sentences
# of Multi30k's training set; the system is a seeded perturbation of them (words dropped, repeated,
# swapped, recased). Both must print the same scores; the table gives the medians and their ratio.
#   tools/bench/score.sh [BUILD_DIR] [RUNS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
runs=${2:-5}
python=$root/.venv/bin/python
[ -x "$root/.venv/bin/sacrebleu" ] || { echo "score.sh: no .venv/bin/sacrebleu; run tools/setup.sh --torch wheel" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

gzip -dc "$root/../shared/data/multi30k/train.de.gz" | sed -n '1,3000p' >"$work/ref.de"
"$python" - "$work/ref.de" "$work/sys.de" <<'PY'
import random, sys
rng = random.Random(1)
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in f:
        words = []
        for w in line.split():
            r = rng.random()
            if r < 0.1:
                continue
            if r < 0.15:
                words.append(w)
            words.append(w.lower() if r < 0.2 else w)
        if len(words) > 2 and rng.random() < 0.3:
            i = rng.randrange(len(words) - 1)
            words[i], words[i + 1] = words[i + 1], words[i]
        out.write(" ".join(words) + "\n")
PY

ours=("$build/fairseq-cpp-score" --sys "$work/sys.de" --ref "$work/ref.de" --metric bleu,chrf,ter)
theirs=("$root/.venv/bin/sacrebleu" "$work/ref.de" -i "$work/sys.de" -m bleu chrf ter -f text -w 2)
# The same lines (sacreBLEU pads them so that the '=' align).
diff <("${ours[@]}") <("${theirs[@]}" 2>/dev/null | sed 's/^ *//') >/dev/null ||
  { echo "score.sh: the outputs differ:" >&2; "${ours[@]}" >&2; "${theirs[@]}" >&2; exit 1; }

seconds() { local s e; s=$EPOCHREALTIME; "$@" >/dev/null 2>&1; e=$EPOCHREALTIME; awk -v s="$s" -v e="$e" 'BEGIN { print e - s }'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
: >"$work/ours.t"
: >"$work/theirs.t"
for _ in $(seq "$runs"); do
  seconds "${ours[@]}" >>"$work/ours.t"
  seconds "${theirs[@]}" >>"$work/theirs.t"
done
m_ours=$(median <"$work/ours.t")
m_theirs=$(median <"$work/theirs.t")
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
echo "corpus BLEU+chrF+TER, 3,000 sentences, 1 reference; whole process, median of $runs; $cpu ($(nproc) cores)"
printf '%-28s %10s %10s %10s\n' "" "median s" "min s" "max s"
printf '%-28s %10.3f %10.3f %10.3f\n' "fairseq-cpp-score" "$m_ours" "$(sort -g "$work/ours.t" | head -1)" \
  "$(sort -g "$work/ours.t" | tail -1)"
printf '%-28s %10.3f %10.3f %10.3f\n' "sacrebleu $("$python" -c 'import sacrebleu; print(sacrebleu.__version__)')" \
  "$m_theirs" "$(sort -g "$work/theirs.t" | head -1)" "$(sort -g "$work/theirs.t" | tail -1)"
echo "speed-up (sacreBLEU / ours, medians): $(awk -v a="$m_theirs" -v b="$m_ours" 'BEGIN { printf "%.1f", a / b }')x"
"${ours[@]}"
