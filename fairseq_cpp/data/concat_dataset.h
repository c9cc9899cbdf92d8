#pragma once
// fairseq's ConcatDataset (fairseq/data/concat_dataset.py) over mapped IndexedDatasets: the parts
// one after the other, part k repeated sample_ratios[k] times. Example i is one sentence of one
// part; nothing is copied.
//
//   ConcatDataset all({train, train1}, {2, 1});  // train, train again, then train1
//   all.size();       // 2 * train->size() + train1->size()
//   all.locate(i);    // {part, sentence of that part}

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "fairseq_cpp/data/indexed_dataset.h"

namespace fairseq_cpp::data {

class ConcatDataset {
 public:
  // One part, once: the dataset as it is.
  explicit ConcatDataset(std::shared_ptr<const IndexedDataset> dataset);
  // `sample_ratios` has one entry (>= 1) per part.
  ConcatDataset(std::vector<std::shared_ptr<const IndexedDataset>> parts, std::vector<int64_t> sample_ratios);

  size_t size() const { return ends_.empty() ? 0 : ends_.back(); }
  // The part and the sentence in it of example `i` (< size()).
  std::pair<size_t, size_t> locate(size_t i) const;
  // Elements of example `i` (</s> included).
  int64_t length(size_t i) const;
  // Example `i` as int64 ids, written to `out`.
  void read(size_t i, int64_t* out) const;
  // Every example's length in order (fairseq's `sizes`: each part's sizes tiled ratio times).
  std::vector<int64_t> lengths() const;

  size_t num_parts() const { return parts_.size(); }
  const IndexedDataset& part(size_t k) const { return *parts_[k]; }
  int64_t sample_ratio(size_t k) const { return ratios_[k]; }

 private:
  std::vector<std::shared_ptr<const IndexedDataset>> parts_;
  std::vector<int64_t> ratios_;
  std::vector<size_t> ends_;  // cumulative sizes: examples up to the end of part k
};

}  // namespace fairseq_cpp::data
