#!/usr/bin/python3
"""Checks a tools/fairseq-export file against the fairseq checkpoint it came from.

usage: compare_export.py FAIRSEQ.pt EXPORTED.pt

The exported file must load with plain torch.load (no fairseq installed: its args are a stdlib
argparse.Namespace), hold every state-dict entry of the original with identical tensors, the
architecture's args with the original values, and fairseq's optimizer_history / extra_state
fields that checkpoint_utils reads. Prints one line per problem; exit 1 when there is any.
"""
import argparse
import importlib.machinery
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
loader = importlib.machinery.SourceFileLoader(
    "fairseq_import", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "fairseq-import"))
fairseq_import = loader.load_module()

ARG_KEYS = ["arch", "activation_fn", "dropout", "attention_dropout", "activation_dropout", "encoder_embed_dim",
            "encoder_ffn_embed_dim", "encoder_layers", "encoder_attention_heads", "encoder_normalize_before",
            "encoder_learned_pos", "decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_layers",
            "decoder_attention_heads", "decoder_normalize_before", "decoder_learned_pos", "decoder_output_dim",
            "decoder_input_dim", "share_decoder_input_output_embed", "share_all_embeddings", "no_scale_embedding",
            "layernorm_embedding", "no_token_positional_embeddings", "adaptive_input", "adaptive_softmax_cutoff",
            "no_cross_attention", "cross_self_attention", "layer_wise_attention", "source_lang", "target_lang",
            "max_source_positions", "max_target_positions", "left_pad_source", "left_pad_target", "task",
            "criterion", "label_smoothing", "optimizer", "lr_scheduler", "lr", "warmup_updates", "warmup_init_lr",
            "clip_norm", "max_tokens", "seed", "adam_eps", "weight_decay"]


def main():
    original_path, exported_path = sys.argv[1:3]
    original = fairseq_import.read_fairseq(original_path)
    # fairseq's args are an argparse.Namespace, which torch 2.6+ refuses with weights_only=True (its
    # default): fairseq's own loader needs weights_only=False under torch 2.6+ too.
    exported = torch.load(exported_path, map_location="cpu", weights_only=False)
    problems = []
    for key in ("args", "model", "optimizer_history", "extra_state"):
        if key not in exported:
            problems.append(f"no `{key}` entry")
    if problems:
        print("\n".join(problems))
        return 1
    if not isinstance(exported["args"], argparse.Namespace):
        problems.append(f"args is a {type(exported['args']).__name__}, not an argparse.Namespace")
    a, b = original["model"], exported["model"]
    if set(a) != set(b):
        problems.append(f"state-dict keys differ: only in fairseq {sorted(set(a) - set(b))[:5]}, "
                        f"only in export {sorted(set(b) - set(a))[:5]}")
    for name in sorted(set(a) & set(b)):
        if a[name].shape != b[name].shape or a[name].dtype != b[name].dtype:
            problems.append(f"{name}: {tuple(a[name].shape)} {a[name].dtype} vs {tuple(b[name].shape)} {b[name].dtype}")
        elif not name.endswith("._float_tensor") and not torch.equal(a[name], b[name]):
            problems.append(f"{name}: values differ")
    oa, ob = vars(original["args"]), vars(exported["args"])
    for key in ARG_KEYS:
        if key not in ob:
            problems.append(f"args.{key} missing")
        elif oa.get(key) != ob[key] and not (isinstance(oa.get(key), (int, float)) and oa.get(key) == ob[key]):
            problems.append(f"args.{key}: fairseq {oa.get(key)!r}, export {ob[key]!r}")
    if fairseq_import.parse_betas(oa["adam_betas"]) != fairseq_import.parse_betas(ob.get("adam_betas", "")):
        problems.append(f"args.adam_betas: fairseq {oa['adam_betas']!r}, export {ob.get('adam_betas')!r}")
    history = exported["optimizer_history"]
    if not isinstance(history, list) or not history or "criterion_name" not in history[-1]:
        problems.append("optimizer_history is not a list of dicts with criterion_name")
    elif history[-1].get("num_updates") != original["optimizer_history"][-1]["num_updates"]:
        problems.append(f"num_updates {history[-1].get('num_updates')} != "
                        f"{original['optimizer_history'][-1]['num_updates']}")
    iterator = exported["extra_state"].get("train_iterator", {})
    if iterator.get("epoch") != original["extra_state"]["train_iterator"]["epoch"]:
        problems.append(f"extra_state.train_iterator.epoch {iterator.get('epoch')}")
    print("\n".join(problems) if problems else f"OK: {len(b)} state-dict entries, {len(ARG_KEYS)} args equal")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
