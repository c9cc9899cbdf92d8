// SentencePiece through libfsq_spm.so inside a process that also runs LibTorch (LIBTORCH.md, trap 3),
// checked against Debian's spm_encode on Multi30k.
#include <gtest/gtest.h>

#include "tests/support/torch.h"

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/sentencepiece.h"
#include "fairseq_cpp/data/text.h"
#include "tests/data/data_test_util.h"

namespace fairseq_cpp::data {
namespace {

using testing::TempDir;

TEST(SentencePiece, PiecesAndIdsEqualSpmEncodeOnMulti30k) {
  auto t = torch::ones({2, 2}).matmul(torch::ones({2, 2}));  // LibTorch is live in this process
  ASSERT_EQ(t.sum().item<float>(), 8.0f);
  TempDir dir;
  std::string model = testing::fixture_dir() + "/spm8k.model";
  std::string raw = dir.path() + "/val.de";
  ASSERT_EQ(testing::run({"/bin/sh", "-c", "gzip -dc " + testing::multi30k_dir() + "/val.de.gz > " + raw}).exit_code,
            0);
  auto pieces = testing::run({"/bin/sh", "-c", "spm_encode --model=" + model + " --output_format=piece < " + raw});
  auto ids = testing::run({"/bin/sh", "-c", "spm_encode --model=" + model + " --output_format=id < " + raw});
  ASSERT_EQ(pieces.exit_code, 0) << "spm_encode (Debian package sentencepiece) is needed: " << pieces.err;
  ASSERT_EQ(ids.exit_code, 0) << ids.err;

  auto spm = SentencePiece::load(model);
  EXPECT_EQ(spm.vocab_size(), 8000);
  TextFile text = TextFile::read(raw);
  ASSERT_EQ(text.size(), 1014u);
  std::string my_pieces, my_ids;
  for (auto line : text.lines()) {
    my_pieces += spm.encode_pieces(line) + "\n";
    auto v = spm.encode_ids(line);
    for (size_t i = 0; i < v.size(); ++i) my_ids += (i ? " " : "") + std::to_string(v[i]);
    my_ids += "\n";
  }
  EXPECT_EQ(my_pieces, pieces.out);
  EXPECT_EQ(my_ids, ids.out);
  // encode_lines (one buffer per worker) gives the same lines, whatever the number of workers;
  // more workers than lines too.
  for (int workers : {1, 2, 3}) {
    EncodedLines encoded = encode_lines(spm, text.lines(), workers);
    std::string joined;
    for (auto line : encoded.lines) (joined += line) += "\n";
    EXPECT_EQ(joined, pieces.out) << workers << " workers";
    std::vector<std::string_view> two(text.lines().begin(), text.lines().begin() + 2);
    EncodedLines few = encode_lines(spm, two, 5);
    ASSERT_EQ(few.lines.size(), 2u);
    EXPECT_EQ(few.lines[0], spm.encode_pieces(two[0]));
    EXPECT_EQ(few.lines[1], spm.encode_pieces(two[1]));
  }
  EXPECT_TRUE(encode_lines(spm, {}, 2).lines.empty());
  // Decoding needs no model: pieces of every line give back the raw line (Multi30k is normalized text).
  size_t i = 0;
  for (auto line : text.lines()) {
    if (i++ >= 50) break;
    EXPECT_EQ(decode_pieces(spm.encode_pieces(line)), std::string(line));
  }
}

TEST(SentencePiece, DecodePieces) {
  EXPECT_EQ(decode_pieces("\u2581Ein \u2581Mann \u2581l\u00e4uft ."), "Ein Mann l\u00e4uft.");
  EXPECT_EQ(decode_pieces(""), "");
}

TEST(SentencePiece, MissingModelIsUserError) {
  try {
    SentencePiece::load("/nonexistent/m.model");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "cannot read SentencePiece model /nonexistent/m.model: no such file");
  }
}

}  // namespace
}  // namespace fairseq_cpp::data
