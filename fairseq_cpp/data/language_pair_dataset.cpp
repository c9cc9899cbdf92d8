#include "fairseq_cpp/data/language_pair_dataset.h"

#include "fairseq_cpp/core/torch.h"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"

namespace fairseq_cpp::data {
namespace fs = std::filesystem;

LanguagePairDataset::LanguagePairDataset(std::shared_ptr<const IndexedDataset> src,
                                         std::shared_ptr<const IndexedDataset> tgt, LanguagePairOptions options)
    : LanguagePairDataset(ConcatDataset(std::move(src)),
                          tgt ? std::optional<ConcatDataset>(ConcatDataset(std::move(tgt))) : std::nullopt, options) {}

LanguagePairDataset::LanguagePairDataset(ConcatDataset src, std::optional<ConcatDataset> tgt,
                                         LanguagePairOptions options)
    : src_(std::move(src)), tgt_(std::move(tgt)), options_(options) {
  src_sizes_ = src_.lengths();
  if (options_.truncate_source > 0)
    for (int64_t& size : src_sizes_) size = std::min(size, options_.truncate_source);
  if (tgt_) {
    bool same_parts = tgt_->num_parts() == src_.num_parts();
    for (size_t k = 0; same_parts && k < src_.num_parts(); ++k) {
      same_parts = tgt_->sample_ratio(k) == src_.sample_ratio(k);
      if (same_parts && tgt_->part(k).size() != src_.part(k).size()) {
        raise<DataError>("{}: {} sentences, but {} has {}; expected one target per source",
                         index_file_path(tgt_->part(k).prefix()), tgt_->part(k).size(),
                         index_file_path(src_.part(k).prefix()), src_.part(k).size());
      }
    }
    if (!same_parts)
      raise<DataError>("{}: the target side is not concatenated as the source side {}",
                       index_file_path(tgt_->part(0).prefix()), index_file_path(src_.part(0).prefix()));
    tgt_sizes_ = tgt_->lengths();
  }
}

void check_token_ids(const IndexedDataset& dataset, int64_t dict_size, const std::string& dict_name) {
  // One pass over the whole .bin says whether every id fits; the sentences are read one by one only
  // when one does not, to name the first.
  if (auto range = dataset.integer_range(); range && range->first >= 0 && range->second < dict_size) return;
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

namespace {

std::string split_prefix(const std::string& dir, const std::string& split, const std::string& src_lang,
                         const std::string& tgt_lang, const std::string& lang) {
  return dir + "/" + split + "." + src_lang + "-" + tgt_lang + "." + lang;
}

// One split's sides, each checked against its dictionary; the target is null without a target language.
std::pair<std::shared_ptr<const IndexedDataset>, std::shared_ptr<const IndexedDataset>> load_sides(
    const std::string& dir, const std::string& split, const std::string& src_lang, const std::string& tgt_lang,
    const Dictionary& src_dict, const Dictionary& tgt_dict) {
  auto src = std::make_shared<const IndexedDataset>(split_prefix(dir, split, src_lang, tgt_lang, src_lang));
  check_token_ids(*src, src_dict.size(), dir + "/dict." + src_lang + ".txt");
  std::shared_ptr<const IndexedDataset> tgt;
  if (!tgt_lang.empty()) {
    tgt = std::make_shared<const IndexedDataset>(split_prefix(dir, split, src_lang, tgt_lang, tgt_lang));
    check_token_ids(*tgt, tgt_dict.size(), dir + "/dict." + tgt_lang + ".txt");
  }
  return {std::move(src), std::move(tgt)};
}

}  // namespace

LanguagePairDataset LanguagePairDataset::load(const std::string& dir, const std::string& split,
                                              const std::string& src_lang, const std::string& tgt_lang,
                                              const Dictionary& src_dict, const Dictionary& tgt_dict,
                                              LanguagePairOptions options) {
  auto [src, tgt] = load_sides(dir, split, src_lang, tgt_lang, src_dict, tgt_dict);
  return LanguagePairDataset(std::move(src), std::move(tgt), options);
}

LanguagePairDataset LanguagePairDataset::load_combined(const std::string& dir, const std::string& split,
                                                       const std::string& src_lang, const std::string& tgt_lang,
                                                       const Dictionary& src_dict, const Dictionary& tgt_dict,
                                                       int64_t upsample_primary, LanguagePairOptions options) {
  std::vector<std::shared_ptr<const IndexedDataset>> srcs, tgts;
  for (int k = 0;; ++k) {
    const std::string split_k = k == 0 ? split : split + std::to_string(k);
    const std::string prefix = split_prefix(dir, split_k, src_lang, tgt_lang, src_lang);
    std::error_code ec;
    // As fairseq: the first one missing ends the list; a missing <split> itself is an error (the
    // loader names the file).
    if (k > 0 && !(fs::exists(index_file_path(prefix), ec) && fs::exists(data_file_path(prefix), ec))) break;
    auto [src, tgt] = load_sides(dir, split_k, src_lang, tgt_lang, src_dict, tgt_dict);
    log::info("data", "{} {} {}-{} {} examples", dir, split_k, src_lang, tgt_lang, src->size());
    srcs.push_back(std::move(src));
    if (tgt) tgts.push_back(std::move(tgt));
  }
  // fairseq's sample_ratios: the primary (<split>) upsample_primary times, the others once; a split
  // alone is used as it is.
  std::vector<int64_t> ratios(srcs.size(), 1);
  if (srcs.size() > 1) ratios[0] = upsample_primary;
  std::optional<ConcatDataset> tgt;
  if (!tgts.empty()) tgt.emplace(std::move(tgts), ratios);
  return LanguagePairDataset(ConcatDataset(std::move(srcs), ratios), std::move(tgt), options);
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
  auto fill = [&](const ConcatDataset& ds, const std::vector<int64_t>& sizes, bool left_pad, at::Tensor& tokens,
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
  fill(src_, src_sizes_, options_.left_pad_source, b.src_tokens, nullptr);
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
  return data::make_batches(src_sizes_, tgt_sizes_, shuffle, seed, filter, batching);
}

std::vector<std::string> split_paths(const std::string& data) {
  std::vector<std::string> paths;
  for (size_t start = 0; start <= data.size();) {
    size_t colon = std::min(data.find(':', start), data.size());
    if (colon > start) paths.push_back(data.substr(start, colon - start));
    start = colon + 1;
  }
  return paths;
}

void check_data_directories(const std::vector<std::string>& paths, const std::string& split,
                            const std::string& src_lang, const std::string& tgt_lang) {
  for (const std::string& dir : paths) {
    for (const std::string& lang : {src_lang, tgt_lang}) {
      const std::string prefix = split_prefix(dir, split, src_lang, tgt_lang, lang);
      for (const std::string& file : {index_file_path(prefix), data_file_path(prefix)}) {
        std::error_code ec;
        if (!fs::exists(file, ec))
          raise<DataError>(
              "{} does not exist; every data directory needs its own {} split (validation reads the "
              "first only)",
              file, split);
      }
    }
  }
  for (const std::string& lang : {src_lang, tgt_lang}) {
    const std::string name = "dict." + lang + ".txt";
    const std::string first_path = (fs::path(paths.at(0)) / name).string();
    const Dictionary first = Dictionary::load(first_path);
    for (size_t p = 1; p < paths.size(); ++p) {
      const std::string path = (fs::path(paths[p]) / name).string();
      const Dictionary other = Dictionary::load(path);
      int64_t differs = -1;
      for (int64_t id = 0; differs < 0 && id < std::min(first.size(), other.size()); ++id)
        if (first.symbol(id) != other.symbol(id)) differs = id;
      if (differs < 0 && first.size() == other.size()) continue;
      const std::string why = differs >= 0
                                  ? fmt::format("symbol {} is '{}' here but '{}' in {}", differs, other.symbol(differs),
                                                first.symbol(differs), first_path)
                                  : fmt::format("{} symbols here but {} in {}", other.size(), first.size(), first_path);
      raise<DataError>(
          "{}: {}; every data directory must be binarized with the first one's dictionaries (training reads "
          "them there only): fairseq-cpp-preprocess --srcdict/--tgtdict {}/dict.LANG.txt",
          path, why, paths[0]);
    }
  }
}

}  // namespace fairseq_cpp::data
