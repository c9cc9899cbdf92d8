#!/usr/bin/python3
"""Plain-PyTorch reference for tools/bench/model_throughput: the same fairseq Transformer
computation (post-norm, 3+3 layers, d 256, ffn 1024, 4 heads, shared 8000-word embeddings,
sinusoidal positions, label-smoothed loss 0.1) forward+backward on the same batch shape.
usage: model_throughput_ref.py BATCH SRC_LEN TGT_LEN ITERS THREADS; prints "tokens_per_s ms_per_iter"."""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

V, D, FFN, H, LAYERS, PAD = 8000, 256, 1024, 4, 3, 1


def sinusoids(n, dim):
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    ang = torch.arange(n, dtype=torch.float).unsqueeze(1) * freq.unsqueeze(0)
    table = torch.cat([torch.sin(ang), torch.cos(ang)], 1)
    table[PAD] = 0
    return table


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.k_proj, self.v_proj, self.q_proj, self.out_proj = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x, kv, mask):
        b, t, _ = x.shape
        split = lambda y: y.view(b, -1, H, D // H).transpose(1, 2)
        q, k, v = split(self.q_proj(x) * (D // H) ** -0.5), split(self.k_proj(kv)), split(self.v_proj(kv))
        w = torch.matmul(q, k.transpose(-2, -1))
        if mask is not None:
            w = w.masked_fill(mask, float("-inf"))
        w = F.dropout(torch.softmax(w.float(), -1), 0.0, self.training)
        return self.out_proj(torch.matmul(w, v).transpose(1, 2).reshape(b, t, D))


class Layer(nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.self_attn, self.self_attn_layer_norm = Attention(), nn.LayerNorm(D)
        if decoder:
            self.encoder_attn, self.encoder_attn_layer_norm = Attention(), nn.LayerNorm(D)
        self.fc1, self.fc2, self.final_layer_norm = nn.Linear(D, FFN), nn.Linear(FFN, D), nn.LayerNorm(D)
        self.decoder = decoder

    def forward(self, x, self_mask, enc=None, enc_mask=None):
        drop = lambda y: F.dropout(y, 0.1, self.training)
        x = self.self_attn_layer_norm(x + drop(self.self_attn(x, x, self_mask)))
        if self.decoder:
            x = self.encoder_attn_layer_norm(x + drop(self.encoder_attn(x, enc, enc_mask)))
        return self.final_layer_norm(x + drop(self.fc2(F.relu(self.fc1(x)))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D, padding_idx=PAD)
        self.enc = nn.ModuleList(Layer(False) for _ in range(LAYERS))
        self.dec = nn.ModuleList(Layer(True) for _ in range(LAYERS))
        self.register_buffer("pos", sinusoids(1026, D))

    def embed_tokens(self, tokens):
        m = tokens.ne(PAD).int()
        positions = (torch.cumsum(m, 1) * m).long() + PAD
        return F.dropout(math.sqrt(D) * self.embed(tokens) + self.pos[positions], 0.1, self.training)

    def forward(self, src, prev):
        src_pad = src.eq(PAD).view(src.size(0), 1, 1, -1)
        x = self.embed_tokens(src)
        for layer in self.enc:
            x = layer(x, src_pad)
        causal = torch.ones(prev.size(1), prev.size(1), dtype=torch.bool).triu(1)
        y = self.embed_tokens(prev)
        for layer in self.dec:
            y = layer(y, causal, x, src_pad)
        return F.linear(y, self.embed.weight)


def main():
    batch, src_len, tgt_len, iters, threads = (int(a) for a in sys.argv[1:6])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Model().train()
    src = torch.randint(4, V, (batch, src_len))
    tgt = torch.randint(4, V, (batch, tgt_len))
    prev = torch.cat([torch.full((batch, 1), 2), tgt[:, :-1]], 1)

    def step():
        lprobs = torch.log_softmax(model(src, prev).float(), -1).view(-1, V)
        target = tgt.reshape(-1, 1)
        nll = -lprobs.gather(-1, target).sum()
        smooth = -lprobs.sum()
        loss = 0.9 * nll + 0.1 / V * smooth
        model.zero_grad()
        loss.backward()

    step()  # warm-up
    start = time.perf_counter()
    for _ in range(iters):
        step()
    elapsed = (time.perf_counter() - start) / iters
    print(f"{batch * tgt_len / elapsed:.1f} {elapsed * 1000:.1f}")


if __name__ == "__main__":
    main()
