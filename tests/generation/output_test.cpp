// fairseq's text output: dictionary strings, post-processing, Python's float repr.
#include <gtest/gtest.h>

#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/generation/output.h"

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

}  // namespace
}  // namespace fairseq_cpp::generation
