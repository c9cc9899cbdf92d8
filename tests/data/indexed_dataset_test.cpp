// The mmap data-bin format: exact bytes, every dtype, fairseq's fixture, and broken files.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <fstream>
#include <optional>
#include <utility>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/indexed_dataset.h"
#include "fairseq_cpp/data/language_pair_dataset.h"
#include "tests/data/data_test_util.h"

namespace fairseq_cpp::data {
namespace {

using testing::TempDir;

std::string bytes_of(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

TEST(IndexedDataset, WritesFairseqHeaderBytes) {
  TempDir dir;
  IndexedDatasetBuilder b(dir.path() + "/x", DType::uint16);
  std::vector<int64_t> s0 = {5, 6, 2}, s1 = {7, 2};
  b.add_item(s0.data(), s0.size());
  b.add_item(s1.data(), s1.size());
  b.finalize();
  // By hand: magic, version 1 (u64), dtype 8 (u8), N = 2 (u64), sizes {3, 2} (i32), pointers {0, 6} (i64).
  std::vector<uint8_t> idx = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 8, 2, 0, 0, 0, 0, 0, 0,
                              0,   3,   0,   0,   0,   2,   0,   0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(testing::read_file(dir.path() + "/x.idx"), bytes_of(idx));
  EXPECT_EQ(testing::read_file(dir.path() + "/x.bin"), bytes_of({5, 0, 6, 0, 2, 0, 7, 0, 2, 0}));
}

TEST(IndexedDataset, ReadsEveryDtypeCode) {
  for (int code = 1; code <= 10; ++code) {
    TempDir dir;
    auto dtype = static_cast<DType>(code);
    IndexedDatasetBuilder b(dir.path() + "/d", dtype);
    std::vector<int64_t> a = {1, 100, 2}, c = {}, e = {120, 3};
    b.add_item(a.data(), a.size());
    b.add_item(c.data(), c.size());
    b.add_item(e.data(), e.size());
    b.finalize();
    IndexedDataset ds(dir.path() + "/d");
    ASSERT_EQ(ds.size(), 3u) << code;
    EXPECT_EQ(ds.dtype(), dtype);
    EXPECT_EQ(ds.tokens(0), a) << dtype_name(dtype);
    EXPECT_EQ(ds.tokens(1), c) << dtype_name(dtype);
    EXPECT_EQ(ds.tokens(2), e) << dtype_name(dtype);
    EXPECT_EQ(ds.pointer(2), static_cast<int64_t>(3 * dtype_size(static_cast<uint8_t>(code))));
    EXPECT_EQ(ds.max_value(), 120);
  }
}

TEST(IndexedDataset, BestFittingDtypeAsFairseq) {
  EXPECT_EQ(best_fitting_dtype(65499), DType::uint16);
  EXPECT_EQ(best_fitting_dtype(65500), DType::int32);
}

// Independent reader: Python's struct on the raw files.
TEST(IndexedDataset, ReadsFairseqFixtureAsPythonDoes) {
  std::string bin = testing::fixture_dir() + "/data-bin";
  for (std::string split : {"train", "valid", "test"}) {
    for (std::string lang : {"en", "de"}) {
      std::string prefix = bin + "/" + split + ".en-de." + lang;
      IndexedDataset ds(prefix);
      EXPECT_EQ(ds.dtype(), DType::uint16);
      int64_t total = 0, sum = 0;
      for (size_t i = 0; i < ds.size(); ++i) {
        for (int64_t v : ds.tokens(i)) sum += v;
        total += ds.length(i);
        ASSERT_EQ(ds.tokens(i).back(), 2) << "sentence " << i << " does not end in </s>";
      }
      auto last = ds.tokens(ds.size() - 1);
      std::string mine = std::to_string(ds.size()) + " " + std::to_string(total) + " " + std::to_string(sum) + " " +
                         std::to_string(last[0]) + "\n";
      std::string script =
          "import struct\n"
          "idx=open('" +
          prefix + ".idx','rb').read(); b=open('" + prefix +
          ".bin','rb').read()\n"
          "n=struct.unpack('<Q',idx[18:26])[0]\n"
          "sizes=struct.unpack('<%di'%n, idx[26:26+4*n]); ptrs=struct.unpack('<%dq'%n, idx[26+4*n:26+12*n])\n"
          "ids=struct.unpack('<%dH'%(len(b)//2), b)\n"
          "print(n, sum(sizes), sum(ids), ids[ptrs[-1]//2])\n";
      EXPECT_EQ(mine, testing::python(script)) << prefix;
      if (split == "train") {
        EXPECT_EQ(total, lang == "en" ? 453751 : 469765);  // the fixture README's counts
      }
    }
  }
}

struct Corruption {
  const char* name;
  std::function<void(std::string& idx)> edit;
  std::string expected;  // message after "<prefix>.idx: "
};

// A uint16 data-bin of the sentences {5, 6, 2} and {7, 2} at `prefix`; returns its .idx bytes.
std::string write_two_sentences(const std::string& prefix) {
  IndexedDatasetBuilder b(prefix, DType::uint16);
  std::vector<int64_t> s0 = {5, 6, 2}, s1 = {7, 2};
  b.add_item(s0.data(), s0.size());
  b.add_item(s1.data(), s1.size());
  b.finalize();
  return testing::read_file(prefix + ".idx");
}

TEST(IndexedDataset, BrokenIndexFilesAreClearErrors) {
  std::vector<Corruption> cases = {
      {"magic", [](std::string& s) { s[0] = 'X'; }, "not a fairseq mmap index: expected magic"},
      {"version", [](std::string& s) { s[9] = 2; }, "field version: expected 1, found 2"},
      {"dtype", [](std::string& s) { s[17] = 11; }, "field dtype: expected a code 1-10, found 11"},
      {"truncated", [](std::string& s) { s.resize(s.size() - 3); }, "truncated index: field N = 2 needs 24 bytes"},
      {"short header", [](std::string& s) { s.resize(20); }, "truncated index: 20 bytes"},
      {"pointer", [](std::string& s) { s[26 + 8 + 8] = 100; }, "entry 1 points past the end of"},
  };
  for (const auto& c : cases) {
    TempDir dir;
    std::string prefix = dir.path() + "/x";
    std::string idx = write_two_sentences(prefix);
    c.edit(idx);
    dir.write("x.idx", idx);
    try {
      IndexedDataset ds(prefix);
      ADD_FAILURE() << c.name << ": no error";
    } catch (const DataError& e) {
      std::string want = prefix + ".idx: " + c.expected;
      EXPECT_EQ(std::string(e.what()).substr(0, want.size()), want) << c.name << ": " << e.what();
    }
  }
}

// Found by fuzz_indexed_dataset (regressions/pointer-near-int64-max): a pointer near 2^63 made the
// error message overflow int64 while it computed where the sentence would end (undefined
// behaviour); the message gives the sentence's byte count and start instead.
TEST(IndexedDataset, APointerNearTheInt64LimitIsADataError) {
  TempDir dir;
  std::string prefix = dir.path() + "/x";
  std::string idx = write_two_sentences(prefix);
  const int64_t huge = std::numeric_limits<int64_t>::max() - 100;
  std::memcpy(&idx[26 + 8 + 8], &huge, sizeof(huge));  // entry 1's pointer (little-endian)
  dir.write("x.idx", idx);
  try {
    IndexedDataset ds(prefix);
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), prefix + ".idx: entry 1 points past the end of " + prefix +
                                         ".bin: 4 bytes at byte 9223372036854775707, but the file has 10 bytes");
  }
}

// Found by fuzz_indexed_dataset: a float64 .bin holding NaN or 1e300 was cast to int64
// (undefined behaviour); it is a DataError naming the file, sentence and element.
TEST(IndexedDataset, Float64ThatIsNoTokenIdIsDataError) {
  TempDir dir;
  IndexedDatasetBuilder b(dir.path() + "/f", DType::float64);
  std::vector<int64_t> a = {4, 5, 2};
  b.add_item(a.data(), a.size());
  b.finalize();
  {
    std::fstream bin(dir.path() + "/f.bin", std::ios::in | std::ios::out | std::ios::binary);
    const double huge = 1e300;
    bin.seekp(8);
    bin.write(reinterpret_cast<const char*>(&huge), sizeof huge);
  }
  IndexedDataset ds(dir.path() + "/f");
  try {
    ds.tokens(0);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), dir.path() +
                                         "/f.bin: sentence 0, element 1: expected a token id, found 1e+300 "
                                         "(float64 data)");
  }
  EXPECT_THROW(ds.max_value(), DataError);
}

