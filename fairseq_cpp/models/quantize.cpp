#include "fairseq_cpp/models/quantize.h"

#include <vector>

#include <c10/core/ScalarType.h>
#include <torch/nn/modules/linear.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/models/transformer.h"
#include "fairseq_cpp/nn/quantized_linear.h"

namespace fairseq_cpp::models {

size_t quantize_int8(torch::nn::Module& model, const QuantizeOptions& options) {
  if (!nn::int8_linear_supported())
    raise<UserError>("--quantize int8 cannot run here: {}; use --quantize none", nn::int8_linear_unsupported_reason());
  std::vector<at::Tensor> weights;
  for (const auto& module : model.modules(/*include_self=*/true)) {
    if (const auto* linear = dynamic_cast<const torch::nn::LinearImpl*>(module.get())) {
      weights.push_back(linear->weight);
    } else if (const auto* decoder = dynamic_cast<const TransformerDecoderImpl*>(module.get())) {
      if (options.output_projection) weights.push_back(decoder->output_weight());
    }
  }
  for (const at::Tensor& w : weights) {
    if (!w.device().is_cpu())
      raise<UserError>("--quantize int8 runs on the CPU only, but the model is on {}; add --cpu", w.device().str());
    if (w.scalar_type() != at::kFloat)
      raise<UserError>("--quantize int8 quantizes float32 weights, but the model's are {}",
                       c10::toString(w.scalar_type()));
  }
  for (const at::Tensor& w : weights) nn::use_int8_weight(w);
  return weights.size();
}

}  // namespace fairseq_cpp::models
