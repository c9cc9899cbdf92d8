#!/usr/bin/env bash
# Run on a CPU machine before a device run (see tools/gpu/run.sh): makes `.gpu-deps/` (ignored by
# git), which the run carries:
#   .gpu-deps/prefix  the C++ libraries the GPU machine lacks, from Debian's packages:
#                     ../shared/gpu/prepare-deps.sh's (yaml-cpp, fmt, SentencePiece, GoogleTest,
#                     nlohmann-json) and the project's own needs beyond them (zlib and OpenSSL's
#                     libcrypto for checkpoints, jemalloc for the programs)
#   .gpu-deps/commit  the commit the run builds (the tree travels without .git)
# and the link `.gpu-shared` to ../shared, through which the run carries the fixture's checkpoint,
# data-bin and translations (carry the paths through the link that it prints: the files travel,
# nothing is copied into the repository).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
dest=.gpu-deps
rm -rf "$dest"
bash ../shared/gpu/prepare-deps.sh "$dest" >/dev/null
extra=(zlib1g zlib1g-dev libssl3 libssl-dev libjemalloc2 libjemalloc-dev)
mkdir -p "$dest/debs"
(cd "$dest/debs" && apt-get download "${extra[@]}" >/dev/null)
for d in "$dest"/debs/*.deb; do dpkg -x "$d" "$dest/prefix"; done
rm -rf "$dest/debs" "$dest/prefix/usr/share/doc" "$dest/prefix/usr/share/man"
# The shared libraries are what the build links; the static archives (but GoogleTest's, which has
# no other) only weigh on the 64 MiB that travel.
find "$dest/prefix" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' -delete
git rev-parse HEAD >"$dest/commit"
ln -sfn "$(cd ../shared && pwd)" .gpu-shared
echo "ready: $dest ($(du -sh "$dest" | cut -f1)), commit $(cat "$dest/commit")"
fx=.gpu-shared/fixtures/fairseq-v0.9
echo "device run: command 'tools/gpu/run.sh \$OUT', carry [\".gpu-deps\", \"$fx/checkpoint_best.pt\"," \
  "\"$fx/data-bin\", \"$fx/generate-test-beam5.txt\"]"
