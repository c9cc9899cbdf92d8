#pragma once
// Activation checkpointing (fairseq's --checkpoint-activations): a block's forward pass keeps
// only its inputs, and its backward pass runs the forward again to rebuild what it needs. The
// replay draws the same dropout masks (the random generators' state of the forward is restored
// for it) and runs under the forward's autocast state, so gradients equal the plain block's to
// the bit. Memory per block: its inputs instead of every intermediate activation; cost: one more
// forward pass of the block.
//
//   at::Tensor y = nn::checkpoint([layer, mask](const std::vector<at::Tensor>& in) {
//                                   return layer->forward(in[0], mask);
//                                 },
//                                 {x}, layer->parameters());

#include <functional>
#include <vector>

#include <ATen/Tensor.h>

namespace fairseq_cpp::nn {

// A block's forward: its differentiable inputs -> its output. It must depend on nothing else that
// changes between the forward and the backward pass (masks and modules may be captured).
using CheckpointedBlock = std::function<at::Tensor(const std::vector<at::Tensor>& inputs)>;

// block(inputs), differentiable with respect to `inputs` and `params` (every parameter the block
// reads), keeping only `inputs` for backward. Inputs live on one device.
at::Tensor checkpoint(CheckpointedBlock block, const std::vector<at::Tensor>& inputs,
                      const std::vector<at::Tensor>& params);

}  // namespace fairseq_cpp::nn
