#!/usr/bin/python3
"""Reference for tests/nn/quantized_linear_reference_test.cpp: the int8 linear layer computed by
hand with PyTorch on the inputs the C++ test saved. Weights per output channel and inputs per row,
symmetric: q = round(v * (127 / max|v|)) (half to even), scale = max|v| / 127; the int8 products
summed exactly (float64 holds them), then y = sum * (scale_x * scale_w) + bias. Also PyTorch's own
torch.quantize_per_channel with the same scales, as an independent quantizer of the weights.
usage: quantized_linear_reference.py CASES.pt; prints per case: the largest |y - y_ref| relative to
max |y_ref|, how many int8 weights differ from the hand computation and from torch's quantizer, the
largest of those differences, and the largest relative error of y_ref against the float linear."""
import sys

import torch


def quantize(v):
    """Rows of v (float32) -> (int values as float64, float32 scales)."""
    amax = v.abs().amax(1)
    inv = torch.where(amax > 0, torch.full_like(amax, 127.0) / amax, torch.zeros_like(amax))
    q = (v * inv.unsqueeze(1)).round().clamp(-127, 127)
    return q.double(), amax / 127.0


cases = torch.load(sys.argv[1])
for name in sorted(k for k in cases if k.endswith(".y")):
    case = name[: -len(".y")]
    x, w, b, y = (cases[f"{case}.{key}"] for key in ("x", "w", "b", "y"))
    ours_q, ours_scales = cases[f"{case}.values"].double(), cases[f"{case}.scales"]
    qx, sx = quantize(x)
    qw, sw = quantize(w)
    total = qx @ qw.t()  # exact: |sum| < 2^53
    y_ref = total.float() * (sx.unsqueeze(1) * sw.unsqueeze(0)) + b
    diff = ((y - y_ref).abs().max() / y_ref.abs().max()).item()
    hand = int((ours_q != qw).sum())
    torch_q = torch.quantize_per_channel(w, sw.double().clamp_min(1e-30), torch.zeros(w.size(0), dtype=torch.long), 0,
                                         torch.qint8).int_repr().double()
    lib = int((ours_q != torch_q).sum())
    lib_max = (ours_q - torch_q).abs().max().item()
    scale_diff = (ours_scales - sw).abs().max().item()
    exact = x.double() @ w.double().t() + b.double()
    float_err = ((y_ref.double() - exact).norm() / (exact - b.double()).norm()).item()
    print(f"{case} {diff:.3e} {hand} {lib} {lib_max:.0f} {scale_diff:.3e} {float_err:.3e}")
