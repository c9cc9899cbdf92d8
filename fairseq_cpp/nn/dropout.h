#pragma once
// Dropout for CPU tensors with a one-byte mask drawn in parallel: each 4096-element block has its
// own splitmix64 stream seeded from one draw of LibTorch's default CPU generator, so a run is
// reproducible from torch::manual_seed and independent of the thread count. ATen's CPU dropout
// draws a float mask element by element from one locked Mersenne Twister (about 14% of a training
// step on 2 cores) and saves it as float. float32 and bf16 CPU tensors draw the same mask for the
// same seed; bf16 is scaled in float32 and rounded once (ATen's bf16 dropout drew its mask with
// bernoulli_, 13 ms per million elements, and scaled by 1/(1-p) rounded to bf16). Other devices and
// dtypes use torch::dropout.

#include <ATen/Tensor.h>

namespace fairseq_cpp::nn {

// x with each element zeroed with probability p and the rest scaled by 1 / (1 - p) when
// `training` and p > 0; x itself otherwise. Differentiable.
at::Tensor dropout(const at::Tensor& x, double p, bool training);

// residual + dropout(x, p, training): the same values, gradients and mask to the bit. On the CPU
// while training, for a float32 residual and a float32 or bf16 x of its shape, both contiguous, in
// one pass forward and one backward (before: the dropout's pass, then the add, which widened a
// bf16 x into a float32 copy first; backward, the bf16 gradient's rounding, then the dropout's).
at::Tensor residual_dropout(const at::Tensor& residual, const at::Tensor& x, double p, bool training);

// The mask such a dropout uses: uint8, 1 with probability 1 - p, drawn the same way.
at::Tensor dropout_keep_mask(at::IntArrayRef sizes, double p);

}  // namespace fairseq_cpp::nn
