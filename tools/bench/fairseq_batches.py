"""What fairseq's batch list costs at a data-bin's size: its steps, in its own libraries' terms.

fairseq (LanguagePairDataset.ordered_indices, data_utils.filter_by_size, batch_by_size) orders the
examples with a seeded permutation and two numpy mergesorts (target, then source length), and keeps
the epoch's batches as a Python list of numpy int64 arrays (one per batch), which every epoch
shuffles. This script reads the sizes from a data-bin's .idx files, runs the numpy steps exactly as
fairseq does, cuts batches by max_tokens counting padding (batch_by_size_fast's rule, here a Python
loop whose time is not fairseq's Cython time and is not reported), builds the same list of arrays,
and reports the ordering's time and the memory the Python objects take (tracemalloc), per pair.
    python3 tools/bench/fairseq_batches.py DATA_BIN [--max-tokens 4096] [--src en --tgt de]
"""
import argparse
import os
import sys
import time
import tracemalloc

import numpy as np


def sizes(path):
    with open(path, "rb") as f:
        if f.read(9) != b"MMIDIDX\x00\x00":
            sys.exit(f"{path}: not a fairseq MMapIndexedDataset index")
        f.read(8)  # version
        f.read(1)  # dtype
        n = int(np.frombuffer(f.read(8), dtype=np.uint64)[0])
        return np.frombuffer(f.read(4 * n), dtype=np.int32).astype(np.int64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data_bin")
    ap.add_argument("--src", default="en")
    ap.add_argument("--tgt", default="de")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    pair = f"{a.src}-{a.tgt}"
    src = sizes(os.path.join(a.data_bin, f"train.{pair}.{a.src}.idx"))
    tgt = sizes(os.path.join(a.data_bin, f"train.{pair}.{a.tgt}.idx"))
    n = len(src)
    tracemalloc.start()
    t0 = time.perf_counter()
    with_seed = np.random.RandomState(a.seed)  # fairseq's data_utils.numpy_seed
    indices = with_seed.permutation(n)
    indices = indices[np.argsort(tgt[indices], kind="mergesort")]
    indices = indices[np.argsort(src[indices], kind="mergesort")]
    keep = (src[indices] <= 1024) & (tgt[indices] <= 1024)  # filter_by_size, max positions 1024
    indices = indices[keep]
    t_order = time.perf_counter() - t0
    ordered_bytes = tracemalloc.get_traced_memory()[0]
    # batch_by_size_fast's rule: a batch ends before the example that would make
    # max(length) x count exceed max_tokens.
    lengths = np.maximum(src, tgt)[indices].tolist()
    bounds, start, longest = [], 0, 0
    for i, length in enumerate(lengths):
        longest_if = max(longest, length)
        if i > start and longest_if * (i - start + 1) > a.max_tokens:
            bounds.append(i)
            start, longest_if = i, length
        longest = longest_if
    del lengths
    before = tracemalloc.get_traced_memory()[0]
    batches = np.split(indices, bounds)  # fairseq 0.10+ (batch_by_size_vec): views of one int64 array
    with_seed.shuffle(batches)  # each epoch: the list shuffled
    batch_bytes = tracemalloc.get_traced_memory()[0] - before
    before = tracemalloc.get_traced_memory()[0]
    lists = [b.tolist() for b in batches]  # fairseq 0.9 (batch_by_size_fast): lists of Python ints
    list_bytes = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del lists
    print(f"pairs {n}, batches {len(batches)} (max_tokens {a.max_tokens})")
    print(f"fairseq's ordering (permutation, two mergesorts, size filter; numpy): {t_order:.2f} s, "
          f"{ordered_bytes / 2**20:.1f} MiB ({ordered_bytes / n:.1f} bytes/pair, the kept indices included)")
    print(f"fairseq 0.10+'s batch list (views of the indices): {batch_bytes / 2**20:.1f} MiB more, "
          f"{batch_bytes / len(batches):.0f} bytes/batch ({batch_bytes / n:.1f} bytes/pair)")
    print(f"fairseq 0.9's batch list (lists of Python ints): {list_bytes / 2**20:.1f} MiB, "
          f"{list_bytes / n:.1f} bytes/pair")


if __name__ == "__main__":
    main()
