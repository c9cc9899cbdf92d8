// The Moses detokenizer on lines small enough to follow its rules by hand (tests/scoring/
// sacremoses_test.cpp holds it against the sacremoses package itself).
#include <gtest/gtest.h>

#include "fairseq_cpp/scoring/detokenizer.h"

namespace fairseq_cpp::scoring {
namespace {

TEST(MosesDetokenize, EmptyAndBlankLines) {
  EXPECT_EQ(moses_detokenize("", "en"), "");
  EXPECT_EQ(moses_detokenize("   ", "en"), "");
  // Any whitespace separates tokens (str.split), and one space joins them.
  EXPECT_EQ(moses_detokenize(" a  b\u3000c\t", "en"), "a b c");
}

TEST(MosesDetokenize, PunctuationAttachesToThePreviousToken) {
  EXPECT_EQ(moses_detokenize("Hello , world !", "en"), "Hello, world!");
  EXPECT_EQ(moses_detokenize("Quoi ? 100 % ! ... ?!", "en"), "Quoi? 100%!...?!");
  EXPECT_EQ(moses_detokenize("( a ) [ b ] { c } .", "en"), "(a) [b] {c}.");
  EXPECT_EQ(moses_detokenize("¿ qué ? ¡ sí !", "es"), "¿qué? ¡sí!");
}

TEST(MosesDetokenize, CurrencyAttachesToTheNextToken) {
  EXPECT_EQ(moses_detokenize("$ 5 and € 4 , £ 3", "en"), "$5 and €4, £3");
  // U+20BE (lari) is newer than the Perl tables sacremoses ships, so it is not currency there.
  EXPECT_EQ(moses_detokenize("\u20be 5", "en"), "\u20be 5");
}

TEST(MosesDetokenize, UnescapesMosesXmlEntities) {
  EXPECT_EQ(moses_detokenize("a &amp; b &lt; c &gt; d &#124; e &#91; f &#93; g &bar; h &bra; i &ket; j", "en"),
            "a & b < c > d | e [f] g | h [i] j");
  // &amp; is undone last and once: what it leaves stays escaped.
  EXPECT_EQ(moses_detokenize("&amp;lt; &amp;amp;", "en"), "&lt; &amp;");
  EXPECT_EQ(moses_detokenize("&quot; Hi &quot; , &apos; Bye &apos;", "en"), "\"Hi\", 'Bye'");
}

TEST(MosesDetokenize, JoinsAggressiveHyphenSplits) {
  EXPECT_EQ(moses_detokenize("state @-@ of @-@ the @-@ art", "en"), "state-of-the-art");
  // " @-@ " matches without overlapping: the second loses its leading space to the first.
  EXPECT_EQ(moses_detokenize("a @-@ @-@ b", "en"), "a-@-@ b");
}

TEST(MosesDetokenize, QuotesAlternateBetweenOpeningAndClosing) {
  EXPECT_EQ(moses_detokenize("\" a \" b \" c \"", "en"), "\"a\" b \"c\"");
  // Each quote token counts apart: `` opens, '' opens, '' closes.
  EXPECT_EQ(moses_detokenize("`` a '' b ''", "en"), "``a ''b''");
  EXPECT_EQ(moses_detokenize("' ' ' '", "en"), "'' ''");
  // „ and “ count as one kind of quote.
  EXPECT_EQ(moses_detokenize("„ Hallo “ , sagte er .", "de"), "„Hallo“, sagte er.");
}

TEST(MosesDetokenize, EnglishContractionsAndPossessives) {
  EXPECT_EQ(moses_detokenize("don 't", "en"), "don't");
  EXPECT_EQ(moses_detokenize("it &apos;s", "en"), "it's");
  EXPECT_EQ(moses_detokenize("the Jones ' house", "en"), "the Jones' house");
  // Only English: in German 't is an ordinary token and ' opens a quote.
  EXPECT_EQ(moses_detokenize("don 't", "de"), "don 't");
  EXPECT_EQ(moses_detokenize("Das ist 's", "de"), "Das ist 's");
  EXPECT_EQ(moses_detokenize("the Jones ' house", "de"), "the Jones 'house");
}

TEST(MosesDetokenize, FrenchItalianIrishElisionsAndFrenchSpacing) {
  EXPECT_EQ(moses_detokenize("l' homme", "fr"), "l'homme");
  EXPECT_EQ(moses_detokenize("dell' anno", "it"), "dell'anno");
  EXPECT_EQ(moses_detokenize("d' fhág", "ga"), "d'fhág");
  EXPECT_EQ(moses_detokenize("l' homme", "en"), "l' homme");
  EXPECT_EQ(moses_detokenize("l' 5", "fr"), "l' 5");  // not before a letter
  // French keeps a space before ? ! : ; % (one character alone), not before , or .
  EXPECT_EQ(moses_detokenize("Quoi ? 100 % ! Oui , non .", "fr"), "Quoi ? 100 % ! Oui, non.");
}

TEST(MosesDetokenize, CzechQuotesHyphensAndDecimals) {
  EXPECT_EQ(moses_detokenize("„ Ahoj “ řekl", "cs"), "„Ahoj“ řekl");
  // In Czech “ always closes.
  EXPECT_EQ(moses_detokenize("“ a “", "cs"), "“ a“");
  EXPECT_EQ(moses_detokenize("“ a “", "en"), "“a“");
  // "-li" after a word ending in an apostrophe joins it (sacremoses raises there; this is Perl's rule).
  EXPECT_EQ(moses_detokenize("a x' - li b", "cs"), "a x'-li b");
  EXPECT_EQ(moses_detokenize("x' – Mailem", "cs"), "x'–Mailem");
  EXPECT_EQ(moses_detokenize("je - li", "cs"), "je - li");
  // Numbers join the text before them when the line's last two tokens are a number and , or .
  EXPECT_EQ(moses_detokenize("3 , 5 a 1 ,", "cs"), "3,5 a1,");
  EXPECT_EQ(moses_detokenize("3 , 5 a 1", "cs"), "3, 5 a 1");
  EXPECT_EQ(moses_detokenize("3 , 5 a 1 ,", "en"), "3, 5 a 1,");
}

TEST(MosesDetokenize, CjkWordsJoinExceptInKorean) {
  EXPECT_EQ(moses_detokenize("猫 猫 , 日本 a 語", "zh"), "猫猫, 日本 a 語");
  EXPECT_EQ(moses_detokenize("한국 한국", "en"), "한국한국");
  EXPECT_EQ(moses_detokenize("한국 한국", "ko"), "한국 한국");
}

}  // namespace
}  // namespace fairseq_cpp::scoring
