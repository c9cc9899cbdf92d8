#pragma once
// Text as fairseq-generate prints it: ids back to words (Dictionary.string), BPE/SentencePiece
// removal (--remove-bpe / --post-process), and Python's float formatting for scores.
//
//   post_process("▁Ein ▁Hund .", "sentencepiece")   // "Ein Hund."
//   python_float(-0.5f)                              // "-0.5" (as Python's '{}'.format prints it)

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/Tensor.h>

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

// fairseq's load_align_dict: the alignment dictionary file of --replace-unk, "source target" per
// line (a later line replaces an earlier one's word). Throws UserError if it cannot be read.
std::map<std::string, std::string> load_align_dict(const std::string& path);

// fairseq's replace_unk: each `unk` among the words of `hypo` (split at whitespace) becomes the
// word of `source` (+ "<eos>") that alignment[i] names for the i-th word, translated by `align_dict`
// where it has the word. Word i is target token i: with BPE removed, they differ, as in fairseq.
//   replace_unk("the <unk> runs", "der Hund läuft", {{0, 0}, {1, 1}, {2, 2}}, {}, "<unk>")  // "the Hund runs"
std::string replace_unk(std::string_view hypo, std::string_view source,
                        const std::vector<std::pair<int64_t, int64_t>>& alignment,
                        const std::map<std::string, std::string>& align_dict, const std::string& unk);

// fairseq-generate's A- line text: hard "0-0 2-1 1-2" (source-target pairs); soft: per target
// token, its attention over the source tokens that are not padding, "0.500000,0.500000 1.000000,0.000000".
std::string alignment_string(const std::vector<std::pair<int64_t, int64_t>>& alignment);
std::string soft_alignment_string(const at::Tensor& attention, const std::vector<int64_t>& source, int64_t pad);

// Python's repr of a double ("-0.268447607755661", "1.0", "1e-05", "-inf").
std::string python_float(double value);

}  // namespace fairseq_cpp::generation
