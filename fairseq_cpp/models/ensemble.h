#pragma once
// fairseq's EnsembleModel (fairseq-generate --path a.pt:b.pt): several models of one vocabulary,
// each with its own encoder output and incremental cache, whose next-token distributions are
// averaged in probability space at every step: log(mean_i p_i) = logsumexp_i(log p_i) - log N.
// decode() and decode_step() return that average in place of logits; it already sums to one, so
// the log-softmax that generation applies leaves it as it is.
//
//   auto ensemble = std::make_shared<EnsembleModel>(std::vector<std::shared_ptr<EncoderDecoderModel>>{a, b});
//   generator.generate(*ensemble, src_tokens, src_lengths);

#include <memory>
#include <vector>

#include "fairseq_cpp/models/encoder_decoder.h"

namespace fairseq_cpp::models {

class EnsembleModel : public EncoderDecoderModel {
 public:
  explicit EnsembleModel(std::vector<std::shared_ptr<EncoderDecoderModel>> models);

  EncoderOut encode(const at::Tensor& src_tokens, const at::Tensor& src_lengths) override;
  at::Tensor decode(const at::Tensor& prev_output_tokens, const EncoderOut& encoder_out) override;
  at::Tensor decode_step(const at::Tensor& prev_output_tokens, const EncoderOut& encoder_out,
                         IncrementalState& state) override;
  int64_t max_source_positions() const override;  // the smallest of the models'
  int64_t max_target_positions() const override;
  size_t size() const { return models_.size(); }

 private:
  // log(mean of exp(log_probs)) over the models: (.., V) each -> (.., V).
  static at::Tensor average(const std::vector<at::Tensor>& log_probs);

  std::vector<std::shared_ptr<EncoderDecoderModel>> models_;
};

}  // namespace fairseq_cpp::models
