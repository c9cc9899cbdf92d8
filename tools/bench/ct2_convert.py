#!/usr/bin/env python3
"""Writes a fairseq-cpp checkpoint as a CTranslate2 model (benchmark only: tools/bench/generate.sh
and tools/bench/ct2_check.sh compare CTranslate2's CPU search with ours on the same weights).

usage: ct2_convert.py CHECKPOINT DATA_BIN OUT_DIR [--quantization int8] [--force]

Built through CTranslate2's Python specs API (ctranslate2.specs.TransformerSpec) from the
checkpoint's state dict and stored config, with fairseq's semantics:
- positions: fairseq's sinusoidal table (sin half, then cos half) or the learned table, from row
  padding_idx + 1 on (fairseq numbers the first token padding_idx + 1; CTranslate2 numbers it 0);
- layer norms after each residual (post-norm) or before each block with a final norm (pre-norm),
  as the config's encoder/decoder_normalize_before say; epsilon 1e-5 (torch's LayerNorm default);
- token embeddings scaled by sqrt(d_model) unless no_scale_embedding; the output projection is the
  decoder's embedding when they are shared;
- the vocabularies are the data-bin's dict.SRC.txt / dict.TGT.txt after fairseq's four specials
  (<s>, <pad>, </s>, <unk>); the source gets </s> appended and the decoder starts from </s>, as
  fairseq's data-bin and SequenceGenerator do.
Needs torch, PyYAML and ctranslate2 (the project's .venv). Exit status 2 for a model it cannot
represent, with a one-line message.
"""
import argparse
import importlib.machinery
import importlib.util
import math
import os
import pickle
import shutil
import sys

import numpy as np
import yaml

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TOOLS)
import checkpoint_zip  # noqa: E402  (tools/checkpoint_zip.py)

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # fairseq's Dictionary: bos 0, pad 1, eos 2, unk 3
PAD = 1
LAYER_NORM_EPS = 1e-5


class Unsupported(Exception):
    pass


def _fairseq_export():
    """tools/fairseq-export as a module: its model_args resolves presets and fairseq's defaults the
    way fairseq-cpp does, so the two tools cannot drift apart."""
    path = os.path.join(TOOLS, "fairseq-export")
    loader = importlib.machinery.SourceFileLoader("fairseq_export", path)
    spec = importlib.util.spec_from_loader("fairseq_export", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def read_dictionary(path):
    """fairseq's Dictionary.load: the specials, then one `WORD COUNT [#fairseq:overwrite]` a line."""
    tokens = list(SPECIALS)
    seen = set(tokens)
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            word, _, field = line.rpartition(" ")
            overwrite = field == "#fairseq:overwrite"
            if overwrite:
                word, _, field = word.rpartition(" ")
            if not word or not field.lstrip("-").isdigit():
                raise Unsupported(f"{path}:{n}: expected `WORD COUNT`, got {line!r}")
            if word in seen and not overwrite:
                # CTranslate2 maps token strings to ids: a repeated word would be ambiguous.
                raise Unsupported(f"{path}:{n}: {word!r} is in the dictionary twice")
            seen.add(word)
            tokens.append(word)
    return tokens


def sinusoidal_positions(num_positions, dim):
    """fairseq's SinusoidalPositionalEmbedding.get_embedding(num_positions + PAD + 1, dim, PAD),
    rows PAD + 1 on: row i is the i-th token's position, (num_positions, dim) float32. Computed with
    torch in float32 as fairseq and fairseq-cpp do, so the table is theirs to the bit."""
    import torch
    half = dim // 2
    freqs = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    angles = torch.arange(num_positions + PAD + 1, dtype=torch.float).unsqueeze(1) * freqs.unsqueeze(0)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if dim % 2 == 1:
        table = torch.cat([table, torch.zeros(table.size(0), 1)], dim=1)
    return table[PAD + 1:].numpy()


def _activation(name):
    from ctranslate2.specs import common_spec
    table = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
             "gelu_accurate": common_spec.Activation.GELUTanh, "gelu_fast": common_spec.Activation.GELUTanh}
    if name not in table:
        raise Unsupported(f"activation_fn {name!r} (CTranslate2 has relu, gelu, gelu_accurate)")
    return table[name]


