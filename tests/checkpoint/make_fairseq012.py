#!/usr/bin/env python3
"""Writes a fairseq v0.9 checkpoint's model in the layout fairseq 0.12 saves (fairseq/trainer.py
state_dict and checkpoint_utils.save_checkpoint, v0.12.2), for the tests of reading it directly.

usage: make_fairseq012.py V09_CHECKPOINT OUT.pt

0.12 writes `args: None` and `cfg` as a plain dict of sections (OmegaConf.to_container); for
`--arch transformer` (no dataclass) `cfg["model"]` is an argparse Namespace of the flat arguments
with `_name`. Its state dict holds `decoder.output_projection.weight` (tied to the embedding when
shared), and `extra_state` may hold numpy scalars and tensors (meters, val_loss).
"""
import argparse
import collections
import os
import sys

import numpy
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "tools"))
import restricted_load  # noqa: E402  (tools/restricted_load.py)


def main(src_path, out_path):
    src = restricted_load.load(src_path)
    args = src["args"]
    model = collections.OrderedDict(src["model"])
    model["decoder.output_projection.weight"] = model["decoder.embed_tokens.weight"]
    namespace = argparse.Namespace(**vars(args))
    namespace._name = args.arch
    namespace.max_sentences = None  # 0.12 keeps the batch size in dataset.batch_size
    cfg = {
        "_name": None,
        "common": {"seed": args.seed, "fp16": False, "cpu": True, "log_interval": 100},
        "dataset": {"max_tokens": args.max_tokens, "batch_size": None, "required_batch_size_multiple": 8},
        "optimization": {"max_epoch": args.max_epoch, "max_update": 0, "clip_norm": 0.0, "lr": [0.0005],
                         "update_freq": [1], "sentence_avg": False},
        "checkpoint": {"save_dir": "checkpoints"},
        "task": {"_name": "translation", "data": "data-bin", "source_lang": "en", "target_lang": "de",
                 "left_pad_source": True, "left_pad_target": False, "max_source_positions": 1024,
                 "max_target_positions": 1024},
        "criterion": {"_name": "label_smoothed_cross_entropy", "label_smoothing": 0.1},
        "optimizer": {"_name": "adam", "adam_betas": [0.9, 0.98], "adam_eps": 1e-08, "weight_decay": 0.0,
                      "lr": [0.0005]},
        "lr_scheduler": {"_name": "inverse_sqrt", "warmup_updates": 400, "warmup_init_lr": -1.0, "lr": [0.0005]},
        "model": namespace,
    }
    extra = src["extra_state"]
    out = {
        "args": None, "cfg": cfg, "model": model, "criterion": None,
        "optimizer_history": src["optimizer_history"], "task_state": {},
        "extra_state": {"metrics": {"train": [(0, "loss", "AverageMeter", {"val": numpy.float64(4.7)})]},
                        "previous_training_time": 2310.6, "train_iterator": extra["train_iterator"],
                        "val_loss": numpy.float64(extra["val_loss"]), "best": torch.tensor(float(extra["best"]))},
    }
    torch.save(out, out_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
