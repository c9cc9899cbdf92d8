#!/usr/bin/python3
"""Reference for tests/nn/mha_reference_test.cpp: PyTorch's F.multi_head_attention_forward (what
fairseq v0.9's MultiheadAttention calls outside incremental decoding) on the inputs and weights
the C++ test saved. usage: mha_reference.py CASES.pt; prints one max-abs-difference line per case."""
import sys

import torch
import torch.nn.functional as F

cases = torch.load(sys.argv[1])
for name in sorted(k for k in cases if k.endswith(".out")):
    case = name[: -len(".out")]
    get = lambda key: cases[f"{case}.{key}"]
    query, key = get("query"), get("key")  # (B, T, C), batch first
    heads = int(get("heads").item())
    pad = get("key_padding_mask")
    attn_mask = get("attn_mask")
    float_mask = None
    if attn_mask.numel() > 0:  # fairseq adds a float mask with -inf above the diagonal
        float_mask = torch.zeros(attn_mask.shape).masked_fill(attn_mask, float("-inf"))
    out, _ = F.multi_head_attention_forward(
        query.transpose(0, 1), key.transpose(0, 1), key.transpose(0, 1), query.size(2), heads,
        torch.empty([0]), torch.cat((get("q_proj.bias"), get("k_proj.bias"), get("v_proj.bias"))), None, None,
        False, 0.0, get("out_proj.weight"), get("out_proj.bias"), training=False,
        key_padding_mask=pad if pad.numel() > 0 else None, need_weights=False, attn_mask=float_mask,
        use_separate_proj_weight=True, q_proj_weight=get("q_proj.weight"), k_proj_weight=get("k_proj.weight"),
        v_proj_weight=get("v_proj.weight"))
    diff = (out.transpose(0, 1) - cases[name]).abs().max().item()
    print(f"{case} {diff:.3e}")
