#include "fairseq_cpp/data/batching.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

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

namespace {

// Sizes below this are ordered by counting sort on keys packed as source << 16 | target.
constexpr int64_t kPackedSizeLimit = int64_t{1} << 16;
constexpr uint32_t kLow16 = 0xFFFF;

void check_target_sizes(const std::vector<int64_t>& src_sizes, const std::vector<int64_t>& tgt_sizes) {
  if (!tgt_sizes.empty() && tgt_sizes.size() != src_sizes.size())
    raise<DataError>("{} target sizes for {} source sizes; expected one target per source (or none)", tgt_sizes.size(),
                     src_sizes.size());
}

// NumpyRandom(seed).permutation(n) on 32-bit ids: the same draws and swaps, with each block's
// random rows fetched ahead (at WMT sizes the shuffle waits on cache misses).
std::vector<uint32_t> permutation32(uint32_t seed, size_t n) {
  std::vector<uint32_t> p(n);
  std::iota(p.begin(), p.end(), 0U);
  NumpyRandom rng(seed);
  constexpr size_t kBlock = 64;
  size_t draws[kBlock];
  for (size_t i = n; i > 1;) {  // positions i-1 down to 1 are left to swap
    const size_t m = std::min(kBlock, i - 1);
    for (size_t k = 0; k < m; ++k) {
      draws[k] = static_cast<size_t>(rng.interval(i - 1 - k));
      __builtin_prefetch(&p[draws[k]], 1);
    }
    for (size_t k = 0; k < m; ++k) std::swap(p[i - 1 - k], p[draws[k]]);
    i -= m;
  }
  return p;
}

// Counts -> exclusive prefix sums: the first slot of each size.
void to_offsets(std::vector<uint32_t>& counts) {
  uint32_t sum = 0;
  for (uint32_t& c : counts) sum += std::exchange(c, sum);
}

// The examples in fairseq's order with their sizes beside them.
struct PackedOrder {
  std::vector<uint32_t> ids;   // example ids in order
  std::vector<uint32_t> keys;  // source size << 16 | target size of ids[k] (target 0 without targets)
};

// ordered_indices as two stable counting sorts (by target, then by source: the order of the two
// stable comparison sorts). False when a size is negative or 65,536 or more, or when there are
// 2^32 examples or more: the comparison sorts handle those.
bool packed_order(const std::vector<int64_t>& src_sizes, const std::vector<int64_t>& tgt_sizes, bool shuffle,
                  uint32_t seed, PackedOrder& out) {
  const size_t n = src_sizes.size();
  if (n >= std::numeric_limits<uint32_t>::max()) return false;
  const bool has_tgt = !tgt_sizes.empty();
  std::vector<uint32_t> keys(n);
  std::vector<uint32_t> src_slot(kPackedSizeLimit, 0), tgt_slot(kPackedSizeLimit, 0);
  for (size_t k = 0; k < n; ++k) {
    const int64_t s = src_sizes[k];
    const int64_t t = has_tgt ? tgt_sizes[k] : 0;
    if (s < 0 || s >= kPackedSizeLimit || t < 0 || t >= kPackedSizeLimit) return false;
    keys[k] = static_cast<uint32_t>(s) << 16 | static_cast<uint32_t>(t);
    ++src_slot[static_cast<size_t>(s)];
    ++tgt_slot[static_cast<size_t>(t)];
  }
  std::vector<uint32_t> order;
  if (shuffle) {
    order = permutation32(seed, n);
  } else {
    order.resize(n);
    std::iota(order.begin(), order.end(), 0U);
  }
  // By target size (stable), reading the keys in the permutation's order.
  std::vector<uint32_t> ids(n), by_tgt(n);
  to_offsets(tgt_slot);
  constexpr size_t kAhead = 16;
  for (size_t k = 0; k < n; ++k) {
    if (k + kAhead < n) __builtin_prefetch(&keys[order[k + kAhead]]);
    const uint32_t id = order[k];
    const uint32_t key = keys[id];
    const uint32_t slot = has_tgt ? tgt_slot[key & kLow16]++ : static_cast<uint32_t>(k);
    ids[slot] = id;
    by_tgt[slot] = key;
  }
  order = {};
  keys = {};
  // Then by source size (stable).
  to_offsets(src_slot);
  out.ids.resize(n);
  out.keys.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const uint32_t key = by_tgt[k];
    const uint32_t slot = src_slot[key >> 16]++;
    out.ids[slot] = ids[k];
    out.keys[slot] = key;
  }
  return true;
}

// filter_by_size's report of the examples it drops (`count`, the first ten ids, the first one's
// sizes): a counted warning, or DataError naming the first when !skip_invalid.
void report_invalid(size_t count, const std::vector<int64_t>& first_ids, int64_t first_src, int64_t first_tgt,
                    const SizeFilterOptions& options) {
  if (!options.skip_invalid) {
    raise<DataError>(
        "{}: example {} has size ({}, {}), over max_positions ({}, {}); drop such examples with "
        "dataset.skip_invalid_size_inputs_valid_test=true",
        options.what, first_ids[0], first_src, first_tgt, options.max_source_positions, options.max_target_positions);
  }
  log::warning("data",
               "{}: {} examples have invalid sizes and will be skipped, max_positions=({}, {}), first few "
               "example ids={}",
               options.what, count, options.max_source_positions, options.max_target_positions,
               fmt::join(first_ids, ", "));
}

