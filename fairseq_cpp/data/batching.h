#pragma once
// fairseq's batching (data_utils.py, language_pair_dataset.py), with numpy's seeded random
// streams reproduced so that orders equal fairseq's for the same seed:
//   ordered_indices -> filter_by_size -> batch_by_size -> (per epoch) shuffle_batches
// make_batches does the first three at once; with sizes below 65,536 it orders by counting sort
// (about 20x faster than comparison sorts at WMT sizes) and yields exactly the same batches.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace fairseq_cpp::data {

// numpy's legacy RandomState (np.random.seed(s); permutation; shuffle): MT19937 seeded with
// init_genrand, bounded integers by masked rejection.
class NumpyRandom {
 public:
  explicit NumpyRandom(uint32_t seed) : engine_(seed) {}
  // A uniform integer in [0, max] (numpy's random_interval).
  uint64_t interval(uint64_t max);
  // np.random.shuffle: Fisher-Yates from the back.
  template <typename T>
  void shuffle(std::vector<T>& items) {
    for (size_t i = items.size(); i-- > 1;) std::swap(items[i], items[static_cast<size_t>(interval(i))]);
  }
  // np.random.permutation(n).
  std::vector<int64_t> permutation(int64_t n);

 private:
  std::mt19937 engine_;
};

// LanguagePairDataset.ordered_indices under numpy_seed(seed): a permutation (or 0..n-1 without
// `shuffle`), stably sorted by target size, then stably by source size. `tgt_sizes` may be empty
// or else has the size of `src_sizes` (DataError otherwise).
std::vector<int64_t> ordered_indices(const std::vector<int64_t>& src_sizes, const std::vector<int64_t>& tgt_sizes,
                                     bool shuffle, uint32_t seed);

struct SizeFilterOptions {
  int64_t max_source_positions = 1024;  // longest source kept, in tokens (</s> included)
  int64_t max_target_positions = 1024;  // longest target kept, in tokens
  bool skip_invalid = true;             // drop longer examples with a counted warning; false = error
  std::string what = "dataset";         // names the data in messages
};
// data_utils.filter_by_size: keeps the order. Throws DataError naming the first invalid example
// when !skip_invalid.
std::vector<int64_t> filter_by_size(const std::vector<int64_t>& indices, const std::vector<int64_t>& src_sizes,
                                    const std::vector<int64_t>& tgt_sizes, const SizeFilterOptions& options);

struct BatchingOptions {
  int64_t max_tokens = 0;                    // tokens per batch counting padding (len * longest); 0 = no limit
  int64_t max_sentences = 0;                 // sentences per batch; 0 = no limit
  int64_t required_batch_size_multiple = 1;  // full batches are cut to a multiple of this
};
// data_utils.batch_by_size (fairseq's batch_by_size_fast): `num_tokens[i]` is example i's size
// (max of source and target). Throws DataError when one example alone exceeds max_tokens.
std::vector<std::vector<int64_t>> batch_by_size(const std::vector<int64_t>& indices,
                                                const std::vector<int64_t>& num_tokens, const BatchingOptions& options);

// ordered_indices -> filter_by_size -> batch_by_size with num_tokens = max(source, target): the
// same batches (and warnings, and errors), without gathering sizes by index after the sort.
std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& src_sizes,
                                               const std::vector<int64_t>& tgt_sizes, bool shuffle, uint32_t seed,
                                               const SizeFilterOptions& filter, const BatchingOptions& batching);

}  // namespace fairseq_cpp::data