class _Weights:
    """The state dict as float32 numpy arrays; remembers which entries were used."""

    def __init__(self, state):
        self.state = state
        self.used = set()

    def has(self, name):
        return name in self.state

    def __call__(self, name):
        if name not in self.state:
            raise Unsupported(f"the checkpoint has no {name}")
        self.used.add(name)
        return self.state[name].detach().float().numpy()

    def cat(self, *names):
        return np.concatenate([self(n) for n in names], axis=0)


def _set_linear(spec, w, prefix):
    spec.weight = w(prefix + ".weight")
    if w.has(prefix + ".bias"):
        spec.bias = w(prefix + ".bias")


def _set_layer_norm(spec, w, prefix):
    spec.gamma = w(prefix + ".weight")
    spec.beta = w(prefix + ".bias")


def _set_attention(spec, w, prefix, self_attention):
    """fairseq's q/k/v/out projections -> CTranslate2's fused ones: self-attention has
    [qkv, out], encoder attention [q, kv, out]."""
    proj = lambda p, part: w.cat(*(f"{prefix}.{x}_proj.{part}" for x in p))
    if self_attention:
        spec.linear[0].weight, spec.linear[0].bias = proj("qkv", "weight"), proj("qkv", "bias")
    else:
        spec.linear[0].weight, spec.linear[0].bias = proj("q", "weight"), proj("q", "bias")
        spec.linear[1].weight, spec.linear[1].bias = proj("kv", "weight"), proj("kv", "bias")
    _set_linear(spec.linear[-1], w, f"{prefix}.out_proj")


def _positions(w, side, args, num_positions, dim):
    if args["no_token_positional_embeddings"]:
        return np.zeros((num_positions, dim), np.float32)
    if args[f"{side}_learned_pos"]:
        return w(f"{side}.embed_positions.weight")[PAD + 1:]
    return sinusoidal_positions(num_positions, dim)


def build_spec(state, args, max_positions, src_tokens, tgt_tokens):
    """A validated ctranslate2.specs.TransformerSpec of the model (args: fairseq's model args as
    tools/fairseq-export resolves them)."""
    from ctranslate2.specs import transformer_spec

    if args["decoder_input_dim"] != args["decoder_embed_dim"] or args["decoder_output_dim"] != args["decoder_embed_dim"]:
        raise Unsupported("decoder_input_dim/decoder_output_dim other than decoder_embed_dim (project_in/out_dim)")
    if args["encoder_embed_dim"] % args["encoder_attention_heads"] or args["decoder_embed_dim"] % args["decoder_attention_heads"]:
        raise Unsupported("embedding dimension not a multiple of the attention heads")
    activation = _activation(args["activation_fn"])
    w = _Weights(state)
    decoder_final_norm = w.has("decoder.layer_norm.weight")
    encoder = transformer_spec.TransformerEncoderSpec(
        args["encoder_layers"], args["encoder_attention_heads"], pre_norm=args["encoder_normalize_before"],
        activation=activation, layernorm_embedding=args["layernorm_embedding"])
    decoder = transformer_spec.TransformerDecoderSpec(
        args["decoder_layers"], args["decoder_attention_heads"], pre_norm=args["decoder_normalize_before"],
        activation=activation, layernorm_embedding=args["layernorm_embedding"],
        no_final_norm=args["decoder_normalize_before"] and not decoder_final_norm)

    for side, spec in (("encoder", encoder), ("decoder", decoder)):
        dim = args[f"{side}_embed_dim"]
        embeddings = spec.embeddings[0] if side == "encoder" else spec.embeddings
        embeddings.weight = w(f"{side}.embed_tokens.weight")
        spec.scale_embeddings = not args["no_scale_embedding"]  # True: x sqrt(d_model)
        spec.position_encodings.encodings = _positions(w, side, args, max_positions[side], dim)
        if args["layernorm_embedding"]:
            _set_layer_norm(spec.layernorm_embedding, w, f"{side}.layernorm_embedding")
        if hasattr(spec, "layer_norm"):  # pre-norm: the stack's final norm
            _set_layer_norm(spec.layer_norm, w, f"{side}.layer_norm")
        for i, layer in enumerate(spec.layer):
            p = f"{side}.layers.{i}"
            _set_attention(layer.self_attention, w, f"{p}.self_attn", self_attention=True)
            _set_layer_norm(layer.self_attention.layer_norm, w, f"{p}.self_attn_layer_norm")
            if side == "decoder":
                _set_attention(layer.attention, w, f"{p}.encoder_attn", self_attention=False)
                _set_layer_norm(layer.attention.layer_norm, w, f"{p}.encoder_attn_layer_norm")
            _set_linear(layer.ffn.linear_0, w, f"{p}.fc1")
            _set_linear(layer.ffn.linear_1, w, f"{p}.fc2")
            _set_layer_norm(layer.ffn.layer_norm, w, f"{p}.final_layer_norm")

    if args["share_decoder_input_output_embed"]:
        decoder.projection.weight = w("decoder.embed_tokens.weight")
    else:
        name = next((n for n in ("decoder.output_projection.weight", "decoder.embed_out") if w.has(n)), None)
        if name is None:
            raise Unsupported("the checkpoint has no output projection (decoder.embed_out)")
        decoder.projection.weight = w(name)

    left = [n for n in state if n not in w.used and not n.endswith((".version", "._float_tensor"))]
    if left:
        raise Unsupported(f"{len(left)} checkpoint entries this converter does not map, e.g. {left[0]}")

    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = "<s>", "</s>", "<unk>"
    spec.config.decoder_start_token = "</s>"  # fairseq's decoder input starts with eos
    spec.config.add_source_eos = True  # fairseq's source ends with </s>
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    spec.validate()
    return spec


