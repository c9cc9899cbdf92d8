// fairseq's text output: dictionary strings, post-processing, Python's float repr.
#include <gtest/gtest.h>

#include "tests/support/torch.h"

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/generation/output.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::generation {
namespace {

TEST(Output, DictionaryStringAndPostProcessing) {
  data::Dictionary dict;
  const int32_t ein = dict.add_symbol(
      "\xE2\x96\x81"
      "Ein");
  const int32_t hund = dict.add_symbol(
      "\xE2\x96\x81"
      "Hund");
  const int32_t dot = dict.add_symbol(".");
  EXPECT_EQ(ids_to_string(dict, {ein, hund, dot, 2}, "sentencepiece"), "Ein Hund.");
  EXPECT_EQ(ids_to_string(dict, {ein, 3, 2}, ""),
            "\xE2\x96\x81"
            "Ein <unk>");
  EXPECT_EQ(ids_to_string(dict, {ein, 3, 2}, "", /*escape_unk=*/true),
            "\xE2\x96\x81"
            "Ein <<unk>>");
  EXPECT_EQ(post_process("Ein Hun@@ d .", "subword_nmt"), "Ein Hund .");
  EXPECT_EQ(post_process("Ein Hun@@ d .", "@@ "), "Ein Hund .");
  EXPECT_EQ(post_process("x y", "none"), "x y");
}

TEST(Output, PythonFloatRepr) {
  EXPECT_EQ(python_float(-0.268447607755661), "-0.268447607755661");
  EXPECT_EQ(python_float(static_cast<double>(-0.3458670675754547f)), "-0.3458670675754547");
  EXPECT_EQ(python_float(-1.0), "-1.0");
  EXPECT_EQ(python_float(1e-05), "1e-05");
}

// fairseq's replace_unk: the i-th word of the hypothesis takes source word alignment[i].first,
// through the alignment dictionary where it has the word.
TEST(Output, ReplaceUnkCopiesOrTranslatesTheAlignedSourceWord) {
  const std::vector<std::pair<int64_t, int64_t>> alignment = {{0, 0}, {2, 1}, {1, 2}, {3, 3}};
  EXPECT_EQ(replace_unk("A <unk> runs <unk>", "Ein Bello  läuft", alignment, {}, "<unk>"), "A läuft runs <eos>");
  EXPECT_EQ(replace_unk("A <unk> runs", "Ein Bello läuft", alignment, {{"läuft", "runs"}}, "<unk>"), "A runs runs");
  // A word past the alignment stays as it is; other words are untouched.
  EXPECT_EQ(replace_unk("x y z w <unk>", "a b", alignment, {}, "<unk>"), "x y z w <unk>");

  testing::TempDir tmp;
  const std::string file = tmp.write("align.txt", "Bello Bello\nläuft runs extra\n\nläuft walks\n");
  EXPECT_EQ(load_align_dict(file), (std::map<std::string, std::string>{{"Bello", "Bello"}, {"läuft", "walks"}}));
  EXPECT_THROW(load_align_dict(tmp.write("bad.txt", "one\n")), UserError);
  EXPECT_THROW(load_align_dict(tmp.path() + "/missing.txt"), Error);
}

TEST(Output, AlignmentLines) {
  EXPECT_EQ(alignment_string({{0, 0}, {2, 1}, {1, 2}}), "0-0 2-1 1-2");
  EXPECT_EQ(alignment_string({}), "");
  // Soft: every target token's weights over the source tokens that are not padding (1).
  at::Tensor attention = torch::tensor({{0.0f, 0.25f, 0.75f}, {0.0f, 1.0f, 0.0f}});
  EXPECT_EQ(soft_alignment_string(attention, {1, 5, 2}, 1), "0.250000,0.750000 1.000000,0.000000");
}

}  // namespace
}  // namespace fairseq_cpp::generation
