#include "fairseq_cpp/generation/search.h"

#include <torch/torch.h>

namespace fairseq_cpp::generation {

Candidates beam_search_step(int64_t step, const at::Tensor& lprobs, const at::Tensor& cumulative) {
  const int64_t bsz = lprobs.size(0), beam = lprobs.size(1), vocab = lprobs.size(2);
  at::Tensor flat;
  if (step == 0) {
    flat = lprobs.narrow(1, 0, 1).reshape({bsz, vocab});  // (B, 1, V) -> (B, V)
  } else {
    flat = (lprobs + cumulative.unsqueeze(-1)).view({bsz, beam * vocab});  // (B, K, V) -> (B, K*V)
  }
  const int64_t k = std::min(2 * beam, flat.size(1) - 1);  // -1: never all of them (pad stays out)
  auto [scores, indices] = flat.topk(k, 1);
  return {scores, indices.remainder(vocab), indices.div(vocab, "floor")};
}

Candidates sampling_step(int64_t step, const at::Tensor& lprobs, const at::Tensor& cumulative,
                         const SamplingOptions& options, const at::Generator& generator_in) {
  c10::optional<at::Generator> generator;
  if (generator_in.defined()) generator = generator_in;
  const int64_t bsz = lprobs.size(0), beam = lprobs.size(1);
  at::Tensor lp = step == 0 ? lprobs.narrow(1, 0, 1) : lprobs;  // (B, K', V)
  at::Tensor nopad = lp.narrow(2, 2, lp.size(2) - 2);           // without <s> and <pad>
  at::Tensor probs;
  at::Tensor top_indices;
  if (options.topp > 0) {
    probs = nopad.exp();
    auto [sorted_probs, sorted_indices] = probs.sort(-1, true);
    at::Tensor mask = sorted_probs.cumsum(2).lt(options.topp);
    // One more word than the `lt` mask so that the mass reaches p.
    at::Tensor last_included = mask.cumsum(2).narrow(2, mask.size(2) - 1, 1).clamp(0, mask.size(2) - 1);
    mask = mask.scatter(2, last_included, true);
    const int64_t width = last_included.max().item<int64_t>() + 1;
    probs = sorted_probs.narrow(2, 0, width).masked_fill(mask.narrow(2, 0, width).logical_not(), 0);
    top_indices = sorted_indices.narrow(2, 0, width);
  } else if (options.topk > 0) {
    auto [top_lprobs, indices] = nopad.topk(options.topk, -1);
    probs = top_lprobs.exp();
    top_indices = indices;
  } else {
    probs = nopad.exp();
  }
  at::Tensor picks;
  if (step == 0) {
    picks = at::multinomial(probs.view({bsz, -1}), beam, true, generator).view({bsz, beam});
    probs = probs.expand({bsz, beam, probs.size(2)});
  } else {
    picks = at::multinomial(probs.view({bsz * beam, -1}), 1, true, generator).view({bsz, beam});
  }
  at::Tensor scores = probs.gather(2, picks.unsqueeze(-1)).log().view({bsz, beam});
  if (top_indices.defined()) {
    picks = top_indices.expand({bsz, beam, top_indices.size(2)}).gather(2, picks.unsqueeze(-1)).squeeze(2);
  }
  at::Tensor tokens = picks + 2;
  at::Tensor beams;
  if (step == 0) {
    beams = torch::zeros({bsz, beam}, tokens.options());
  } else {
    beams = torch::arange(beam, tokens.options()).repeat({bsz, 1});
    scores = scores + cumulative;
  }
  return {scores, tokens, beams};
}

}  // namespace fairseq_cpp::generation
