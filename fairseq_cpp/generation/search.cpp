#include "fairseq_cpp/generation/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/Parallel.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/runtime.h"

#ifdef FSQ_AVX512_KERNELS
#include <immintrin.h>
#endif

namespace fairseq_cpp::generation {
namespace {

// a ranks above b: greater, or NaN over a number (torch's topk puts NaN first).
inline bool ranks_above(float a, float b) { return a > b || (std::isnan(a) && !std::isnan(b)); }

// The k best (score, flat index) of one sentence, best first; of equal scores the lower index
// (the one seen first) ranks first.
class TopK {
 public:
  explicit TopK(int64_t k) : k_(static_cast<size_t>(k)) { best_.reserve(k_ + 1); }
  bool full() const { return best_.size() == k_; }
  // Scores that do not rank above this cannot enter a full list.
  float threshold() const { return full() ? best_.back().score : -std::numeric_limits<float>::infinity(); }
  void offer(float score, int64_t index) {
    if (full() && !ranks_above(score, best_.back().score)) return;
    auto at = std::find_if(best_.begin(), best_.end(), [&](const Entry& e) { return ranks_above(score, e.score); });
    best_.insert(at, {score, index});
    if (best_.size() > k_) best_.pop_back();
  }
  void write(float* scores, int64_t* indices) const {
    for (size_t i = 0; i < best_.size(); ++i) {
      scores[i] = best_[i].score;
      indices[i] = best_[i].index;
    }
  }

 private:
  struct Entry {
    float score;
    int64_t index;
  };
  size_t k_;
  std::vector<Entry> best_;
};

#ifdef FSQ_AVX512_KERNELS
// Offers row[j] + shift (the float sum torch's add computes) for j in [from, to) 16 at a time, and
// returns where it stopped: most values are below the k-th best and are passed over by one compare
// (unordered: a NaN sum or threshold lets the lanes through to offer()).
__attribute__((target("avx512f"))) int64_t scan_avx512(const float* row, float shift, int64_t from, int64_t to,
                                                       int64_t base, TopK& top) {
  const __m512 add = _mm512_set1_ps(shift);
  int64_t j = from;
  for (; j + 16 <= to; j += 16) {
    const __m512 sums = _mm512_add_ps(_mm512_loadu_ps(row + j), add);
    __mmask16 above = _mm512_cmp_ps_mask(sums, _mm512_set1_ps(top.threshold()), _CMP_NLE_UQ);
    while (above != 0) {
      const int lane = __builtin_ctz(above);
      above = static_cast<__mmask16>(above & (above - 1));
      top.offer(row[j + lane] + shift, base + j + lane);
    }
  }
  return j;
}

// The same 8 at a time, for CPUs with AVX2 (no AVX-512F).
__attribute__((target("avx2"))) int64_t scan_avx2(const float* row, float shift, int64_t from, int64_t to, int64_t base,
                                                  TopK& top) {
  const __m256 add = _mm256_set1_ps(shift);
  int64_t j = from;
  for (; j + 8 <= to; j += 8) {
    const __m256 sums = _mm256_add_ps(_mm256_loadu_ps(row + j), add);
    auto above =
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(sums, _mm256_set1_ps(top.threshold()), _CMP_NLE_UQ)));
    while (above != 0) {
      const int lane = __builtin_ctz(above);
      above &= above - 1;
      top.offer(row[j + lane] + shift, base + j + lane);
    }
  }
  return j;
}
#endif

// Per sentence b, the k best lprobs[b, r, w] + cumulative[b, r] over rows r < rows and words w
// (cumulative null: + 0), as scores and flat indices r * vocab + w. lprobs is
// (B, K, V) contiguous float32; only its first `rows` rows per sentence are read.
void top_candidates(const float* lprobs, const float* cumulative, int64_t bsz, int64_t beam, int64_t rows,
                    int64_t vocab, int64_t k, float* scores, int64_t* indices) {
  at::parallel_for(0, bsz, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      TopK top(k);
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = lprobs + (b * beam + r) * vocab;
        const int64_t base = r * vocab;
        const float shift = cumulative != nullptr ? cumulative[b * beam + r] : 0.0f;
        // row[j] + shift is the float sum torch's add computes. The vector scan needs a full list
        // (its threshold); the scalar loop takes the rest.
        int64_t j = 0;
        for (; j < vocab && !top.full(); ++j) top.offer(row[j] + shift, base + j);
#ifdef FSQ_AVX512_KERNELS
        if (core::cpu_has_avx512f()) {
          j = scan_avx512(row, shift, j, vocab, base, top);
        } else if (core::cpu_has_avx2_fma()) {
          j = scan_avx2(row, shift, j, vocab, base, top);
        }
#endif
        for (; j < vocab; ++j) top.offer(row[j] + shift, base + j);
      }
      top.write(scores + b * k, indices + b * k);
    }
  });
}

}  // namespace

