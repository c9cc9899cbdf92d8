#include "fairseq_cpp/generation/sequence_scorer.h"

#include "fairseq_cpp/core/torch.h"

namespace fairseq_cpp::generation {

Hypotheses score_references(models::EncoderDecoderModel& model, const at::Tensor& src_tokens,
                            const at::Tensor& src_lengths, const at::Tensor& prev_output_tokens,
                            const at::Tensor& target, int64_t pad, bool retain_dropout) {
  torch::NoGradGuard no_grad;
  model.train(retain_dropout);
  at::Tensor lprobs = models::EncoderDecoderModel::log_probs(model.forward(src_tokens, src_lengths, prev_output_tokens));
  at::Tensor tokens = target.to(at::kCPU).contiguous();
  at::Tensor scores =
      lprobs.gather(2, target.clamp_min(0).unsqueeze(2)).squeeze(2).to(at::kCPU, at::kFloat).contiguous();
  const int64_t rows = tokens.size(0), width = tokens.size(1);
  const int64_t* t = tokens.data_ptr<int64_t>();
  const float* s = scores.data_ptr<float>();
  Hypotheses out(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    Hypothesis h;
    double sum = 0;
    for (int64_t j = 0; j < width; ++j) {
      if (t[i * width + j] == pad) continue;
      h.tokens.push_back(t[i * width + j]);
      h.positional_scores.push_back(s[i * width + j]);
      sum += s[i * width + j];
    }
    h.score = h.tokens.empty() ? 0.0f : static_cast<float>(sum / static_cast<double>(h.tokens.size()));
    out[static_cast<size_t>(i)].push_back(std::move(h));
  }
  return out;
}

}  // namespace fairseq_cpp::generation
