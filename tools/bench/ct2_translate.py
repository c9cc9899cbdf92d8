#!/usr/bin/env python3
"""CTranslate2's side of tools/bench/generate.sh and tools/bench/ct2_check.sh.

  ct2_translate.py translate MODEL_DIR DATA_BIN [--subset test] [--beam 5] [--batch-size 128]
                   [--compute-type float32] [--intra-threads 2] [--inter-threads 1]
                   [--remove-bpe sentencepiece] [--min-len 1] [--max-len 200] [--output FILE]
  ct2_translate.py compare OURS CT2 [--min-agreement 97]

translate: searches a data-bin split with a model of tools/bench/ct2_convert.py, fed the same
source token ids as fairseq-cpp-generate (the split's pieces, </s> added by the model), with
fairseq's settings (beam 5, lenpen 1 over the length with </s>, max length 200, no </s> first).
Two differences remain: CTranslate2 masks </s> at the first step before its log-softmax (fairseq
after: its scores are a little higher), and at 200 tokens it stops where fairseq forces a </s>. Prints
fairseq-generate's `| Translated` line for the search alone and, with --output, writes one
`H-ID<TAB>SCORE<TAB>TEXT` line per sentence in id order. Does not import torch (its process is
timed whole, as ours is).
compare: the share of sentences whose H- text is the same in two files of H- lines
(fairseq-cpp-generate's output, translate's); exit status 1 below --min-agreement percent.
"""
import argparse
import glob
import json
import os
import re
import sys
import time

import numpy as np

# fairseq's MMapIndexedDataset dtype codes (the data-bin's .idx header).
_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}
_EOS = 2


def read_split(prefix):
    """The sentences of PREFIX.idx/.bin as lists of token ids (with the trailing </s> the data-bin
    stores)."""
    idx = prefix + ".idx"
    with open(idx, "rb") as f:
        if f.read(9) != b"MMIDIDX\x00\x00":
            raise ValueError(f"{idx}: not fairseq's mmap index")
        f.read(8)  # version
        dtype = _DTYPES[f.read(1)[0]]
        length = int(np.frombuffer(f.read(8), np.uint64)[0])
        if os.path.getsize(idx) > 26 + 12 * length:
            f.read(8)  # the document count of fairseq >= 0.10 (v0.9 has none)
        sizes = np.frombuffer(f.read(4 * length), np.int32)
        pointers = np.frombuffer(f.read(8 * length), np.int64) // np.dtype(dtype).itemsize
    data = np.fromfile(prefix + ".bin", dtype=dtype)
    return [data[p:p + n].tolist() for p, n in zip(pointers, sizes)]


def split_prefix(data_bin, subset):
    """DATA_BIN/SUBSET.SRC-TGT.SRC of the split's one language pair, and the pair."""
    found = sorted(glob.glob(os.path.join(data_bin, f"{subset}.*-*.*.idx")))
    pairs = {re.match(r"(.+)\.([^.-]+)-([^.-]+)\.([^.]+)\.idx$", os.path.basename(p)).group(2, 3) for p in found}
    if len(pairs) != 1:
        raise ValueError(f"{data_bin}: expected one language pair for {subset}, found {sorted(pairs) or 'none'}")
    src, tgt = pairs.pop()
    return os.path.join(data_bin, f"{subset}.{src}-{tgt}.{src}"), src, tgt


def source_vocabulary(model_dir):
    for name in ("shared_vocabulary", "source_vocabulary"):
        for ext, load in ((".json", json.load), (".txt", lambda f: f.read().split("\n")[:-1])):
            path = os.path.join(model_dir, name + ext)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    return load(f)
    raise ValueError(f"{model_dir}: no source vocabulary")


def post_process(pieces, remove_bpe):
    """fairseq's post_process: `sentencepiece` joins the pieces (U+2581 -> space), else the pieces."""
    text = " ".join(pieces)
    if remove_bpe == "sentencepiece":
        return text.replace(" ", "").replace("\u2581", " ").strip()
    if remove_bpe:
        raise ValueError(f"--remove-bpe {remove_bpe}: only sentencepiece")
    return text


