#pragma once
// Switches a loaded model's linear layers to int8 weights for inference (`generation.quantize:
// int8`, nn/quantized_linear.h), or packs its float32 weights in place for the packed kernel.
//
//   models::quantize_int8(*model);  // then generate as usual; every linear layer runs int8

#include <cstddef>

#include <torch/nn/module.h>

namespace fairseq_cpp::models {

struct QuantizeOptions {
  bool output_projection = true;  // also the decoder's (vocabulary x width) output projection
  // Free each float32 weight once quantized (nn::quantize_in_place). An embedding that shares its
  // weight with the output projection then looks its rows up in int8, dequantized (nn::int8_rows),
  // as CTranslate2 does. Afterwards the model can only run inference: not be trained, saved or moved.
  bool in_place = false;
};

// Every nn::Linear of `model` (attention q/k/v/out projections, feed-forward fc1/fc2, a
// decoder's project_out_dim) and, with options.output_projection, each Transformer decoder's output
// projection (its own or the shared embedding) run int8 from now on, per output channel; the
// float32 weights stay beside the int8 ones unless options.in_place. Returns how many weights were
// quantized. UserError (exit 2) where int8 cannot run: a weight off the CPU, or a CPU with neither
// AVX-512 VNNI nor AVX2 (the message names what is missing).
size_t quantize_int8(torch::nn::Module& model, const QuantizeOptions& options = {});

// For float32 generation on a CPU that runs the packed kernel (nn/packed_linear.h): the weight of
// every nn::Linear of `model` and each decoder's output projection (its own, or the
// embedding it shares, whose lookups then read the packed rows) are packed in place
// (nn::pack_in_place), so the weights exist once, in the kernel's layout, instead of twice. Returns
// how many weights were packed in place. Afterwards the model can only run inference: not be
// trained, saved or moved. With `packed_as` bf16 (--bf16 generation on a CPU with AVX512_BF16),
// the weights are rounded to bf16 and packed for the bf16 kernel (nn/bf16_gemm.h).
size_t pack_weights_in_place(torch::nn::Module& model, c10::ScalarType packed_as = c10::kFloat);

}  // namespace fairseq_cpp::models
