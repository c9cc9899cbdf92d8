// Text reading, tokenization and fairseq's Dictionary.
#include <gtest/gtest.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/data/text.h"
#include "tests/data/data_test_util.h"

namespace fairseq_cpp::data {
namespace {

using testing::TempDir;

std::vector<std::string> tokens(std::string_view line) {
  std::vector<std::string_view> views;
  tokenize_line(line, views);
  return {views.begin(), views.end()};
}

TEST(Text, TokenizeSplitsOnUnicodeWhitespaceAsPython) {
  EXPECT_EQ(tokens("  a b\t\tc  "), (std::vector<std::string>{"a", "b", "c"}));
  // U+3000, U+00A0, U+2009 and \x1c split; U+2581 (SentencePiece's space) and U+200B do not.
  EXPECT_EQ(tokens("x\u3000y\u00a0z\u2009w\x1cv"), (std::vector<std::string>{"x", "y", "z", "w", "v"}));
  EXPECT_EQ(tokens("\u2581Ein\u200bMann"), (std::vector<std::string>{"\u2581Ein\u200bMann"}));
  EXPECT_TRUE(tokens(" \t ").empty());
}

TEST(Text, LinesSplitLikePythonUniversalNewlines) {
  auto f = TextFile::from_string("a\nb\r\nc\rd\n\ne", "mem");
  std::vector<std::string> lines(f.lines().begin(), f.lines().end());
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "b", "c", "d", "", "e"}));
  EXPECT_EQ(TextFile::from_string("", "mem").size(), 0u);
  EXPECT_EQ(TextFile::from_string("x\n", "mem").size(), 1u);
}

