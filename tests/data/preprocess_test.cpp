// fairseq-cpp-preprocess end to end: byte-for-byte equal to fairseq v0.9's data-bin, separate
// dictionaries, SentencePiece training, and every bad input with its exit code and message.
#include <gtest/gtest.h>

#include <filesystem>

#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/data/indexed_dataset.h"
#include "tests/data/data_test_util.h"

namespace fairseq_cpp {
namespace {

namespace fs = std::filesystem;
using testing::program;
using testing::read_file;
using testing::run;
using testing::TempDir;

const char* kSplits[][2] = {{"train", "train"}, {"val", "valid"}, {"test_2016_flickr", "test"}};

// The raw Multi30k text, decompressed into `dir`/raw/<split>.<lang>.
void decompress(const std::string& dir) {
  fs::create_directories(dir + "/raw");
  for (auto& split : kSplits)
    for (std::string lang : {"en", "de"}) {
      std::string name = std::string(split[0]) + "." + lang;
      auto r =
          run({"/bin/sh", "-c", "gzip -dc " + testing::multi30k_dir() + "/" + name + ".gz > " + dir + "/raw/" + name});
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
}

void expect_fixture_bytes(const std::string& destdir) {
  std::string fixture = testing::fixture_dir() + "/data-bin";
  int compared = 0;
  for (auto& entry : fs::directory_iterator(fixture)) {
    std::string name = entry.path().filename().string();
    ASSERT_TRUE(fs::exists(destdir + "/" + name)) << name << " not written";
    EXPECT_TRUE(read_file(entry.path().string()) == read_file(destdir + "/" + name)) << name << " differs";
    ++compared;
  }
  EXPECT_EQ(compared, 14);
}

TEST(Preprocess, ReproducesFairseqDataBinByteForByte) {
  TempDir dir;
  decompress(dir.path());
  std::string model = testing::fixture_dir() + "/spm8k.model";
  // Our route: raw text in, --spm-model.
  auto r = run({program("fairseq-cpp-preprocess"), "--source-lang", "en", "--target-lang", "de", "--trainpref",
                dir.path() + "/raw/train", "--validpref", dir.path() + "/raw/val", "--testpref",
                dir.path() + "/raw/test_2016_flickr", "--destdir", dir.path() + "/ours", "--joined-dictionary",
                "--workers", "2", "--spm-model", model});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_fixture_bytes(dir.path() + "/ours");
  EXPECT_EQ(read_file(dir.path() + "/ours/spm.model"), read_file(model));  // recorded for detokenizing
  EXPECT_NE(r.err.find("train.en: 29000 sents, 453751 tokens, 0% replaced by <unk>"), std::string::npos) << r.err;

  // fairseq's route: spm_encode's piece files in, one worker.
  fs::create_directories(dir.path() + "/spm");
  for (auto& split : kSplits)
    for (std::string lang : {"en", "de"}) {
      std::string name = std::string(split[0]) + "." + lang;
      auto e = run({"/bin/sh", "-c",
                    "spm_encode --model=" + model + " --output_format=piece < " + dir.path() + "/raw/" + name + " > " +
                        dir.path() + "/spm/" + name});
      ASSERT_EQ(e.exit_code, 0) << "spm_encode (Debian package sentencepiece) is needed: " << e.err;
    }
  auto p = run({program("fairseq-cpp-preprocess"), "--source-lang", "en", "--target-lang", "de", "--trainpref",
                dir.path() + "/spm/train", "--validpref", dir.path() + "/spm/val", "--testpref",
                dir.path() + "/spm/test_2016_flickr", "--destdir", dir.path() + "/pieces", "--joined-dictionary"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  expect_fixture_bytes(dir.path() + "/pieces");
}

TEST(Preprocess, SeparateDictionariesWithThresholdAndNwords) {
  TempDir dir;
  // Source counts: a 4, b 3, c 2, d 1 (and 4 </s>); target: x 3, y 2, z 2, w 1.
  dir.write("train.src", "a b c\na b  d\n a\tc\na b\n");
  dir.write("train.tgt", "x y\nx z\nx y z\nw\n");
  dir.write("valid.src", "a e\n");
  dir.write("valid.tgt", "y q q\n");
  auto r = run({program("fairseq-cpp-preprocess"), "--source-lang", "src", "--target-lang", "tgt", "--trainpref",
                dir.path() + "/train", "--validpref", dir.path() + "/valid", "--destdir", dir.path() + "/bin",
                "--thresholdsrc", "2", "--nwordstgt", "6", "--padding-factor", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // src: threshold 2 drops d; 4 specials + a b c = 7 -> padded to 8.
  EXPECT_EQ(read_file(dir.path() + "/bin/dict.src.txt"), "a 4\nb 3\nc 2\nmadeupword0000 0\n");
  // tgt: nwords 6 = 4 specials + x, then y (ties y/z in code-point order) = 6 -> padded to 8.
  EXPECT_EQ(read_file(dir.path() + "/bin/dict.tgt.txt"), "x 3\ny 2\nmadeupword0000 0\nmadeupword0001 0\n");
  data::IndexedDataset train_src(dir.path() + "/bin/train.src-tgt.src");
  ASSERT_EQ(train_src.size(), 4u);
  EXPECT_EQ(train_src.tokens(1), (std::vector<int64_t>{4, 5, 3, 2}));  // d -> <unk>
  data::IndexedDataset valid_tgt(dir.path() + "/bin/valid.src-tgt.tgt");
  EXPECT_EQ(valid_tgt.tokens(0), (std::vector<int64_t>{5, 3, 3, 2}));
  EXPECT_EQ(valid_tgt.dtype(), data::DType::uint16);
  EXPECT_NE(r.err.find("valid.tgt: 1 sents, 4 tokens, 50% replaced by <unk>"), std::string::npos) << r.err;
}

TEST(Preprocess, TrainsSentencePieceAndRecordsTheModel) {
  TempDir dir;
  decompress(dir.path());
  auto r = run({program("fairseq-cpp-preprocess"), "--source-lang", "en", "--target-lang", "de", "--trainpref",
                dir.path() + "/raw/val", "--destdir", dir.path() + "/bin", "--joined-dictionary", "--spm-vocab-size",
                "300", "--spm-model-type", "bpe"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(dir.path() + "/bin/spm.model"));
  ASSERT_TRUE(fs::exists(dir.path() + "/bin/spm.vocab"));
  auto dict = data::Dictionary::load(dir.path() + "/bin/dict.en.txt");
  EXPECT_LE(dict.size(), 4 + 300 + 8);
  EXPECT_GT(dict.size(), 100);
  // The data-bin holds what spm_encode gives with the trained model.
  auto pieces = run({"/bin/sh", "-c",
                     "spm_encode --model=" + dir.path() + "/bin/spm.model --output_format=piece < " + dir.path() +
                         "/raw/val.en | head -1"});
  data::IndexedDataset ds(dir.path() + "/bin/train.en-de.en");
  std::string decoded;
  for (int64_t id : ds.tokens(0))
    if (id != 2) decoded += (decoded.empty() ? "" : " ") + dict.symbol(id);
  EXPECT_EQ(decoded + "\n", pieces.out);
}

// --spm-input-sentence-size: SentencePiece trains on a seeded sample of the sentences, the same
// sample each time, as spm_train does with the same flags (its vocabulary, piece by piece).
TEST(Preprocess, TrainsSentencePieceOnASeededSampleAsSpmTrainDoes) {
  TempDir dir;
  decompress(dir.path());
  auto preprocess = [&](const std::string& dest, const std::string& sample) {
    auto r = run({program("fairseq-cpp-preprocess"), "--source-lang", "en", "--target-lang", "de", "--trainpref",
                  dir.path() + "/raw/val", "--destdir", dir.path() + "/" + dest, "--joined-dictionary",
                  "--spm-vocab-size", "300", "--spm-model-type", "bpe", "--spm-input-sentence-size", sample});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  };
  preprocess("a", "500");
  preprocess("b", "500");
  preprocess("all", "0");
  const std::string a = read_file(dir.path() + "/a/spm.vocab");
  EXPECT_EQ(a, read_file(dir.path() + "/b/spm.vocab"));
  EXPECT_NE(a, read_file(dir.path() + "/all/spm.vocab")) << "the sample changed nothing";
  auto r = run({"/bin/sh", "-c",
                "spm_train --input=" + dir.path() + "/raw/val.en," + dir.path() + "/raw/val.de --model_prefix=" +
                    dir.path() + "/ref --vocab_size=300 --model_type=bpe --character_coverage=1.0 "
                    "--input_sentence_size=500 --shuffle_input_sentence=true --random_seed=1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(a, read_file(dir.path() + "/ref.vocab"));
}

struct BadInput {
  const char* name;
  std::vector<std::pair<std::string, std::string>> files;  // name -> content
  std::vector<std::string> extra;                          // extra flags ({dir} replaced)
  std::string expected;                                    // stderr, {dir} replaced
};

void PrintTo(const BadInput& c, std::ostream* os) { *os << c.name; }

class PreprocessBadInput : public ::testing::TestWithParam<BadInput> {};

std::string fill(std::string s, const std::string& dir) {
  for (size_t at; (at = s.find("{dir}")) != std::string::npos;) s.replace(at, 5, dir);
  return s;
}

TEST_P(PreprocessBadInput, ExitsTwoWithOneLineAndWritesNothing) {
  TempDir dir;
  for (auto& [name, content] : GetParam().files) dir.write(name, content);
  std::vector<std::string> argv = {program("fairseq-cpp-preprocess"),
                                   "--source-lang",
                                   "en",
                                   "--target-lang",
                                   "de",
                                   "--trainpref",
                                   dir.path() + "/train",
                                   "--destdir",
                                   dir.path() + "/out"};
  for (auto& e : GetParam().extra) argv.push_back(fill(e, dir.path()));
  auto r = run(argv);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err, "fairseq-cpp-preprocess: error: " + fill(GetParam().expected, dir.path()) + "\n");
  EXPECT_FALSE(fs::exists(dir.path() + "/out") && !fs::is_empty(dir.path() + "/out")) << "something was written";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PreprocessBadInput,
    ::testing::Values(
        BadInput{"line_counts",
                 {{"train.en", "a\nb\nc\n"}, {"train.de", "x\ny\n"}},
                 {},
                 "{dir}/train.en:3: no counterpart in {dir}/train.de, which has 2 lines ({dir}/train.en has 3); "
                 "expected parallel files with one sentence per line"},
        BadInput{"missing_file", {{"train.en", "a\n"}}, {}, "cannot read {dir}/train.de: No such file or directory"},
        BadInput{"invalid_utf8",
                 {{"train.en", "a\n"}, {"train.de", "ok\nbad \xe4 word\n"}},
                 {},
                 "{dir}/train.de:2: invalid UTF-8 at byte 5 of the line (found byte 0xe4); expected UTF-8 text"},
        BadInput{"dictionary_without_count",
                 {{"train.en", "a\n"}, {"train.de", "b\n"}, {"dict.txt", "a 3\nb\n"}},
                 {"--srcdict", "{dir}/dict.txt"},
                 "{dir}/dict.txt:2: expected '<token> <count> [#fairseq:overwrite]', found \"b\""},
        BadInput{"valid_line_counts",
                 {{"train.en", "a\n"}, {"train.de", "b\n"}, {"v.en", "a\n"}, {"v.de", "b\nc\n"}},
                 {"--validpref", "{dir}/v"},
                 "{dir}/v.de:2: no counterpart in {dir}/v.en, which has 1 lines ({dir}/v.de has 2); expected "
                 "parallel files with one sentence per line"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fairseq_cpp
