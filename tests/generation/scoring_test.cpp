// sacreBLEU's BLEU and chrF, fairseq's BLEU and fairseq's text output on inputs small enough to
// count the n-grams by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "fairseq_cpp/generation/fairseq_bleu.h"
#include "fairseq_cpp/generation/output.h"
#include "fairseq_cpp/generation/sacrebleu.h"

namespace fairseq_cpp::generation {
namespace {

TEST(Tokenize13a, SeparatesPunctuationButNotNumbers) {
  EXPECT_EQ(tokenize_13a("Hello, world!"), "Hello , world !");
  EXPECT_EQ(tokenize_13a("It costs 3.14 or 1,000 (a.b)."), "It costs 3.14 or 1,000 ( a . b ) .");
  EXPECT_EQ(tokenize_13a("&quot;x&quot; &amp; y&lt;z"), "\" x \" & y < z");
  EXPECT_EQ(tokenize_13a("pages 2-3, state-of-the-art"), "pages 2 - 3 , state-of-the-art");
  EXPECT_EQ(tokenize_13a("  Grüße.Über  "), "Grüße . Über");
}

TEST(SacreBleu, HandCountedCorpus) {
  // hyp "the cat sat on the mat" vs ref "the cat is on the mat": 1-grams 5/6, 2-grams 3/5,
  // 3-grams 1/4 (on the mat), 4-grams 0/3 -> exp smoothing 100 / (2 * 3).
  BleuScore s = corpus_bleu({"the cat sat on the mat"}, {"the cat is on the mat"});
  EXPECT_EQ(s.correct, (std::array<int64_t, 4>{5, 3, 1, 0}));
  EXPECT_EQ(s.total, (std::array<int64_t, 4>{6, 5, 4, 3}));
  EXPECT_EQ(s.sys_len, 6);
  EXPECT_EQ(s.ref_len, 6);
  const double expected = std::pow(100.0 * 5 / 6 * 60 * 25 * (100.0 / 6), 0.25);
  EXPECT_NEAR(s.score, expected, 1e-9);
  EXPECT_EQ(format_bleu(s),
            "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.5.1 = 37.99 83.3/60.0/25.0/16.7 "
            "(BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)");
}

TEST(SacreBleu, BrevityPenaltyAndNoMatches) {
  // 2 hypothesis tokens vs 4 reference tokens: BP = exp(1 - 4/2).
  BleuScore s = corpus_bleu({"a b"}, {"a b c d"});
  EXPECT_NEAR(s.bp, std::exp(-1.0), 1e-12);
  EXPECT_EQ(s.total, (std::array<int64_t, 4>{2, 1, 0, 0}));
  // total 0 at n = 3 stops the precisions there; log(0) is floored: the score is ~0.
  EXPECT_LT(s.score, 1e-100);
  BleuScore none = corpus_bleu({"x y"}, {"a b"});
  EXPECT_EQ(none.score, 0.0);
  EXPECT_EQ(none.precisions[0], 0.0);
}

TEST(SacreBleu, ChrfHandCounted) {
  EXPECT_NEAR(corpus_chrf({"ab"}, {"ab"}).score, 100.0, 1e-9);
  // "abc" vs "abd": orders 1..3 count (2/3, 1/2, 0/1 for precision and recall alike), orders 4..6
  // have no n-grams: F2 of the averages = 100 * (2/3 + 1/2 + 0) / 3.
  ChrfScore c = corpus_chrf({"abc"}, {"abd"});
  EXPECT_NEAR(c.score, 100.0 * (2.0 / 3 + 0.5) / 3, 1e-9);
  EXPECT_EQ(format_chrf(c), "chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.5.1 = 38.89");
  // Whitespace is removed before counting: "a bc" is "abc"; characters, not bytes: "ü" is one.
  EXPECT_NEAR(corpus_chrf({"a bc"}, {"abc"}).score, 100.0, 1e-9);
  ChrfScore u = corpus_chrf({"ü"}, {"ü"});
  EXPECT_EQ(u.statistics[0], 1);
  EXPECT_EQ(u.statistics[3], 0);  // no 2-grams
}

TEST(SacreBleu, RstripRemovesUnicodeWhitespace) {
  EXPECT_EQ(rstrip("ab \t\xE3\x80\x80"), "ab");  // U+3000 ideographic space
  EXPECT_EQ(rstrip("ab\xC3\xBC"), "ab\xC3\xBC");
}

TEST(FairseqBleu, CountsIdsAsLibbleu) {
  data::Dictionary dict;
  FairseqBleu bleu(dict);
  // ids: ref 4 5 6 7 </s>, pred 4 5 6 </s> pad: 1-grams 3/3, 2-grams 2/2, 3-grams 1/1, 4-grams 0/0.
  bleu.add({4, 5, 6, 7, 2}, {4, 5, 6, 2, 1});
  EXPECT_EQ(bleu.reflen(), 4);
  EXPECT_EQ(bleu.predlen(), 3);
  EXPECT_EQ(bleu.precisions(), (std::vector<double>{1.0, 1.0, 1.0, 0.0}));
  EXPECT_EQ(bleu.score(), 0.0);  // log(0) = -inf: fairseq reports 0
  EXPECT_EQ(bleu.result_string(), "BLEU4 = 0.00, 100.0/100.0/100.0/0.0 (BP=0.717, ratio=0.750, syslen=3, reflen=4)");
  // <unk> (3) in the reference never matches, even against <unk>.
  FairseqBleu unk(dict);
  unk.add({3, 5, 2}, {3, 5, 2});
  EXPECT_EQ(unk.precisions()[0], 0.5);
}

TEST(FairseqBleu, StringsAreReencodedWordByWord) {
  FairseqBleu bleu{data::Dictionary()};
  bleu.add_strings("a b c d e", "a b c d e");
  bleu.add_strings("x y", "x z");
  // 1-grams (5 + 1) / 7, 2-grams 4 / 5, 3-grams 3 / 3, 4-grams 2 / 2; lengths equal.
  auto p = bleu.precisions();
  EXPECT_DOUBLE_EQ(p[0], 6.0 / 7);
  EXPECT_DOUBLE_EQ(p[1], 4.0 / 5);
  EXPECT_NEAR(bleu.score(), 100 * std::pow(6.0 / 7 * 4.0 / 5, 0.25), 1e-9);
}

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
