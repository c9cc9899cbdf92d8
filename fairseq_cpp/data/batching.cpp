#include "fairseq_cpp/data/batching.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"

namespace fairseq_cpp::data {

uint64_t NumpyRandom::interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t value;
  if (max <= 0xffffffffULL) {
    while ((value = (static_cast<uint64_t>(engine_()) & mask)) > max) {
    }
  } else {
    auto next64 = [&] {
      uint64_t hi = engine_();
      uint64_t lo = engine_();
      return (hi << 32) | lo;
    };
    while ((value = (next64() & mask)) > max) {
    }
  }
  return value;
}

std::vector<int64_t> NumpyRandom::permutation(int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), 0);
  shuffle(out);
  return out;
}

std::vector<int64_t> ordered_indices(const std::vector<int64_t>& src_sizes, const std::vector<int64_t>& tgt_sizes,
                                     bool shuffle, uint32_t seed) {
  std::vector<int64_t> indices;
  if (shuffle) {
    indices = NumpyRandom(seed).permutation(static_cast<int64_t>(src_sizes.size()));
  } else {
    indices.resize(src_sizes.size());
    std::iota(indices.begin(), indices.end(), 0);
  }
  auto by = [](const std::vector<int64_t>& sizes) {
    return [&sizes](int64_t a, int64_t b) { return sizes[static_cast<size_t>(a)] < sizes[static_cast<size_t>(b)]; };
  };
  if (!tgt_sizes.empty()) std::stable_sort(indices.begin(), indices.end(), by(tgt_sizes));
  std::stable_sort(indices.begin(), indices.end(), by(src_sizes));
  return indices;
}

std::vector<int64_t> filter_by_size(const std::vector<int64_t>& indices, const std::vector<int64_t>& src_sizes,
                                    const std::vector<int64_t>& tgt_sizes, const SizeFilterOptions& options) {
  std::vector<int64_t> kept;
  std::vector<int64_t> ignored;
  kept.reserve(indices.size());
  for (int64_t i : indices) {
    auto k = static_cast<size_t>(i);
    bool ok = src_sizes[k] <= options.max_source_positions &&
              (tgt_sizes.empty() || tgt_sizes[k] <= options.max_target_positions);
    (ok ? kept : ignored).push_back(i);
  }
  if (!ignored.empty()) {
    auto k = static_cast<size_t>(ignored[0]);
    if (!options.skip_invalid) {
      raise<DataError>(
          "{}: example {} has size ({}, {}), over max_positions ({}, {}); drop such examples with "
          "dataset.skip_invalid_size_inputs_valid_test=true",
          options.what, ignored[0], src_sizes[k], tgt_sizes.empty() ? 0 : tgt_sizes[k], options.max_source_positions,
          options.max_target_positions);
    }
    std::vector<int64_t> first(ignored.begin(),
                               ignored.begin() + static_cast<long>(std::min<size_t>(10, ignored.size())));
    log::warning("data",
                 "{}: {} examples have invalid sizes and will be skipped, max_positions=({}, {}), first few "
                 "example ids={}",
                 options.what, ignored.size(), options.max_source_positions, options.max_target_positions,
                 fmt::join(first, ", "));
  }
  return kept;
}

std::vector<std::vector<int64_t>> batch_by_size(const std::vector<int64_t>& indices,
                                                const std::vector<int64_t>& num_tokens,
                                                const BatchingOptions& options) {
  const int64_t max_tokens = options.max_tokens > 0 ? options.max_tokens : -1;
  const int64_t max_sentences = options.max_sentences > 0 ? options.max_sentences : -1;
  const auto mult = static_cast<size_t>(std::max<int64_t>(1, options.required_batch_size_multiple));
  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> batch;
  std::vector<int64_t> sample_lens;
  int64_t sample_len = 0;
  for (int64_t idx : indices) {
    int64_t n = num_tokens[static_cast<size_t>(idx)];
    sample_lens.push_back(n);
    sample_len = std::max(sample_len, n);
    if (max_tokens > 0 && sample_len > max_tokens) {
      raise<DataError>("example {} has {} tokens, more than dataset.max_tokens = {}; raise max_tokens or filter it",
                       idx, sample_len, max_tokens);
    }
    int64_t padded = static_cast<int64_t>(batch.size() + 1) * sample_len;
    bool full = !batch.empty() && ((max_sentences > 0 && static_cast<int64_t>(batch.size()) == max_sentences) ||
                                   (max_tokens > 0 && padded > max_tokens));
    if (full) {
      size_t mod_len = std::max(mult * (batch.size() / mult), batch.size() % mult);
      batches.emplace_back(batch.begin(), batch.begin() + static_cast<long>(mod_len));
      batch.erase(batch.begin(), batch.begin() + static_cast<long>(mod_len));
      sample_lens.erase(sample_lens.begin(), sample_lens.begin() + static_cast<long>(mod_len));
      sample_len = sample_lens.empty() ? 0 : *std::max_element(sample_lens.begin(), sample_lens.end());
    }
    batch.push_back(idx);
  }
  if (!batch.empty()) batches.push_back(std::move(batch));
  return batches;
}

}  // namespace fairseq_cpp::data