Candidates beam_search_step(int64_t step, const at::Tensor& lprobs, const at::Tensor& cumulative) {
  const int64_t bsz = lprobs.size(0), beam = lprobs.size(1), vocab = lprobs.size(2);
  const int64_t rows = step == 0 ? 1 : beam;
  if (lprobs.device().is_cpu() && lprobs.scalar_type() == at::kFloat && lprobs.is_contiguous() &&
      (step == 0 || cumulative.scalar_type() == at::kFloat)) {
    // One pass over the log-probabilities instead of their sum with the scores and a topk.
    const int64_t k = std::min(2 * beam, rows * vocab - 1);
    at::Tensor scores = at::empty({bsz, k}, lprobs.options());
    at::Tensor indices = at::empty({bsz, k}, lprobs.options().dtype(at::kLong));
    const at::Tensor cum = step == 0 ? at::Tensor() : cumulative.contiguous();
    top_candidates(lprobs.data_ptr<float>(), step == 0 ? nullptr : cum.data_ptr<float>(), bsz, beam, rows,
                   vocab, k, scores.data_ptr<float>(), indices.data_ptr<int64_t>());
    return {scores, indices.remainder(vocab), indices.div(vocab, "floor")};
  }
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

Candidates diverse_beam_search_step(int64_t step, const at::Tensor& lprobs, const at::Tensor& cumulative,
                                    int64_t groups, double strength) {
  const int64_t bsz = lprobs.size(0), beam = lprobs.size(1);
  // (B, V): how many candidates of the groups so far chose each word.
  at::Tensor chosen = torch::zeros({bsz, lprobs.size(2)}, lprobs.options());
  std::vector<at::Tensor> scores, tokens, beams;
  for (int64_t g = 0; g < groups; ++g) {
    at::Tensor group_lprobs = lprobs.slice(1, g, beam, groups);  // (B, K, V) -> (B, K / G, V)
    // lprobs - strength * chosen, as fairseq's torch.add(..., alpha=-strength).
    group_lprobs = g == 0 ? group_lprobs.contiguous() : at::add(group_lprobs, chosen.unsqueeze(1), -strength);
    at::Tensor group_cumulative = step == 0 ? at::Tensor() : cumulative.slice(1, g, beam, groups);
    Candidates c = beam_search_step(step, group_lprobs, group_cumulative);
    chosen.scatter_add_(1, c.tokens, torch::ones(c.tokens.sizes(), chosen.options()));
    scores.push_back(c.scores);
    tokens.push_back(c.tokens);
    beams.push_back(c.beams * groups + g);  // the group's hypothesis i is hypothesis i * G + g
  }
  // G x (B, C / G) -> (B, C / G, G) -> (B, C): candidate i of group g at column i * G + g.
  auto interleave = [bsz](const std::vector<at::Tensor>& parts) { return torch::stack(parts, 2).view({bsz, -1}); };
  return {interleave(scores), interleave(tokens), interleave(beams)};
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
  // The draw runs on the generator's device (multinomial refuses a generator of another one): the
  // SequenceGenerator's seeded generator is a CPU one, and draws the same words for CUDA tensors.
  const at::Tensor draw_from = generator.has_value() ? probs.to(generator->device()) : probs;
  at::Tensor picks;
  if (step == 0) {
    picks = at::multinomial(draw_from.view({bsz, -1}), beam, true, generator).view({bsz, beam});
    probs = probs.expand({bsz, beam, probs.size(2)});
  } else {
    picks = at::multinomial(draw_from.view({bsz * beam, -1}), 1, true, generator).view({bsz, beam});
  }
  picks = picks.to(probs.device());
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