// fairseq's batch_by_size_fast over n examples in order: id_at(k) is the k-th example's id,
// tokens_at(k) its size.
template <typename IdAt, typename TokensAt>
std::vector<std::vector<int64_t>> batch_in_order(size_t n, IdAt id_at, TokensAt tokens_at,
                                                 const BatchingOptions& options) {
  const int64_t max_tokens = options.max_tokens > 0 ? options.max_tokens : -1;
  const int64_t max_sentences = options.max_sentences > 0 ? options.max_sentences : -1;
  const auto mult = static_cast<size_t>(std::max<int64_t>(1, options.required_batch_size_multiple));
  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> batch;
  std::vector<int64_t> sample_lens;
  int64_t sample_len = 0;
  for (size_t k = 0; k < n; ++k) {
    const int64_t idx = id_at(k);
    const int64_t tokens = tokens_at(k);
    sample_lens.push_back(tokens);
    sample_len = std::max(sample_len, tokens);
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

}  // namespace

std::vector<int64_t> ordered_indices(const std::vector<int64_t>& src_sizes, const std::vector<int64_t>& tgt_sizes,
                                     bool shuffle, uint32_t seed) {
  check_target_sizes(src_sizes, tgt_sizes);
  if (PackedOrder packed; packed_order(src_sizes, tgt_sizes, shuffle, seed, packed))
    return std::vector<int64_t>(packed.ids.begin(), packed.ids.end());
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
  std::vector<int64_t> first_ignored;
  size_t ignored = 0;
  kept.reserve(indices.size());
  for (int64_t i : indices) {
    auto k = static_cast<size_t>(i);
    bool ok = src_sizes[k] <= options.max_source_positions &&
              (tgt_sizes.empty() || tgt_sizes[k] <= options.max_target_positions);
    if (ok) {
      kept.push_back(i);
    } else {
      if (first_ignored.size() < 10) first_ignored.push_back(i);
      ++ignored;
    }
  }
  if (ignored > 0) {
    auto k = static_cast<size_t>(first_ignored[0]);
    report_invalid(ignored, first_ignored, src_sizes[k], tgt_sizes.empty() ? 0 : tgt_sizes[k], options);
  }
  return kept;
}

std::vector<std::vector<int64_t>> batch_by_size(const std::vector<int64_t>& indices,
                                                const std::vector<int64_t>& num_tokens,
                                                const BatchingOptions& options) {
  return batch_in_order(
      indices.size(), [&](size_t k) { return indices[k]; },
      [&](size_t k) { return num_tokens[static_cast<size_t>(indices[k])]; }, options);
}

std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& src_sizes,
                                               const std::vector<int64_t>& tgt_sizes, bool shuffle, uint32_t seed,
                                               const SizeFilterOptions& filter, const BatchingOptions& batching) {
  check_target_sizes(src_sizes, tgt_sizes);
  PackedOrder order;
  if (!packed_order(src_sizes, tgt_sizes, shuffle, seed, order)) {
    auto indices = filter_by_size(ordered_indices(src_sizes, tgt_sizes, shuffle, seed), src_sizes, tgt_sizes, filter);
    std::vector<int64_t> num_tokens(src_sizes);
    for (size_t i = 0; i < tgt_sizes.size(); ++i) num_tokens[i] = std::max(num_tokens[i], tgt_sizes[i]);
    return batch_by_size(indices, num_tokens, batching);
  }
  // filter_by_size on the sizes beside the order, compacting in place.
  const bool has_tgt = !tgt_sizes.empty();
  const size_t n = order.ids.size();
  size_t kept = 0;
  size_t ignored = 0;
  uint32_t first_ignored_key = 0;
  std::vector<int64_t> first_ignored;
  for (size_t k = 0; k < n; ++k) {
    const uint32_t key = order.keys[k];
    const bool ok = static_cast<int64_t>(key >> 16) <= filter.max_source_positions &&
                    (!has_tgt || static_cast<int64_t>(key & kLow16) <= filter.max_target_positions);
    if (ok) {
      order.ids[kept] = order.ids[k];
      order.keys[kept] = key;
      ++kept;
    } else {
      if (ignored == 0) first_ignored_key = key;
      if (first_ignored.size() < 10) first_ignored.push_back(order.ids[k]);
      ++ignored;
    }
  }
  if (ignored > 0) report_invalid(ignored, first_ignored, first_ignored_key >> 16, first_ignored_key & kLow16, filter);
  return batch_in_order(
      kept, [&](size_t k) { return static_cast<int64_t>(order.ids[k]); },
      [&](size_t k) {
        const uint32_t key = order.keys[k];
        return static_cast<int64_t>(std::max(key >> 16, key & kLow16));
      },
      batching);
}

}  // namespace fairseq_cpp::data
