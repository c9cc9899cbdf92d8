#pragma once
// Text as fairseq-generate prints it: ids back to words (Dictionary.string), BPE/SentencePiece
// removal (--remove-bpe / --post-process), and Python's float formatting for scores.
//
//   post_process("▁Ein ▁Hund .", "sentencepiece")   // "Ein Hund."
//   python_float(-0.5f)                              // "-0.5" (as Python's '{}'.format prints it)

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fairseq_cpp/data/dictionary.h"

namespace fairseq_cpp::generation {

// fairseq's Dictionary.string: symbols of `ids` joined by spaces, skipping </s> and <s>; <unk> as
// "<unk>" (or "<<unk>>" with `escape_unk`); then post_process(..., symbol).
std::string ids_to_string(const data::Dictionary& dict, const std::vector<int64_t>& ids, const std::string& symbol,
                          bool escape_unk = false);
// The same with <unk> written as `unk_string` (fairseq's unk_string: validation's BLEU writes
// "UNKNOWNTOKENINHYP" and "UNKNOWNTOKENINREF", so that an <unk> never matches one).
std::string ids_to_string(const data::Dictionary& dict, const std::vector<int64_t>& ids, const std::string& symbol,
                          const std::string& unk_string);

// fairseq's process_bpe_symbol: "sentencepiece" (drop spaces, U+2581 -> space, strip), "_EOW",
// "subword_nmt" (= "@@ "), any other symbol removed literally; empty or "none" = unchanged.
std::string post_process(std::string_view sentence, const std::string& symbol);

// Python's repr of a double ("-0.268447607755661", "1.0", "1e-05", "-inf").
std::string python_float(double value);

}  // namespace fairseq_cpp::generation
