#pragma once
// fairseq v0.9's own BLEU (fairseq/bleu.py with clib/libbleu): corpus BLEU-4 over token ids with
// no smoothing. fairseq-generate feeds it the post-processed strings re-encoded word by word with
// the target dictionary (unknown words added), so it is a whitespace-tokenized word BLEU.
//
//   FairseqBleu bleu(dict);                      // a copy: new words are added to it
//   bleu.add_strings("Ein Hund .", "Ein Hund"); // reference, hypothesis
//   bleu.result_string()   // "BLEU4 = 0.00, 100.0/100.0/0.0/0.0 (BP=0.607, ratio=0.667, syslen=2, reflen=3)"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fairseq_cpp/data/dictionary.h"

namespace fairseq_cpp::scoring {

class FairseqBleu {
 public:
  explicit FairseqBleu(data::Dictionary dictionary);

  // fairseq's Scorer.add: `ref` and `pred` ids; pad trimmed on the left, </s> and pad on the right
  // (never the first token); <unk> in the reference never matches.
  void add(std::vector<int32_t> ref, std::vector<int32_t> pred);
  // Dictionary.encode_line(line, add_if_not_exist=True): words to ids, new words added, </s> last.
  // Ids depend on the order of calls, and libbleu's hashed n-grams on the ids: to reproduce
  // fairseq-generate exactly, encode each hypothesis before its reference, as it does.
  std::vector<int32_t> encode_line(std::string_view line);
  // encode_line(pred), encode_line(ref), then add().
  void add_strings(std::string_view ref, std::string_view pred);

  double score() const;                    // BLEU-4, 0..100
  std::vector<double> precisions() const;  // p1..p4 in 0..1
  double brevity() const;
  // "BLEU4 = 28.78, 55.2/35.1/23.2/15.3 (BP=1.000, ratio=1.015, syslen=11074, reflen=10905)"
  std::string result_string() const;

  int64_t reflen() const { return reflen_; }
  int64_t predlen() const { return predlen_; }

 private:
  data::Dictionary dict_;
  int64_t reflen_ = 0;
  int64_t predlen_ = 0;
  int64_t match_[4] = {0, 0, 0, 0};
  int64_t count_[4] = {0, 0, 0, 0};
};

}  // namespace fairseq_cpp::scoring
