// sacreBLEU's metrics and fairseq's BLEU on inputs small enough to count the n-grams by hand
// (tests/scoring/sacrebleu_test.cpp holds them against the package itself).
#include <gtest/gtest.h>

#include <cmath>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/text.h"
#include "fairseq_cpp/scoring/fairseq_bleu.h"
#include "fairseq_cpp/scoring/scorer.h"
#include "fairseq_cpp/scoring/tokenizers.h"
#include "fairseq_cpp/scoring/unicode.h"

namespace fairseq_cpp::scoring {
namespace {

// The scorer of `metric` after adding (hyps[i], refs[i]).
std::unique_ptr<Scorer> scored(const std::string& metric, const std::vector<std::string>& hyps,
                               const std::vector<std::vector<std::string>>& refs, const ScoringOptions& o = {}) {
  auto s = make_scorer(metric, o);
  for (size_t i = 0; i < hyps.size(); ++i) s->add(hyps[i], refs[i]);
  return s;
}

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
  auto s = scored("bleu", {"the cat sat on the mat"}, {{"the cat is on the mat"}});
  EXPECT_EQ(s->statistics(), (std::vector<double>{6, 6, 5, 3, 1, 0, 6, 5, 4, 3}));
  const double expected = std::pow(100.0 * 5 / 6 * 60 * 25 * (100.0 / 6), 0.25);
  EXPECT_NEAR(s->score().score, expected, 1e-9);
  EXPECT_EQ(s->format(s->score()),
            "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.5.1 = 37.99 83.3/60.0/25.0/16.7 "
            "(BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)");
}

TEST(SacreBleu, BrevityPenaltyAndNoMatches) {
  // 2 hypothesis tokens vs 4 reference tokens: BP = exp(1 - 4/2).
  auto s = scored("bleu", {"a b"}, {{"a b c d"}});
  EXPECT_EQ(s->statistics(), (std::vector<double>{2, 4, 2, 1, 0, 0, 2, 1, 0, 0}));
  EXPECT_NE(s->format(s->score()).find("(BP = 0.368 ratio = 0.500"), std::string::npos);
  // total 0 at n = 3 stops the precisions there; log(0) is floored: the score is ~0.
  EXPECT_LT(s->score().score, 1e-100);
  auto none = scored("bleu", {"x y"}, {{"a b"}});
  EXPECT_EQ(none->score().score, 0.0);
  EXPECT_EQ(none->score().verbose.rfind("0.0/0.0/0.0/0.0 ", 0), 0u) << none->score().verbose;
}

TEST(SacreBleu, SeveralReferencesClipByTheLargestCountAndTakeTheClosestLength) {
  // "a a a b" against "a b" and "a a c d e": 1-gram clips a at 2 (second reference), b at 1;
  // lengths 2 and 5 are 2 and 1 away from 4: the reference length is 5.
  auto s = scored("bleu", {"a a a b"}, {{"a b", "a a c d e"}});
  EXPECT_EQ(s->statistics()[0], 4);
  EXPECT_EQ(s->statistics()[1], 5);
  EXPECT_EQ(s->statistics()[2], 3);  // 1-grams matched: a x2 + b
  EXPECT_EQ(s->statistics()[3], 2);  // 2-grams: "a a" (second), "a b" (first); "a a" twice in hyp, once in ref
  EXPECT_NE(s->signature().find("nrefs:2|"), std::string::npos);
  // A tie in distance takes the shorter reference: 3 tokens vs 2 and 4.
  auto tie = scored("bleu", {"x y z"}, {{"x y", "x y z w"}});
  EXPECT_EQ(tie->statistics()[1], 2);
}

TEST(SacreBleu, SmoothingAndSignatures) {
  ScoringOptions o;
  o.smooth_method = "floor";
  auto floor = scored("bleu", {"the cat sat on the mat"}, {{"the cat is on the mat"}}, o);
  // 4-grams 0/3 -> 100 * 0.1 / 3.
  const double expected = std::pow(100.0 * 5 / 6 * 60 * 25 * (10.0 / 3), 0.25);
  EXPECT_NEAR(floor->score().score, expected, 1e-9);
  EXPECT_EQ(floor->signature(), "nrefs:1|case:mixed|eff:no|tok:13a|smooth:floor[0.10]|version:2.5.1");
  o.smooth_method = "add-k";
  o.smooth_value = 2;
  auto addk = scored("bleu", {"the cat sat on the mat"}, {{"the cat is on the mat"}}, o);
  // add-k adds k to the matches and totals of orders 2..4: 5/6, 5/7, 3/6, 2/5.
  EXPECT_NEAR(addk->score().score, 100 * std::pow(5.0 / 6 * 5.0 / 7 * 3.0 / 6 * 2.0 / 5, 0.25), 1e-9);
  EXPECT_EQ(addk->signature(), "nrefs:1|case:mixed|eff:no|tok:13a|smooth:add-k[2.00]|version:2.5.1");
  o = ScoringOptions{};
  o.tokenize = "char";
  o.lowercase = true;
  EXPECT_EQ(scored("bleu", {"a"}, {{"a"}}, o)->signature(), "nrefs:1|case:lc|eff:no|tok:char|smooth:exp|version:2.5.1");
}

TEST(Tokenizers, IntlZhCharNone) {
  auto tok = [](Tokenizer t, const std::string& s) { return unicode::encode(tokenize(t, unicode::decode(s))); };
  // intl: punctuation apart unless between digits, symbols always apart.
  EXPECT_EQ(tok(Tokenizer::intl, "Grüße, 1,000.5 ¿qué? 10€"), "Grüße , 1,000.5 ¿ qué ? 10 €");
  // zh: every Chinese character apart, then 13a's rules.
  EXPECT_EQ(tok(Tokenizer::zh, " 我爱你。Hello, world "), "我 爱 你 。 Hello , world");
  EXPECT_EQ(tok(Tokenizer::char_level, "ab c"), "a b   c");
  EXPECT_EQ(tok(Tokenizer::none, " a,b "), " a,b ");
  EXPECT_THROW(tokenizer_from_name("13b"), UserError);
}

TEST(Unicode, LowerAndClassesArePythons) {
  // İ lowers to i + combining dot; Σ to final sigma at a word's end (case-ignorable ' skipped).
  EXPECT_EQ(unicode::encode(unicode::lower(unicode::decode("ÄÖÜ İ ΣΑ ΑΣ ΑΣ' Σ"))), "äöü i\xCC\x87 σα ας ας' σ");
  EXPECT_TRUE(unicode::is_punctuation(U'¿'));
  EXPECT_TRUE(unicode::is_symbol(U'€'));
  EXPECT_TRUE(unicode::is_number(U'٣'));
  EXPECT_FALSE(unicode::is_punctuation(U'a'));
}

TEST(SacreBleu, ChrfHandCounted) {
  auto chrf = [](const std::string& h, const std::string& r) { return scored("chrf", {h}, {{r}}); };
  EXPECT_NEAR(chrf("ab", "ab")->score().score, 100.0, 1e-9);
  // "abc" vs "abd": orders 1..3 count (2/3, 1/2, 0/1 for precision and recall alike), orders 4..6
  // have no n-grams: F2 of the averages = 100 * (2/3 + 1/2 + 0) / 3.
  auto c = chrf("abc", "abd");
  EXPECT_NEAR(c->score().score, 100.0 * (2.0 / 3 + 0.5) / 3, 1e-9);
  EXPECT_EQ(c->format(c->score()), "chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.5.1 = 38.89");
  // Whitespace is removed before counting: "a bc" is "abc"; characters, not bytes: "ü" is one.
  EXPECT_NEAR(chrf("a bc", "abc")->score().score, 100.0, 1e-9);
  auto u = chrf("ü", "ü");
  EXPECT_EQ(u->statistics()[0], 1);
  EXPECT_EQ(u->statistics()[3], 0);  // no 2-grams
}

TEST(SacreBleu, ChrfPlusPlusAddsWordOrdersAndPicksTheBestReference) {
  // chrF++ on "a b." vs "a b .": words a, b, . both sides (the trailing period split off).
  auto pp = scored("chrf++", {"a b."}, {{"a b ."}});
  EXPECT_EQ(pp->statistics().size(), 3u * 8);
  EXPECT_NEAR(pp->score().score, 100.0, 1e-9);
  EXPECT_EQ(pp->score().name, "chrF2++");
  EXPECT_EQ(pp->signature(), "nrefs:1|case:mixed|eff:yes|nc:6|nw:2|space:no|version:2.5.1");
  // Of two references, the one with the better sentence F-score gives the statistics.
  auto two = scored("chrf", {"abc"}, {{"xyz", "abc"}});
  EXPECT_NEAR(two->score().score, 100.0, 1e-9);
}

TEST(SacreBleu, TerCountsShiftsAndEditsHandCounted) {
  // "a b c d" -> "c d a b": one shift of the block "a b" (or "c d"), no other edit: 1 / 4.
  auto shift = scored("ter", {"a b c d"}, {{"c d a b"}});
  EXPECT_EQ(shift->statistics(), (std::vector<double>{1, 4}));
  EXPECT_EQ(shift->format(shift->score()), "TER|nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:2.5.1 = 25.00");
  // "the cat sat" -> "the dog sat on": a substitution and an insertion: 2 / 4.
  EXPECT_EQ(scored("ter", {"the cat sat"}, {{"the dog sat on"}})->statistics(), (std::vector<double>{2, 4}));
  // Lowercased by default; an empty reference with words left is 100.
  EXPECT_EQ(scored("ter", {"A B"}, {{"a b"}})->score().score, 0.0);
  ScoringOptions cased;
  cased.ter_case_sensitive = true;
  EXPECT_EQ(scored("ter", {"A B"}, {{"a b"}}, cased)->score().score, 100.0);
  EXPECT_EQ(scored("ter", {"x"}, {{""}})->score().score, 100.0);
  // With two references: the fewest edits, and the average reference length.
  EXPECT_EQ(scored("ter", {"a b"}, {{"a b", "a b c d"}})->statistics(), (std::vector<double>{0, 3}));
}

TEST(Scorer, MergedStatisticsScoreAsOneCorpus) {
  auto whole = scored("bleu", {"a b c d", "e f g"}, {{"a b c x"}, {"e f g"}});
  auto first = scored("bleu", {"a b c d"}, {{"a b c x"}});
  auto second = scored("bleu", {"e f g"}, {{"e f g"}});
  first->merge(second->statistics());
  EXPECT_EQ(first->statistics(), whole->statistics());
  EXPECT_EQ(first->score().score, whole->score().score);
  EXPECT_THROW(first->merge({1, 2}), UserError);
  EXPECT_THROW(make_scorer("ter2", {}), UserError);
}

TEST(SacreBleu, RstripRemovesUnicodeWhitespace) {
  EXPECT_EQ(data::rstrip("ab \t\xE3\x80\x80"), "ab");  // U+3000 ideographic space
  EXPECT_EQ(data::rstrip("ab\xC3\xBC"), "ab\xC3\xBC");
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

}  // namespace
}  // namespace fairseq_cpp::scoring
