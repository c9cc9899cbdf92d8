#!/usr/bin/env python3
"""Plain-PyTorch reference for fsq_bench_train_step: the same fairseq Transformer (post-norm,
shared vocabulary, sinusoidal positions, base or big), the same batch of random sentences, one
update as a PyTorch user would write it at its fastest: bf16 autocast (or float32),
F.scaled_dot_product_attention (flash/memory-efficient kernels on CUDA), the label-smoothed loss
in float32, backward, Adam (fused on CUDA), optionally under torch.compile.
usage: train_step_ref.py ARCH VOCAB MAX_TOKENS LEN PRECISION ITERS WARMUP [compile] [cpu] [after=FILE]
after=FILE: the timed steps wait, after the warmup (torch.compile's minutes), until FILE exists, so
that compiling can go on beside other work and the timing does not share the device.
prints: "tokens_per_s median_ms peak_gib"."""
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 1
ARCHS = {  # d, ffn, heads, layers, dropout (fairseq's transformer / transformer_vaswani_wmt_en_de_big)
    "transformer": (512, 2048, 8, 6, 0.1),
    "transformer_vaswani_wmt_en_de_big": (1024, 4096, 16, 6, 0.3),
}


def sinusoids(n, dim):
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    ang = torch.arange(n, dtype=torch.float).unsqueeze(1) * freq.unsqueeze(0)
    table = torch.cat([torch.sin(ang), torch.cos(ang)], 1)
    table[PAD] = 0
    return table


class Attention(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))
        self.heads, self.dropout = heads, dropout

    def forward(self, x, kv, mask, causal):
        b, t, d = x.shape
        split = lambda y: y.view(b, -1, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(self.q_proj(x)), split(self.k_proj(kv)), split(self.v_proj(kv))
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)
        return self.out_proj(y.transpose(1, 2).reshape(b, t, d))


class Layer(nn.Module):
    def __init__(self, d, ffn, heads, dropout, decoder):
        super().__init__()
        self.self_attn, self.self_attn_layer_norm = Attention(d, heads, 0.0), nn.LayerNorm(d)
        if decoder:
            self.encoder_attn, self.encoder_attn_layer_norm = Attention(d, heads, 0.0), nn.LayerNorm(d)
        self.fc1, self.fc2, self.final_layer_norm = nn.Linear(d, ffn), nn.Linear(ffn, d), nn.LayerNorm(d)
        self.decoder, self.dropout = decoder, dropout

    def forward(self, x, self_mask, enc=None, enc_mask=None):
        drop = lambda y: F.dropout(y, self.dropout, self.training)
        x = self.self_attn_layer_norm(x + drop(self.self_attn(x, x, self_mask, self.decoder)))
        if self.decoder:
            x = self.encoder_attn_layer_norm(x + drop(self.encoder_attn(x, enc, enc_mask, False)))
        return self.final_layer_norm(x + drop(self.fc2(F.relu(self.fc1(x)))))


class Model(nn.Module):
    def __init__(self, arch, vocab):
        super().__init__()
        d, ffn, heads, layers, dropout = ARCHS[arch]
        self.d, self.dropout = d, dropout
        self.embed = nn.Embedding(vocab, d, padding_idx=PAD)
        nn.init.normal_(self.embed.weight, 0, d ** -0.5)
        self.enc = nn.ModuleList(Layer(d, ffn, heads, dropout, False) for _ in range(layers))
        self.dec = nn.ModuleList(Layer(d, ffn, heads, dropout, True) for _ in range(layers))
        self.register_buffer("pos", sinusoids(1026, d))

    def embed_tokens(self, tokens):
        m = tokens.ne(PAD).int()
        positions = (torch.cumsum(m, 1) * m).long() + PAD
        return F.dropout(math.sqrt(self.d) * self.embed(tokens) + self.pos[positions], self.dropout, self.training)

    def forward(self, src, prev):
        x = self.embed_tokens(src)
        for layer in self.enc:  # no padding in these batches: no masks
            x = layer(x, None)
        y = self.embed_tokens(prev)
        for layer in self.dec:
            y = layer(y, None, x, None)
        return y


def main():
    arch, vocab, max_tokens, length, precision, iters, warmup = sys.argv[1:8]
    vocab, max_tokens, length, iters, warmup = int(vocab), int(max_tokens), int(length), int(iters), int(warmup)
    rest = sys.argv[8:]
    device = "cuda" if torch.cuda.is_available() and "cpu" not in rest else "cpu"
    torch.manual_seed(0)
    model = Model(arch, vocab).to(device).train()
    batch = max(1, max_tokens // length)
    src = torch.randint(4, vocab, (batch, length), device=device)
    src[:, -1] = 2
    tgt = torch.randint(4, vocab, (batch, length), device=device)
    tgt[:, -1] = 2
    prev = torch.cat([torch.full((batch, 1), 2, device=device), tgt[:, :-1]], 1)
    opt = torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), fused=device == "cuda")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    eps = 0.1

    def loss_of(src, prev, tgt):
        with torch.autocast(device, dtype=dtype, enabled=precision == "bf16"):
            features = model(src, prev)
            logits = F.linear(features, model.embed.weight)
        lprobs = torch.log_softmax(logits.float(), -1).view(-1, vocab)
        nll = -lprobs.gather(-1, tgt.reshape(-1, 1)).sum()
        smooth = -lprobs.sum()
        return (1 - eps) * nll + eps / vocab * smooth

    compute = torch.compile(loss_of) if "compile" in rest else loss_of

    def step():
        opt.zero_grad(set_to_none=True)
        loss = compute(src, prev, tgt) / (batch * length)
        loss.backward()
        opt.step()

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    after = [a[len("after="):] for a in rest if a.startswith("after=")]
    times = []
    for i in range(warmup + iters):
        while i == warmup and after and not os.path.exists(after[0]):
            time.sleep(0.1)
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1000
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
    print(f"{batch * length / (ms / 1000):.0f} {ms:.1f} {peak:.2f}")


if __name__ == "__main__":
    main()
