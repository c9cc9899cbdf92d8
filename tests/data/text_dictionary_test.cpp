// Text reading, tokenization, fairseq's Dictionary and the binarizer's two passes.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/batching.h"
#include "fairseq_cpp/data/binarizer.h"
#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/data/indexed_dataset.h"
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

// Python's str.isspace code points (fairseq's tokenize_line splits on them).
bool python_isspace(uint32_t c) {
  return (c >= 9 && c <= 13) || (c >= 28 && c <= 32) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// Random lines of code points from `alphabet`, with `lines` lines.
std::vector<std::vector<uint32_t>> random_lines(uint32_t seed, size_t lines, const std::vector<uint32_t>& alphabet) {
  NumpyRandom r(seed);
  std::vector<std::vector<uint32_t>> out(lines);
  for (auto& line : out) {
    line.resize(static_cast<size_t>(r.interval(40)));
    for (auto& c : line) c = alphabet[static_cast<size_t>(r.interval(alphabet.size() - 1))];
  }
  return out;
}

TEST(Text, TokenizeEqualsPythonIsspaceSplitOnRandomLines) {
  // Every whitespace character, near misses (U+2581, U+200B, U+2030, U+1681, U+00A9, U+3001) and
  // letters, in random runs.
  std::vector<uint32_t> alphabet = {'a',    'b',    'Z',    '.',  0x7F,   0xE9,  0x2581,
                                    0x200B, 0x2030, 0x1681, 0xA9, 0x3001, 0x20AC};
  for (uint32_t c = 0; c <= 0x3000; ++c)
    if (python_isspace(c) && c != '\n' && c != '\r') alphabet.push_back(c);
  for (const auto& line : random_lines(3, 3000, alphabet)) {
    std::string text;
    std::vector<std::string> expected;
    std::string word;
    for (uint32_t c : line) {
      text += utf8(c);
      if (python_isspace(c)) {
        if (!word.empty()) expected.push_back(word);
        word.clear();
      } else {
        word += utf8(c);
      }
    }
    if (!word.empty()) expected.push_back(word);
    ASSERT_EQ(tokens(text), expected) << text;
  }
}

TEST(Text, ReadOfAFileOrAPipeGivesTheLinesOfFromString) {
  TempDir dir;
  const std::vector<std::string> contents = {"a\nb\r\nc\rd\n\ne",
                                             "x\n",
                                             "",
                                             "\n\n",
                                             "no newline at the end",
                                             std::string(5000, 'a') +
                                                 "\n\xe2\x96\x81long ascii runs \xc3\xa9 and more ascii text here\r\n" +
                                                 std::string(77, 'b')};
  for (size_t k = 0; k < contents.size(); ++k) {
    const std::string path = dir.write("t" + std::to_string(k), contents[k]);
    const TextFile from_string = TextFile::from_string(contents[k], path);
    const TextFile mapped = TextFile::read(path);
    EXPECT_EQ(mapped.lines(), from_string.lines()) << k;
    EXPECT_EQ(mapped.path(), path);
    // Through a pipe (not mappable): read to the end.
    const std::string fifo = dir.path() + "/fifo" + std::to_string(k);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << contents[k]; });
    const TextFile piped = TextFile::read(fifo);
    writer.join();
    EXPECT_EQ(piped.lines(), from_string.lines()) << k;
  }
  try {
    TextFile::read(dir.path() + "/missing");
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read " + dir.path() + "/missing: No such file or directory");
  }
}

