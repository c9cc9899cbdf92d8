#pragma once
// fairseq's LanguagePairDataset over mapped data-bin files, and its collate: a Batch of padded
// tensors, rows sorted by source length (longest first). Each side is a ConcatDataset: one split,
// or (load_combined) train, train1, train2, ... with the first upsampled, as fairseq's
// load_langpair_dataset makes it for training.
//
//   auto ds = LanguagePairDataset::load("data-bin", "train", "en", "de", src_dict, tgt_dict, {});
//   Batch b = ds.collate({4, 17, 9});   // b.src_tokens (3, S), b.target (3, T)

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fairseq_cpp/data/batching.h"
#include "fairseq_cpp/data/concat_dataset.h"
#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/data/indexed_dataset.h"

namespace fairseq_cpp::data {

// One mini-batch as fairseq's collate makes it. An empty batch (nsentences 0, undefined tensors)
// pads a short shard; the trainer runs it as a zero-weight dummy.
struct Batch {
  at::Tensor id;                  // (B) int64, example ids
  at::Tensor src_tokens;          // (B, S) int64, left-padded by default
  at::Tensor src_lengths;         // (B) int64, source lengths with </s>, descending
  at::Tensor prev_output_tokens;  // (B, T) int64, target shifted right, starting with </s>
  at::Tensor target;              // (B, T) int64, right-padded by default
  int64_t ntokens = 0;            // target tokens (</s> included, padding excluded)
  int64_t nsentences = 0;         // B
  bool empty() const { return nsentences == 0; }
};

struct LanguagePairOptions {
  bool left_pad_source = true;   // pad sources on the left
  bool left_pad_target = false;  // pad targets on the left
  int32_t pad = Dictionary::kPad;
  int32_t eos = Dictionary::kEos;
  int64_t truncate_source = 0;   // > 0: a longer source keeps its first N-1 tokens and </s> (fairseq's
                                 // truncate_source at max_source_positions); 0 = off
};

class LanguagePairDataset {
 public:
  // `tgt` may be null (source only).
  LanguagePairDataset(std::shared_ptr<const IndexedDataset> src, std::shared_ptr<const IndexedDataset> tgt,
                      LanguagePairOptions options);
  // Concatenations: `tgt` absent (source only) or with the parts and ratios of `src`.
  LanguagePairDataset(ConcatDataset src, std::optional<ConcatDataset> tgt, LanguagePairOptions options);

  // Maps <dir>/<split>.<src>-<tgt>.<src|tgt>.{bin,idx} and checks that every token id fits its
  // dictionary (DataError naming the file, the sentence and both sizes).
  static LanguagePairDataset load(const std::string& dir, const std::string& split, const std::string& src_lang,
                                  const std::string& tgt_lang, const Dictionary& src_dict, const Dictionary& tgt_dict,
                                  LanguagePairOptions options);
  // fairseq's load_langpair_dataset with combine=True (its training set): <split>, <split>1,
  // <split>2, ... of `dir` up to the first one missing, concatenated, <split> repeated
  // `upsample_primary` (>= 1) times when there is more than one. Logs each part's size as fairseq.
  static LanguagePairDataset load_combined(const std::string& dir, const std::string& split,
                                           const std::string& src_lang, const std::string& tgt_lang,
                                           const Dictionary& src_dict, const Dictionary& tgt_dict,
                                           int64_t upsample_primary, LanguagePairOptions options);

  size_t size() const { return src_sizes_.size(); }
  const std::vector<int64_t>& src_sizes() const { return src_sizes_; }
  const std::vector<int64_t>& tgt_sizes() const { return tgt_sizes_; }  // empty without a target
  // max(source, target) size: what max_tokens counts.
  std::vector<int64_t> num_tokens() const;
  const ConcatDataset& source() const { return src_; }
  const ConcatDataset* target() const { return tgt_ ? &*tgt_ : nullptr; }  // null without a target

  // fairseq's collate of the examples `indices`.
  Batch collate(const std::vector<int64_t>& indices) const;

  // ordered_indices(seed) -> filter_by_size -> batch_by_size: fairseq's batch list for this dataset.
  std::vector<std::vector<int64_t>> make_batches(uint32_t seed, bool shuffle, const SizeFilterOptions& filter,
                                                 const BatchingOptions& batching) const;

 private:
  ConcatDataset src_;
  std::optional<ConcatDataset> tgt_;
  LanguagePairOptions options_;
  std::vector<int64_t> src_sizes_;
  std::vector<int64_t> tgt_sizes_;
};

// Checks that every id of `dataset` is below `dict_size`; throws DataError naming both files.
void check_token_ids(const IndexedDataset& dataset, int64_t dict_size, const std::string& dict_name);

// fairseq's utils.split_paths of `task.data`: "bin1:bin2:bin3" -> {"bin1", "bin2", "bin3"}
// (os.pathsep-separated; empty names dropped).
std::vector<std::string> split_paths(const std::string& data);

// Checks before training that every directory of sharded data (`paths`) holds `split` for both
// languages (an epoch reads it there; a gap found only at that epoch would stop a long run late)
// and dictionaries with the first's symbols in the same order (fairseq reads them from the first
// only, so a directory binarized with others would train on wrong words). DataError naming the file.
void check_data_directories(const std::vector<std::string>& paths, const std::string& split,
                            const std::string& src_lang, const std::string& tgt_lang);

}  // namespace fairseq_cpp::data
