#include "fairseq_cpp/models/quantize.h"

#include <unordered_set>
#include <vector>

#include <c10/core/ScalarType.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/models/transformer.h"
#include "fairseq_cpp/nn/linear.h"
#include "fairseq_cpp/nn/packed_linear.h"
#include "fairseq_cpp/nn/quantized_linear.h"

namespace fairseq_cpp::models {
namespace {

// The weights that nn::scoped_linear multiplies by: every nn::Linear's and, with
// `output_projection`, each Transformer decoder's output projection; each tensor once.
std::vector<at::Tensor> linear_weights(torch::nn::Module& model, bool output_projection) {
  std::vector<at::Tensor> weights;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& module : model.modules(/*include_self=*/true)) {
    at::Tensor weight;
    if (const auto* linear = dynamic_cast<const nn::LinearImpl*>(module.get())) {
      weight = linear->weight;
    } else if (const auto* decoder = dynamic_cast<const TransformerDecoderImpl*>(module.get())) {
      if (output_projection) weight = decoder->output_weight();
    }
    if (weight.defined() && seen.insert(weight.unsafeGetTensorImpl()).second) weights.push_back(weight);
  }
  return weights;
}

}  // namespace

size_t quantize_int8(torch::nn::Module& model, const QuantizeOptions& options) {
  if (!nn::int8_linear_supported())
    raise<UserError>("--quantize int8 cannot run here: {}; use --quantize none", nn::int8_linear_unsupported_reason());
  const std::vector<at::Tensor> weights = linear_weights(model, options.output_projection);
  for (const at::Tensor& w : weights) {
    if (!w.device().is_cpu())
      raise<UserError>("--quantize int8 runs on the CPU only, but the model is on {}; add --cpu", w.device().str());
    if (w.scalar_type() != at::kFloat)
      raise<UserError>("--quantize int8 quantizes float32 weights, but the model's are {}",
                       c10::toString(w.scalar_type()));
  }
  if (!options.in_place) {
    for (const at::Tensor& w : weights) nn::use_int8_weight(w);
    return weights.size();
  }
  for (const at::Tensor& w : weights) {
    nn::quantize_in_place(w);     // a shared embedding's lookups then read its int8 rows (nn::int8_rows)
    core::release_free_memory();  // as pack_weights_in_place: the freed weight goes back now
  }
  return weights.size();
}

size_t pack_weights_in_place(torch::nn::Module& model, c10::ScalarType packed_as) {
  const std::vector<at::Tensor> weights = linear_weights(model, /*output_projection=*/true);
  for (const at::Tensor& w : weights) {
    nn::pack_in_place(w, packed_as);
    // The freed float32 weight goes back to the system now: kept for reuse, it would fit no later
    // request (a packed weight is a little larger), and the model would be resident twice by the end.
    core::release_free_memory();
  }
  return weights.size();
}

}  // namespace fairseq_cpp::models
