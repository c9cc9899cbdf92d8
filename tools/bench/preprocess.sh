#!/usr/bin/env bash
# Preprocess wall time on Multi30k (train+valid+test, already SentencePiece-encoded text, joined
# dictionary, --workers 2) versus a baseline run here: a plain Python implementation of the same
# dictionary + binarize step (Debian's /usr/bin/python3), and fairseq-preprocess's measured 8.9 s.
#   tools/bench/preprocess.sh [BUILD_DIR] [RUNS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
runs=${2:-5}
shared=${FSQ_SHARED:-$root/../shared}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/spm"
for split in train val test_2016_flickr; do
  for lang in en de; do
    gzip -dc "$shared/data/multi30k/$split.$lang.gz" |
      spm_encode --model="$shared/fixtures/fairseq-v0.9/spm8k.model" --output_format=piece >"$work/spm/$split.$lang"
  done
done

cat >"$work/baseline.py" <<'PY'
import collections, os, re, struct, sys
src, tgt, d, out = "en", "de", sys.argv[1], sys.argv[2]
ws = re.compile(r"\s+")
def toks(line): return ws.sub(" ", line).strip().split()
counts = collections.Counter()
for lang in (src, tgt):
    with open(f"{d}/train.{lang}", encoding="utf-8") as f:
        for line in f:
            counts.update(toks(line)); counts["</s>"] += 1
specials = ["<s>", "<pad>", "</s>", "<unk>"]
eos = counts.pop("</s>", 0)
syms = specials + [w for w, _ in sorted(sorted(counts.items()), key=lambda x: -x[1])]
i = 0
while len(syms) % 8: syms.append("madeupword%04d" % i); i += 1
index = {w: k for k, w in enumerate(syms)}
os.makedirs(out, exist_ok=True)
with open(f"{out}/dict.{src}.txt", "w", encoding="utf-8") as f:
    for w in syms[4:]: f.write(f"{w} {counts.get(w, 0)}\n")
for split, name in (("train", "train"), ("val", "valid"), ("test_2016_flickr", "test")):
    for lang in (src, tgt):
        sizes, data = [], bytearray()
        with open(f"{d}/{split}.{lang}", encoding="utf-8") as f:
            for line in f:
                ids = [index.get(w, 3) for w in toks(line)] + [2]
                data += struct.pack("<%dH" % len(ids), *ids); sizes.append(len(ids))
        p = f"{out}/{name}.{src}-{tgt}.{lang}"
        open(p + ".bin", "wb").write(data)
        ptrs, a = [], 0
        for s in sizes: ptrs.append(a); a += 2 * s
        with open(p + ".idx", "wb") as f:
            f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQ", 1, 8, len(sizes)))
            f.write(struct.pack("<%di" % len(sizes), *sizes)); f.write(struct.pack("<%dq" % len(ptrs), *ptrs))
PY

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
time_runs() {  # command... ; prints the median wall time in seconds
  for _ in $(seq "$runs"); do
    rm -rf "$work/out"
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
  done | median
}
d=$work/spm
ours=$(time_runs "$build/fairseq-cpp-preprocess" --source-lang en --target-lang de --trainpref "$d/train" \
  --validpref "$d/val" --testpref "$d/test_2016_flickr" --destdir "$work/out" --joined-dictionary --workers 2)
startup=$(time_runs "$build/fairseq-cpp-preprocess" --help)
python=$(time_runs /usr/bin/python3 "$work/baseline.py" "$d" "$work/out")
# Our output must be fairseq's.
rm -rf "$work/out"
"$build/fairseq-cpp-preprocess" --source-lang en --target-lang de --trainpref "$d/train" --validpref "$d/val" \
  --testpref "$d/test_2016_flickr" --destdir "$work/out" --joined-dictionary --workers 2 >/dev/null 2>&1
for f in "$shared/fixtures/fairseq-v0.9/data-bin/"*; do cmp -s "$f" "$work/out/$(basename "$f")" || echo "DIFFERS: $f"; done

printf '%-48s %10s %10s\n' "preprocess Multi30k (58k+4k lines, workers 2)" "wall s" "vs fairseq"
printf '%-48s %10.3f %9.1fx\n' "fairseq-cpp-preprocess (median of $runs)" "$ours" "$(echo "8.9 / $ours" | bc -l)"
printf '%-48s %10.3f %10s\n' "  of which program start-up (--help)" "$startup" ""
printf '%-48s %10.3f %9.1fx\n' "baseline: plain Python dict+binarize (here)" "$python" "$(echo "8.9 / $python" | bc -l)"
printf '%-48s %10.3f %9.1fx\n' "fairseq-preprocess v0.9 (fixture README)" 8.9 1