TEST(Text, InvalidUtf8NamesFileLineAndByte) {
  EXPECT_EQ(find_invalid_utf8("ok \xc3\xa9"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("\xc0\xaf"), 0u);          // overlong
  EXPECT_EQ(find_invalid_utf8("ab\xed\xa0\x80"), 2u);    // surrogate
  EXPECT_EQ(find_invalid_utf8("\xf4\x90\x80\x80"), 0u);  // above U+10FFFF
  try {
    TextFile::from_string("fine\nbad \xff here\n", "corpus.en");
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_STREQ(e.what(), "corpus.en:2: invalid UTF-8 at byte 5 of the line (found byte 0xff); expected UTF-8 text");
  }
}

TEST(Dictionary, SpecialsComeFirst) {
  Dictionary d;
  EXPECT_EQ(d.size(), 4);
  EXPECT_EQ(d.index("<s>"), 0);
  EXPECT_EQ(d.index("<pad>"), 1);
  EXPECT_EQ(d.index("</s>"), 2);
  EXPECT_EQ(d.index("<unk>"), 3);
  EXPECT_EQ(d.index("never"), 3);
  EXPECT_EQ(d.symbol(99), "<unk>");
}

TEST(Dictionary, FinalizeSortsByCountThenCodePointAndPads) {
  Dictionary d;
  // Counts: b 3, a 3, \u00e9 3, Z 3, c 5, d 1; </s> counted into the special.
  for (auto [w, n] : std::vector<std::pair<std::string, int>>{
           {"b", 3}, {"a", 3}, {"\u00e9", 3}, {"Z", 3}, {"c", 5}, {"d", 1}, {"</s>", 7}})
    d.add_symbol(w, n);
  d.finalize(-1, -1, 8);
  // 4 specials + 6 symbols = 10 -> padded to 16.
  EXPECT_EQ(d.to_text(),
            "c 5\nZ 3\na 3\nb 3\n\u00e9 3\nd 1\nmadeupword0000 0\nmadeupword0001 0\nmadeupword0002 0\n"
            "madeupword0003 0\nmadeupword0004 0\nmadeupword0005 0\n");
  EXPECT_EQ(d.count(2), 8);  // 1 + 7 occurrences of </s>
  EXPECT_EQ(d.index("Z"), 5);
}

TEST(Dictionary, ThresholdAndNwordsCountTheSpecials) {
  auto make = [] {
    Dictionary d;
    d.add_symbol("x", 4);
    d.add_symbol("y", 2);
    d.add_symbol("z", 1);
    return d;
  };
  Dictionary t = make();
  t.finalize(2, -1, 1);
  EXPECT_EQ(t.to_text(), "x 4\ny 2\n");
  Dictionary n = make();
  n.finalize(-1, 5, 1);  // 4 specials + 1
  EXPECT_EQ(n.to_text(), "x 4\n");
  Dictionary p = make();
  p.finalize(-1, -1, 4);
  EXPECT_EQ(p.size(), 8);
  EXPECT_EQ(p.symbol(7), "madeupword0000");
}

TEST(Dictionary, SaveLoadRoundTripAndOverwriteFlag) {
  TempDir dir;
  Dictionary d;
  d.add_symbol("hello world", 2);  // a space inside a token: split on the last space
  d.add_symbol("b", 5);
  d.finalize(-1, -1, 1);
  d.save(dir.path() + "/dict.txt");
  EXPECT_EQ(testing::read_file(dir.path() + "/dict.txt"), "b 5\nhello world 2\n");
  Dictionary back = Dictionary::load(dir.path() + "/dict.txt");
  EXPECT_EQ(back.size(), 6);
  EXPECT_EQ(back.index("hello world"), 5);
  EXPECT_EQ(back.count(5), 2);

  Dictionary o = Dictionary::load(dir.write("o.txt", "a 1\n<unk> 9 #fairseq:overwrite\n"));
  EXPECT_EQ(o.size(), 6);
  EXPECT_EQ(o.index("<unk>"), 5);
  EXPECT_EQ(o.count(5), 9);
}

TEST(Dictionary, BadLinesNameFileAndLine) {
  TempDir dir;
  std::string no_count = dir.write("d1.txt", "a 1\nlonely\n");
  try {
    Dictionary::load(no_count);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              no_count + ":2: expected '<token> <count> [#fairseq:overwrite]', found \"lonely\"");
  }
  std::string word_count = dir.write("d2.txt", "a many\n");
  EXPECT_THROW(Dictionary::load(word_count), DataError);
  std::string dup = dir.write("d3.txt", "a 1\na 2\n");
  try {
    Dictionary::load(dup);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(dup + ":2: duplicate word 'a'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Dictionary::load(dir.path() + "/missing.txt"), DataError);
}

// Found by fuzz_dictionary: a count past int64 overflowed (undefined behaviour); it is a bad line.
TEST(Dictionary, CountsOutsideInt64AreBadLines) {
  TempDir dir;
  EXPECT_THROW(Dictionary::load(dir.write("d1.txt", "a 9223372036854775808\n")), DataError);
  EXPECT_THROW(Dictionary::load(dir.write("d2.txt", "a -99999999999999999999\n")), DataError);
  Dictionary d = Dictionary::load(dir.write("d3.txt", "a 9223372036854775807\nb -9223372036854775808\n"));
  EXPECT_EQ(d.count(d.index("a")), INT64_MAX);
  EXPECT_EQ(d.count(d.index("b")), INT64_MIN);
}

TEST(Dictionary, LoadsFairseqFixtureDictionary) {
  Dictionary d = Dictionary::load(testing::fixture_dir() + "/data-bin/dict.en.txt");
  EXPECT_EQ(d.size(), 8000);  // specials included, padded to a multiple of 8
  EXPECT_EQ(d.symbol(7998), "madeupword0000");
  EXPECT_EQ(d.symbol(7999), "madeupword0001");
  EXPECT_EQ(d.to_text(), testing::read_file(testing::fixture_dir() + "/data-bin/dict.en.txt"));
}

}  // namespace
}  // namespace fairseq_cpp::data