TEST(IndexedDataset, MissingFileIsDataError) {
  TempDir dir;
  EXPECT_THROW(IndexedDataset(dir.path() + "/nothing"), DataError);
}

TEST(IndexedDataset, DictionaryTooSmallForTokenIds) {
  std::string bin = testing::fixture_dir() + "/data-bin";
  IndexedDataset ds(bin + "/valid.en-de.en");
  EXPECT_NO_THROW(check_token_ids(ds, 8000, "dict.en.txt"));
  try {
    check_token_ids(ds, 100, "small/dict.en.txt");
    FAIL();
  } catch (const DataError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(bin + "/valid.en-de.en.bin: sentence 0 has token id ", 0), 0u) << msg;
    EXPECT_NE(msg.find("but small/dict.en.txt has 100 symbols (ids 0-99)"), std::string::npos) << msg;
  }
}

TEST(IndexedDataset, TokenIdCheckInOnePassNamesTheFirstBadSentence) {
  // Every dtype: the one-pass range, and check_token_ids naming the first sentence with an id past
  // the dictionary (sentence 1, not sentence 2 with the largest id).
  for (int code = 1; code <= 10; ++code) {
    TempDir dir;
    auto dtype = static_cast<DType>(code);
    IndexedDatasetBuilder b(dir.path() + "/d", dtype);
    std::vector<std::vector<int64_t>> rows = {{4, 5, 2}, {}, {9, 2}, {7, 120, 2}};
    for (auto& r : rows) b.add_item(r.data(), r.size());
    b.finalize();
    IndexedDataset ds(dir.path() + "/d");
    const bool floating = dtype == DType::float64 || dtype == DType::double_;
    EXPECT_EQ(ds.integer_range(), floating ? std::nullopt : std::optional(std::pair<int64_t, int64_t>(2, 120)))
        << dtype_name(dtype);
    EXPECT_NO_THROW(check_token_ids(ds, 121, "dict.txt"));
    try {
      check_token_ids(ds, 9, "dict.txt");
      ADD_FAILURE() << dtype_name(dtype) << ": no error";
    } catch (const DataError& e) {
      EXPECT_EQ(std::string(e.what()), dir.path() +
                                           "/d.bin: sentence 2 has token id 9, but dict.txt has 9 symbols "
                                           "(ids 0-8); the data-bin and its dictionary do not match")
          << dtype_name(dtype);
    }
  }
  // A negative id (int16) and a uint64 past INT64_MAX are no ids either.
  TempDir dir;
  IndexedDatasetBuilder b(dir.path() + "/n", DType::int16);
  std::vector<int64_t> negative = {4, -3, 2};
  b.add_item(negative.data(), negative.size());
  b.finalize();
  IndexedDataset n(dir.path() + "/n");
  EXPECT_EQ(n.integer_range(), std::optional(std::pair<int64_t, int64_t>(-3, 4)));
  EXPECT_THROW(check_token_ids(n, 100, "dict.txt"), DataError);
  IndexedDatasetBuilder u(dir.path() + "/u", DType::uint64);
  std::vector<int64_t> huge = {4, -1, 2};  // stored as 2^64 - 1
  u.add_item(huge.data(), huge.size());
  u.finalize();
  IndexedDataset big(dir.path() + "/u");
  EXPECT_EQ(big.integer_range()->first, -1);
  EXPECT_THROW(check_token_ids(big, 100, "dict.txt"), DataError);
}

TEST(IndexedDataset, TokenIdCheckOfSentencesNotBackToBackReadsOnlyThem) {
  // Sentences {5 2} at byte 4 and {6 2} at byte 0 (out of order), and 999 in bytes 8..9 that no
  // sentence refers to: no one-pass range, and the check reads the sentences alone.
  TempDir dir;
  std::string idx = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 8, 2, 0, 0, 0, 0, 0, 0,
                     0,   2,   0,   0,   0,   2,   0,   0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  dir.write("g.idx", idx);
  dir.write("g.bin", std::string({6, 0, 2, 0, 5, 0, 2, 0, static_cast<char>(999 & 0xff), 999 >> 8}));
  IndexedDataset ds(dir.path() + "/g");
  EXPECT_EQ(ds.tokens(0), (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(ds.integer_range(), std::nullopt);
  EXPECT_NO_THROW(check_token_ids(ds, 7, "dict.txt"));
  EXPECT_THROW(check_token_ids(ds, 6, "dict.txt"), DataError);
}

}  // namespace
}  // namespace fairseq_cpp::data
