#include "fairseq_cpp/data/concat_dataset.h"

#include <algorithm>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::data {

ConcatDataset::ConcatDataset(std::shared_ptr<const IndexedDataset> dataset)
    : ConcatDataset(std::vector<std::shared_ptr<const IndexedDataset>>{std::move(dataset)}, {1}) {}

ConcatDataset::ConcatDataset(std::vector<std::shared_ptr<const IndexedDataset>> parts,
                             std::vector<int64_t> sample_ratios)
    : parts_(std::move(parts)), ratios_(std::move(sample_ratios)) {
  if (parts_.empty()) raise<UserError>("ConcatDataset needs at least one part");
  if (ratios_.size() != parts_.size())
    raise<UserError>("ConcatDataset: {} parts, but {} sample ratios", parts_.size(), ratios_.size());
  size_t end = 0;
  for (size_t k = 0; k < parts_.size(); ++k) {
    if (ratios_[k] < 1)
      raise<UserError>("ConcatDataset: the sample ratio of part {} must be at least 1, but is {}", k, ratios_[k]);
    end += static_cast<size_t>(ratios_[k]) * parts_[k]->size();
    ends_.push_back(end);
  }
}

std::pair<size_t, size_t> ConcatDataset::locate(size_t i) const {
  // bisect_right over the cumulative sizes, as fairseq's _get_dataset_and_sample_index.
  const auto k = static_cast<size_t>(std::upper_bound(ends_.begin(), ends_.end(), i) - ends_.begin());
  const size_t start = k == 0 ? 0 : ends_[k - 1];
  return {k, (i - start) % parts_[k]->size()};
}

int64_t ConcatDataset::length(size_t i) const {
  auto [k, j] = locate(i);
  return parts_[k]->length(j);
}

void ConcatDataset::read(size_t i, int64_t* out) const {
  auto [k, j] = locate(i);
  parts_[k]->read(j, out);
}

std::vector<int64_t> ConcatDataset::lengths() const {
  std::vector<int64_t> out;
  out.reserve(size());
  for (size_t k = 0; k < parts_.size(); ++k) {
    std::vector<int64_t> part = parts_[k]->lengths();
    for (int64_t r = 0; r < ratios_[k]; ++r) out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

}  // namespace fairseq_cpp::data
