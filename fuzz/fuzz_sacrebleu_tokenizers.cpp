// sacreBLEU's tokenizers and metrics on arbitrary text. Input: lines; each tokenizer gets every
// line, and the scorers get the first line as the hypothesis and the others as its references.
// Text that is not UTF-8 is refused by the readers before it reaches scoring (data::TextFile).
#include <string>
#include <string_view>
#include <vector>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/text.h"
#include "fairseq_cpp/scoring/scorer.h"
#include "fairseq_cpp/scoring/tokenizers.h"
#include "fairseq_cpp/scoring/unicode.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fairseq_cpp;
  std::string_view text = fuzz::as_text(data, size);
  if (data::find_invalid_utf8(text) != std::string_view::npos) return 0;
  std::vector<std::string_view> lines;
  for (size_t start = 0; start <= text.size();) {
    size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  for (std::string_view line : lines) {
    const std::u32string points = scoring::unicode::decode(line);
    if (scoring::unicode::encode(points) != line) fuzz::finding("UTF-8 does not round-trip");
    for (const std::string& name : scoring::tokenizer_names())
      scoring::tokenize(scoring::tokenizer_from_name(name), points);
    scoring::tokenize_13a(line);
  }
  std::string_view hypothesis = data::rstrip(lines[0]);
  std::vector<std::string_view> references;
  for (size_t i = 1; i < lines.size(); ++i) references.push_back(data::rstrip(lines[i]));
  if (references.empty()) references.push_back(hypothesis);
  // Options from the last byte, so that each metric's switches are reached.
  const uint8_t bits = size > 0 ? data[size - 1] : 0;
  scoring::ScoringOptions options;
  options.tokenize = scoring::tokenizer_names()[bits % scoring::tokenizer_names().size()];
  options.lowercase = bits & 0x08;
  options.chrf_whitespace = bits & 0x10;
  options.chrf_lowercase = bits & 0x08;
  options.chrf_eps_smoothing = bits & 0x20;
  options.ter_case_sensitive = bits & 0x10;
  options.ter_normalized = bits & 0x20;
  options.ter_no_punct = bits & 0x40;
  options.ter_asian_support = bits & 0x80;
  for (const std::string& metric : scoring::metric_names()) {
    try {
      auto scorer = scoring::make_scorer(metric, options);
      scorer->add(hypothesis, references);
      scorer->format(scorer->score());
    } catch (const UserError& e) {  // an option that this metric refuses
      fuzz::check_one_line(e);
    }
  }
  return 0;
}