def translate(opts):
    start = time.monotonic()
    import ctranslate2  # (timed: part of the load, as LibTorch's is for ours)

    prefix, _, _ = split_prefix(opts.data_bin, opts.subset)
    vocab = source_vocabulary(opts.model_dir)
    sentences = read_split(prefix)
    # The pieces of the ids, without the stored </s>: the model adds it (add_source_eos).
    source = [[vocab[i] for i in (s[:-1] if s and s[-1] == _EOS else s)] for s in sentences]
    translator = ctranslate2.Translator(opts.model_dir, device="cpu", compute_type=opts.compute_type,
                                        intra_threads=opts.intra_threads, inter_threads=opts.inter_threads)
    loaded = time.monotonic()
    results = translator.translate_batch(
        source, max_batch_size=opts.batch_size, batch_type="examples", beam_size=opts.beam,
        length_penalty=1.0,        # fairseq's lenpen 1: score / length ...
        return_end_token=True,     # ... where the length counts </s>, as fairseq's does
        max_decoding_length=opts.max_len,  # fairseq's max_len_b (max_len_a 0)
        min_decoding_length=opts.min_len,  # fairseq's min_len (1: no </s> at the first step)
        return_scores=True)
    seconds = time.monotonic() - loaded
    tokens = 0
    lines = []
    for i, r in enumerate(results):
        hyp = r.hypotheses[0]
        tokens += len(hyp) + (0 if hyp and hyp[-1] == "</s>" else 1)  # fairseq counts the </s>
        if hyp and hyp[-1] == "</s>":
            hyp = hyp[:-1]
        lines.append(f"H-{i}\t{r.scores[0]:.6f}\t{post_process(hyp, opts.remove_bpe)}\n")
    if opts.output:
        with open(opts.output, "w", encoding="utf-8") as f:
            f.writelines(lines)
    n = len(sentences)
    print(f"| loaded in {loaded - start:.2f}s (import, data, model; compute_type {opts.compute_type}, "
          f"intra_threads {opts.intra_threads}, inter_threads {opts.inter_threads})")
    print(f"| Translated {n} sentences ({tokens} tokens) in {seconds:.1f}s "
          f"({n / seconds:.2f} sentences/s, {tokens / seconds:.2f} tokens/s)")
    return 0


def read_hypotheses(path):
    """{id: (score, text)} of a file's H- lines (fairseq-generate's output or translate's)."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("H-"):
                head, score, *text = line.rstrip("\n").split("\t")
                out[int(head[2:])] = (float(score), text[0] if text else "")
    return out


def compare(opts):
    ours, ct2 = read_hypotheses(opts.ours), read_hypotheses(opts.ct2)
    if not ours or set(ours) != set(ct2):
        print(f"compare: {opts.ours} has {len(ours)} H- lines and {opts.ct2} {len(ct2)}, for different ids",
              file=sys.stderr)
        return 1
    same = [i for i in ours if ours[i][1] == ct2[i][1]]
    differ = sorted(set(ours) - set(same))
    share = 100.0 * len(same) / len(ours)
    # CTranslate2 masks </s> at the first step before its log-softmax (fairseq after), so its scores
    # are a little higher; a hypothesis cut at the maximum length has no forced </s> in it.
    score_diff, worst = max(((abs(ours[i][0] - ct2[i][0]), i) for i in same), default=(0.0, None))
    print(f"agreement: {len(same)} of {len(ours)} H- lines the same ({share:.1f}%; at least {opts.min_agreement}% "
          f"needed); largest score difference on those: {score_diff:.2e} (sentence {worst})")
    for i in differ[:opts.show]:
        print(f"  {i}: ours {ours[i][0]:.5f} {ours[i][1]!r}\n  {' ' * len(str(i))}  ct2  {ct2[i][0]:.5f} {ct2[i][1]!r}")
    return 0 if share >= opts.min_agreement else 1


def main(argv):
    parser = argparse.ArgumentParser(prog="ct2_translate.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("translate", help="search a data-bin split with CTranslate2")
    t.add_argument("model_dir")
    t.add_argument("data_bin")
    t.add_argument("--subset", default="test")
    t.add_argument("--beam", type=int, default=5)
    t.add_argument("--batch-size", type=int, default=128, help="sentences per batch (max_batch_size, examples)")
    t.add_argument("--compute-type", default="float32", help="float32, int8, int8_float32, ...")
    t.add_argument("--intra-threads", type=int, default=2)
    t.add_argument("--inter-threads", type=int, default=1)
    t.add_argument("--remove-bpe", default=None, help="sentencepiece, as fairseq-generate's")
    t.add_argument("--min-len", type=int, default=1, help="fairseq's --min-len")
    t.add_argument("--max-len", type=int, default=200, help="fairseq's --max-len-b (with --max-len-a 0)")
    t.add_argument("--output", help="write H- lines here")
    c = sub.add_parser("compare", help="agreement of two files' H- lines")
    c.add_argument("ours")
    c.add_argument("ct2")
    c.add_argument("--min-agreement", type=float, default=97.0, help="percent")
    c.add_argument("--show", type=int, default=10, help="print this many differing sentences")
    opts = parser.parse_args(argv)
    return translate(opts) if opts.command == "translate" else compare(opts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