def convert(checkpoint, data_bin, out_dir, quantization=None, force=False):
    """Writes OUT_DIR (model.bin, config.json, the vocabularies); returns a one-line summary."""
    import restricted_load  # tools/restricted_load.py: torch.load without code execution (imports torch)

    ckpt = restricted_load.load(checkpoint)
    if not isinstance(ckpt, dict) or "model" not in ckpt or "cfg" not in ckpt:
        raise Unsupported(f"{checkpoint} is not a fairseq-cpp checkpoint (no `model` and `cfg`); "
                          "tools/fairseq-import turns a fairseq one into ours")
    cfg = yaml.safe_load(ckpt["cfg"]) or {}
    model, task = cfg.get("model") or {}, cfg.get("task") or {}
    args = _fairseq_export().model_args(model, model.get("arch", "transformer"))
    src, tgt = task.get("source_lang"), task.get("target_lang")
    if not src or not tgt:
        raise Unsupported(f"{checkpoint}: the stored config has no task.source_lang / task.target_lang")
    src_tokens = read_dictionary(os.path.join(data_bin, f"dict.{src}.txt"))
    tgt_tokens = read_dictionary(os.path.join(data_bin, f"dict.{tgt}.txt"))
    max_positions = {"encoder": int(task.get("max_source_positions") or 1024),
                     "decoder": int(task.get("max_target_positions") or 1024)}
    spec = build_spec(ckpt["model"], args, max_positions, src_tokens, tgt_tokens)
    spec.optimize(quantization=quantization)
    if os.path.exists(out_dir):
        if not force:
            raise Unsupported(f"{out_dir} exists (--force replaces it)")
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    spec.save(out_dir)
    norm = lambda side: "pre-norm" if args[f"{side}_normalize_before"] else "post-norm"
    return (f"{checkpoint} -> {out_dir}: {args['encoder_layers']}+{args['decoder_layers']} layers, "
            f"d {args['encoder_embed_dim']}, encoder {norm('encoder')}, decoder {norm('decoder')}, "
            f"vocab {len(src_tokens)}/{len(tgt_tokens)}, {quantization or 'float32'}")


def main(argv):
    parser = argparse.ArgumentParser(prog="ct2_convert.py", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="fairseq-cpp checkpoint (tools/fairseq-import makes one from fairseq's)")
    parser.add_argument("data_bin", help="data-bin with dict.SRC.txt and dict.TGT.txt")
    parser.add_argument("out_dir", help="CTranslate2 model directory to write")
    parser.add_argument("--quantization", default=None,
                        help="weights as stored: int8, int8_float32, ... (default: float32; "
                             "the translator's compute_type can also quantize at load time)")
    parser.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")
    opts = parser.parse_args(argv)
    try:
        print(convert(opts.checkpoint, opts.data_bin, opts.out_dir, opts.quantization, opts.force), file=sys.stderr)
    except (Unsupported, checkpoint_zip.Damaged, pickle.UnpicklingError, OSError) as e:
        print(f"ct2_convert.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
