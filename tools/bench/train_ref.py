#!/usr/bin/python3
"""Plain-PyTorch training loop for tools/bench/train.sh: the Multi30k small Transformer of
model_throughput_ref.py (post-norm, 3+3 layers, d 256, ffn 1024, 4 heads, shared embeddings,
dropout 0.1) trained on the fixture's data-bin with the preset's settings: fairseq's batches
(numpy-seeded permutation, sort by target then source length, 4096-token batches in multiples of
8, the epoch's batch order shuffled with seed + 1), label-smoothed loss 0.1, Adam (0.9, 0.98),
inverse_sqrt warm-up 400 to lr 5e-4, clip_norm 25. Reads fairseq's mmap data-bin with numpy.

usage: train_ref.py DATA_BIN UPDATES THREADS [compile]
prints one line per update, "update N ntokens T seconds S", then "words/s W" over updates 6.. (as
train.sh counts ours) and "total_seconds X" for the loop including its warm-up."""
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_throughput_ref as ref  # noqa: E402

MAX_TOKENS, MULTIPLE, SEED, EOS = 4096, 8, 1, 2
NUMPY_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}


def read_indexed(prefix):
    """fairseq's MMapIndexedDataset: (sizes, pointers, data) of PREFIX.idx / PREFIX.bin."""
    with open(prefix + ".idx", "rb") as f:
        assert f.read(9) == b"MMIDIDX\x00\x00", prefix
        version = np.frombuffer(f.read(8), np.uint64)[0]
        assert version == 1, version
        dtype = NUMPY_DTYPES[f.read(1)[0]]
        length = int(np.frombuffer(f.read(8), np.uint64)[0])
        if os.path.getsize(prefix + ".idx") > 26 + 12 * length:
            f.read(8)  # the document count of fairseq >= 0.10 (v0.9 has none)
        sizes = np.frombuffer(f.read(4 * length), np.int32)
        pointers = np.frombuffer(f.read(8 * length), np.int64)
    data = np.memmap(prefix + ".bin", dtype=dtype, mode="r")
    return sizes.astype(np.int64), pointers // np.dtype(dtype).itemsize, data


def batches_of(src_sizes, tgt_sizes):
    """fairseq's ordered_indices + batch_by_size + the epoch-1 shuffle."""
    with_seed = np.random.RandomState(SEED)
    indices = with_seed.permutation(len(src_sizes)).astype(np.int64)
    indices = indices[np.argsort(tgt_sizes[indices], kind="mergesort")]
    indices = indices[np.argsort(src_sizes[indices], kind="mergesort")]
    batches, batch, longest = [], [], 0
    for i in indices:
        n = max(src_sizes[i], tgt_sizes[i])
        longest_next = max(longest, n)
        if batch and (len(batch) + 1) * longest_next > MAX_TOKENS:
            keep = max(MULTIPLE * (len(batch) // MULTIPLE), len(batch) % MULTIPLE)
            batches.append(batch[:keep])
            batch = batch[keep:]
            longest = max((max(src_sizes[j], tgt_sizes[j]) for j in batch), default=0)
        batch.append(int(i))
        longest = max(longest, n)
    if batch:
        batches.append(batch)
    np.random.RandomState(SEED + 1).shuffle(batches)
    return batches


def collate(ids, src, tgt):
    """Left-padded sources, right-padded targets and prev_output_tokens (</s> + target[:-1])."""
    def rows(dataset):
        sizes, pointers, data = dataset
        return [torch.from_numpy(data[pointers[i]:pointers[i] + sizes[i]].astype(np.int64)) for i in ids]

    s, t = rows(src), rows(tgt)
    ls, lt = max(len(x) for x in s), max(len(x) for x in t)
    src_tokens = torch.full((len(ids), ls), ref.PAD, dtype=torch.long)
    target = torch.full((len(ids), lt), ref.PAD, dtype=torch.long)
    prev = torch.full((len(ids), lt), ref.PAD, dtype=torch.long)
    for r, (x, y) in enumerate(zip(s, t)):
        src_tokens[r, ls - len(x):] = x
        target[r, :len(y)] = y
        prev[r, 0] = EOS
        prev[r, 1:len(y)] = y[:-1]
    return src_tokens, prev, target


def main():
    data_bin, updates, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    use_compile = len(sys.argv) > 4 and sys.argv[4] == "compile"
    start = time.perf_counter()
    torch.set_num_threads(threads)
    torch.manual_seed(SEED)
    src = read_indexed(os.path.join(data_bin, "train.en-de.en"))
    tgt = read_indexed(os.path.join(data_bin, "train.en-de.de"))
    batches = batches_of(src[0], tgt[0])
    model = ref.Model().train()
    step_model = torch.compile(model) if use_compile else model
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-7, betas=(0.9, 0.98), eps=1e-8)
    lr, warmup = 5e-4, 400
    seconds, words = [], []
    for n in range(1, updates + 1):
        t0 = time.perf_counter()
        src_tokens, prev, target = collate(batches[n - 1], src, tgt)
        lprobs = torch.log_softmax(step_model(src_tokens, prev).float(), -1).view(-1, ref.V)
        flat = target.view(-1, 1)
        keep = flat.ne(ref.PAD)
        nll = -lprobs.gather(-1, flat)[keep].sum()
        smooth = -lprobs.sum(-1, keepdim=True)[keep].sum()
        ntokens = int(keep.sum())
        loss = 0.9 * nll + 0.1 / ref.V * smooth
        optimizer.zero_grad()
        loss.backward()
        for p in model.parameters():  # fairseq divides the summed gradients by the sample size
            p.grad.div_(ntokens)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 25.0)
        for group in optimizer.param_groups:  # inverse_sqrt: linear warm-up, then lr * sqrt(warmup / n)
            group["lr"] = lr * n / warmup if n < warmup else lr * math.sqrt(warmup / n)
        optimizer.step()
        seconds.append(time.perf_counter() - t0)
        words.append(ntokens)
        print(f"update {n} ntokens {ntokens} seconds {seconds[-1]:.3f}", flush=True)
    print(f"words/s {sum(words[5:]) / sum(seconds[5:]):.0f}")
    print(f"total_seconds {time.perf_counter() - start:.1f}")


if __name__ == "__main__":
    main()
