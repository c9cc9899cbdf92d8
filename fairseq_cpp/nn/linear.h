#pragma once
// A linear layer's parameters under fairseq's names, `weight` (out, in) and `bias` (out), drawn as
// torch.nn.Linear draws them (and torch::nn::Linear: the same draws in the same order, so a seed
// gives the same model); layers multiply by them with nn::scoped_linear. Unlike torch::nn::Linear
// it draws nothing while a ParametersFromCheckpoint lives, where a checkpoint overwrites them all.
//
//   Linear fc1(512, 2048);   // weight and bias U(-1/sqrt(512), 1/sqrt(512))
//   at::Tensor y = scoped_linear(x, fc1->weight, fc1->bias);   // (..., 512) -> (..., 2048)
//
//   std::shared_ptr<M> model;
//   { ParametersFromCheckpoint loading;           // no random numbers: the values are garbage
//     model = std::make_shared<M>(options); }       // until load_model_state overwrites them all

#include <cstdint>
#include <ostream>

#include <ATen/Tensor.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

namespace fairseq_cpp::nn {

// While one lives, modules built on this thread leave their parameters' memory as allocated:
// every random draw (Linear's, the embeddings', the attention's xavier) is skipped; the constants
// of LayerNorm (ones and zeros) are still set.
// Only for a model whose every parameter a checkpoint then overwrites: load_model_state refuses a
// file that lacks one, so no uninitialised value is ever read. Buffers and tables computed from
// the options (the sinusoidal positions) are built as always. Nests; restores on destruction.
class ParametersFromCheckpoint {
 public:
  ParametersFromCheckpoint();
  ~ParametersFromCheckpoint();
  ParametersFromCheckpoint(const ParametersFromCheckpoint&) = delete;
  ParametersFromCheckpoint& operator=(const ParametersFromCheckpoint&) = delete;

 private:
  bool previous_;
};

// False while a ParametersFromCheckpoint lives on this thread: skip drawing initial values.
bool initialise_parameters();

class LinearImpl : public torch::nn::Cloneable<LinearImpl> {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool with_bias = true);
  // Registers `weight` and `bias` anew and draws them (unless ParametersFromCheckpoint).
  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  int64_t in_features;
  int64_t out_features;
  bool with_bias;
  at::Tensor weight;  // (out, in)
  at::Tensor bias;    // (out), undefined without bias
};
TORCH_MODULE(Linear);

}  // namespace fairseq_cpp::nn
