#include "fairseq_cpp/data/language_pair_dataset.h"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::data {

LanguagePairDataset::LanguagePairDataset(std::shared_ptr<const IndexedDataset> src,
                                         std::shared_ptr<const IndexedDataset> tgt, LanguagePairOptions options)
    : src_(std::move(src)), tgt_(std::move(tgt)), options_(options) {
  src_sizes_ = src_->lengths();
  if (options_.truncate_source > 0)
    for (int64_t& size : src_sizes_) size = std::min(size, options_.truncate_source);
  if (tgt_) {
    if (tgt_->size() != src_->size()) {
      raise<DataError>("{}: {} sentences, but {} has {}; expected one target per source",
                       index_file_path(tgt_->prefix()), tgt_->size(), index_file_path(src_->prefix()), src_->size());
    }
    tgt_sizes_ = tgt_->lengths();
  }
}

void check_token_ids(const IndexedDataset& dataset, int64_t dict_size, const std::string& dict_name) {
  std::vector<int64_t> buffer;
  for (size_t i = 0; i < dataset.size(); ++i) {
    buffer.resize(static_cast<size_t>(dataset.length(i)));
    dataset.read(i, buffer.data());
    for (int64_t v : buffer) {
      if (v < 0 || v >= dict_size) {
        raise<DataError>(
            "{}: sentence {} has token id {}, but {} has {} symbols (ids 0-{}); the data-bin and its "
            "dictionary do not match",
            data_file_path(dataset.prefix()), i, v, dict_name, dict_size, dict_size - 1);
      }
    }
  }
}

LanguagePairDataset LanguagePairDataset::load(const std::string& dir, const std::string& split,
                                              const std::string& src_lang, const std::string& tgt_lang,
                                              const Dictionary& src_dict, const Dictionary& tgt_dict,
                                              LanguagePairOptions options) {
  auto prefix = [&](const std::string& lang) {
    return dir + "/" + split + "." + src_lang + "-" + tgt_lang + "." + lang;
  };
  auto src = std::make_shared<const IndexedDataset>(prefix(src_lang));
  check_token_ids(*src, src_dict.size(), dir + "/dict." + src_lang + ".txt");
  std::shared_ptr<const IndexedDataset> tgt;
  if (!tgt_lang.empty()) {
    tgt = std::make_shared<const IndexedDataset>(prefix(tgt_lang));
    check_token_ids(*tgt, tgt_dict.size(), dir + "/dict." + tgt_lang + ".txt");
  }
  return LanguagePairDataset(std::move(src), std::move(tgt), options);
}

std::vector<int64_t> LanguagePairDataset::num_tokens() const {
  std::vector<int64_t> out(src_sizes_);
  for (size_t i = 0; i < tgt_sizes_.size(); ++i) out[i] = std::max(out[i], tgt_sizes_[i]);
  return out;
}

Batch LanguagePairDataset::collate(const std::vector<int64_t>& indices) const {
  Batch b;
  const auto n = static_cast<int64_t>(indices.size());
  if (n == 0) return b;
  // Rows in descending source length; ties keep the order of `indices` (a stable sort).
  std::vector<size_t> order(indices.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t c) {
    return src_sizes_[static_cast<size_t>(indices[a])] > src_sizes_[static_cast<size_t>(indices[c])];
  });
  auto fill = [&](const IndexedDataset& ds, const std::vector<int64_t>& sizes, bool left_pad, at::Tensor& tokens,
                  at::Tensor* shifted) {
    int64_t width = 0;
    for (int64_t i : indices) width = std::max(width, sizes[static_cast<size_t>(i)]);
    tokens = torch::full({n, width}, options_.pad, torch::kLong);
    if (shifted != nullptr) *shifted = torch::full({n, width}, options_.pad, torch::kLong);
    int64_t* t = tokens.data_ptr<int64_t>();
    int64_t* s = shifted != nullptr ? shifted->data_ptr<int64_t>() : nullptr;
    for (int64_t row = 0; row < n; ++row) {
      auto k = static_cast<size_t>(indices[order[static_cast<size_t>(row)]]);
      int64_t len = sizes[k];
      int64_t start = row * width + (left_pad ? width - len : 0);
      if (len < ds.length(k)) {  // truncated: the first len - 1 tokens, then </s>
        std::vector<int64_t> whole(static_cast<size_t>(ds.length(k)));
        ds.read(k, whole.data());
        std::copy(whole.begin(), whole.begin() + (len - 1), t + start);
        t[start + len - 1] = options_.eos;
      } else {
        ds.read(k, t + start);
      }
      if (s != nullptr && len > 0) {
        // prev_output_tokens: </s> first, then the target without its final </s>.
        s[start] = options_.eos;
        std::copy(t + start, t + start + len - 1, s + start + 1);
      }
    }
  };
  b.id = torch::empty({n}, torch::kLong);
  b.src_lengths = torch::empty({n}, torch::kLong);
  int64_t* ids = b.id.data_ptr<int64_t>();
  int64_t* lengths = b.src_lengths.data_ptr<int64_t>();
  for (int64_t row = 0; row < n; ++row) {
    int64_t i = indices[order[static_cast<size_t>(row)]];
    ids[row] = i;
    lengths[row] = src_sizes_[static_cast<size_t>(i)];
  }
  fill(*src_, src_sizes_, options_.left_pad_source, b.src_tokens, nullptr);
  if (tgt_) {
    fill(*tgt_, tgt_sizes_, options_.left_pad_target, b.target, &b.prev_output_tokens);
    for (int64_t i : indices) b.ntokens += tgt_sizes_[static_cast<size_t>(i)];
  } else {
    for (int64_t i : indices) b.ntokens += src_sizes_[static_cast<size_t>(i)];
  }
  b.nsentences = n;
  return b;
}

std::vector<std::vector<int64_t>> LanguagePairDataset::make_batches(uint32_t seed, bool shuffle,
                                                                    const SizeFilterOptions& filter,
                                                                    const BatchingOptions& batching) const {
  auto indices = ordered_indices(src_sizes_, tgt_sizes_, shuffle, seed);
  indices = filter_by_size(indices, src_sizes_, tgt_sizes_, filter);
  return batch_by_size(indices, num_tokens(), batching);
}

}  // namespace fairseq_cpp::data
