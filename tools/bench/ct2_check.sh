#!/usr/bin/env bash
# The CTranslate2 converter checked (issue 22): the fairseq v0.9 fixture checkpoint, imported into
# ours, converted with tools/bench/ct2_convert.py, searched by CTranslate2 (beam 5, float32, batch
# 128, 2 threads) on the Multi30k test split (1,000 sentences), must give the H- pieces of
# fairseq-cpp-generate (beam 5, float32) on at least 97% of the sentences. Exit status 1 below.
# About half a minute on 2 cores.
#
#   tools/bench/ct2_check.sh [BUILD_DIR] [PYTHON]     (defaults: build, .venv/bin/python)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$here/build}"
python="${2:-$here/.venv/bin/python}"
fixture="${FSQ_SHARED:-$here/../shared}/fixtures/fairseq-v0.9"
[[ -f "$fixture/checkpoint_best.pt" ]] || { echo "ct2_check: fixture missing: $fixture/checkpoint_best.pt" >&2; exit 1; }
"$python" -c 'import ctranslate2' 2>/dev/null ||
  { echo "ct2_check: $python has no ctranslate2 (tools/requirements.txt; tools/setup.sh --torch wheel)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# LibTorch's and CTranslate2's OpenMP threads wait passively (a spinning thread starves the other
# one on 2 busy cores; generate.sh says more).
export OMP_WAIT_POLICY=PASSIVE

"$python" "$here/tools/fairseq-import" "$fixture/checkpoint_best.pt" "$tmp/imported.pt" 2>/dev/null
"$python" "$here/tools/bench/ct2_convert.py" "$tmp/imported.pt" "$fixture/data-bin" "$tmp/ct2"
"$build/fairseq-cpp-generate" "$fixture/data-bin" --path "$tmp/imported.pt" --gen-subset test --beam 5 \
  --batch-size 128 --cpu-threads 2 >"$tmp/ours.txt" 2>/dev/null
grep '^| Translated' "$tmp/ours.txt" | sed 's/^/fairseq-cpp-generate: /'
"$python" "$here/tools/bench/ct2_translate.py" translate "$tmp/ct2" "$fixture/data-bin" --subset test --beam 5 \
  --batch-size 128 --compute-type float32 --intra-threads 2 --inter-threads 1 --output "$tmp/ct2.txt" |
  grep '^| Translated' | sed 's/^/CTranslate2 float32: /'
"$python" "$here/tools/bench/ct2_translate.py" compare "$tmp/ours.txt" "$tmp/ct2.txt" --min-agreement 97