TEST(Text, InvalidUtf8IsReportedAtTheFirstBadLineAndByteAsLineByLine) {
  // Invalid sequences (a lone continuation, a lead byte cut by the line's end, an overlong form, a
  // surrogate) at random places after long valid stretches; the reference checks line by line.
  const std::vector<std::string> bad = {"\x80", "\xe2\x96", "\xc0\xaf", "\xed\xa0\x80", "\xff", "\xf4\x90\x80\x80"};
  NumpyRandom r(8);
  TempDir dir;
  for (int round = 0; round < 200; ++round) {
    std::vector<std::string> lines(1 + r.interval(30));
    for (auto& line : lines) {
      line = std::string(r.interval(40), 'x') + "\xe2\x96\x81" + std::string(r.interval(20), 'y');
    }
    const size_t which = r.interval(lines.size() - 1);
    const size_t at = r.interval(lines[which].size());
    lines[which].insert(at, bad[r.interval(bad.size() - 1)]);
    const std::string terminator = std::vector<std::string>{"\n", "\r\n", "\r"}[r.interval(2)];
    std::string text;
    for (const auto& line : lines) text += line + terminator;
    std::string expected;
    for (size_t i = 0; i < lines.size() && expected.empty(); ++i) {
      size_t b = find_invalid_utf8(lines[i]);
      if (b != std::string_view::npos)
        expected = fmt::format("f:{}: invalid UTF-8 at byte {} of the line (found byte 0x{:02x}); expected UTF-8 text",
                               i + 1, b + 1, static_cast<unsigned>(static_cast<unsigned char>(lines[i][b])));
    }
    ASSERT_FALSE(expected.empty());
    auto error = [](auto&& run) {
      try {
        run();
      } catch (const DataError& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    ASSERT_EQ(error([&] { TextFile::from_string(text, "f"); }), expected) << round;
    const std::string path = dir.write("f", text);
    ASSERT_EQ(error([&] { TextFile::read(path); }), dir.path() + "/" + expected) << round;
  }
}

TEST(Binarizer, CountsAndIdsEqualTokenByTokenDictionaryLookups) {
  // Lines of words, some absent from the dictionary, a literal "<unk>", and Unicode spaces.
  std::vector<std::string> words = {"der",   "Hund",         "\u2581the",           "\u2581dog", "x",
                                    "<unk>", "ungesehen",    "\u2581rare",          "a",         "bb",
                                    "ccc",   "dddddddddddd", "eeeeeeeeeeeeeeeeeeee"};
  NumpyRandom r(21);
  std::vector<std::string> storage(5000);
  for (auto& line : storage) {
    const auto n = r.interval(25);
    for (uint64_t k = 0; k < n; ++k)
      line += (k ? (r.interval(9) == 0 ? "\u3000" : " ") : "") + words[r.interval(words.size() - 1)];
  }
  const std::vector<std::string_view> lines(storage.begin(), storage.end());
  // count_tokens against a plain count.
  std::map<std::string, int64_t> counted;
  for (auto line : lines)
    for (const auto& t : tokens(line)) ++counted[t];
  for (int workers : {1, 2, 3}) {
    Dictionary d;
    count_tokens(lines, d, workers);
    Dictionary expected;
    for (const auto& [word, n] : counted) expected.add_symbol(word, n);
    expected.add_symbol("</s>", static_cast<int64_t>(lines.size()));
    EXPECT_EQ(d.to_text(), expected.to_text()) << workers;
  }
  // binarize against dict.index, token by token.
  Dictionary dict;
  for (const char* w : {"der", "\u2581the", "x", "a", "bb", "dddddddddddd"}) dict.add_symbol(w, 10);
  for (DType dtype : {DType::uint8, DType::uint16, DType::int32, DType::int64, DType::float64}) {
    std::vector<int64_t> ids;
    std::vector<int32_t> sizes;
    std::map<std::string, int64_t> replaced;
    int64_t nunk = 0;
    for (auto line : lines) {
      const auto t = tokens(line);
      for (const auto& w : t) {
        ids.push_back(dict.index(w));
        if (dict.index(w) == dict.unk() && w != "<unk>") {
          ++replaced[w];
          ++nunk;
        }
      }
      ids.push_back(dict.eos());
      sizes.push_back(static_cast<int32_t>(t.size() + 1));
    }
    for (int workers : {1, 2, 3}) {
      Binarized b = binarize(lines, dict, dtype, workers);
      TempDir dir;
      IndexedDatasetBuilder builder(dir.path() + "/b", dtype);
      builder.add_raw(b.data.data(), b.sizes);
      builder.finalize();
      IndexedDataset ds(dir.path() + "/b");
      std::vector<int64_t> read;
      for (size_t i = 0; i < ds.size(); ++i)
        for (int64_t v : ds.tokens(i)) read.push_back(v);
      EXPECT_EQ(read, ids) << dtype_name(dtype) << " " << workers;
      EXPECT_EQ(b.sizes, sizes);
      EXPECT_EQ(b.ntok, static_cast<int64_t>(ids.size()));
      EXPECT_EQ(b.nunk, nunk);
      EXPECT_EQ(b.replaced, replaced);
      EXPECT_EQ(b.data.size(), ids.size() * dtype_size(static_cast<uint8_t>(dtype)));
    }
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
