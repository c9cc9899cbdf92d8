#pragma once
// fairseq-preprocess's two passes over tokenized text, spread over worker threads: counting
// symbols into a Dictionary, and turning each line into ids + </s> in the data-bin's dtype.
// Lines are fairseq's: tokens split by tokenize_line (text.h).

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/data/indexed_dataset.h"

namespace fairseq_cpp::data {

// Adds every token of `lines` and one </s> per line to `dict` (Dictionary.add_file_to_dictionary).
void count_tokens(const std::vector<std::string_view>& lines, Dictionary& dict, int workers);

// A binarized text: the ids of every line followed by </s>, in `dtype`, back to back.
struct Binarized {
  DType dtype = DType::int32;
  std::vector<uint8_t> data;                // sum(sizes) elements of dtype
  std::vector<int32_t> sizes;               // elements per line, </s> included
  int64_t ntok = 0;                         // tokens, </s> included
  int64_t nunk = 0;                         // tokens replaced by <unk> (a literal "<unk>" is not counted)
  std::map<std::string, int64_t> replaced;  // the replaced words and how often
};

// Binarizes `lines` with `dict` (fairseq's Binarizer.binarize), in `workers` threads.
Binarized binarize(const std::vector<std::string_view>& lines, const Dictionary& dict, DType dtype, int workers);

// Runs fn(begin, end, chunk) over `workers` contiguous chunks of [0, n) in parallel threads and
// rethrows the first exception.
void parallel_chunks(size_t n, int workers, const std::function<void(size_t, size_t, int)>& fn);

}  // namespace fairseq_cpp::data
