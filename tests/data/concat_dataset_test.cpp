// fairseq's ConcatDataset under LanguagePairDataset (train, train1, ... with upsample_primary), and
// the epoch iterator over sharded data (`data: bin1:bin2`): epoch e reads directory (e - 1) mod N.
#include <gtest/gtest.h>

#include "tests/support/torch.h"

#include <filesystem>
#include <fstream>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/concat_dataset.h"
#include "fairseq_cpp/data/epoch_batch_iterator.h"
#include "fairseq_cpp/data/language_pair_dataset.h"
#include "tests/data/data_test_util.h"

namespace fairseq_cpp::data {
namespace {

using testing::TempDir;
using Rows = std::vector<std::vector<int64_t>>;

std::shared_ptr<const IndexedDataset> write_rows(const std::string& prefix, const Rows& rows) {
  IndexedDatasetBuilder b(prefix, DType::uint16);
  for (const auto& r : rows) b.add_item(r.data(), r.size());
  b.finalize();
  return std::make_shared<const IndexedDataset>(prefix);
}

// Two parts: A (3 sentences) and B (2), sources and targets.
struct TwoParts {
  TempDir dir;
  Rows a_src{{4, 5, 2}, {6, 2}, {7, 8, 9, 2}}, a_tgt{{10, 2}, {11, 12, 13, 2}, {14, 2}};
  Rows b_src{{15, 16, 17, 18, 2}, {19, 2}}, b_tgt{{20, 21, 2}, {22, 2}};
  std::shared_ptr<const IndexedDataset> a_s = write_rows(dir.path() + "/a.s", a_src),
                                        a_t = write_rows(dir.path() + "/a.t", a_tgt),
                                        b_s = write_rows(dir.path() + "/b.s", b_src),
                                        b_t = write_rows(dir.path() + "/b.t", b_tgt);
  // The pair dataset of A repeated `ratio` times, then B.
  LanguagePairDataset pair(int64_t ratio) const {
    return LanguagePairDataset(ConcatDataset({a_s, b_s}, {ratio, 1}), ConcatDataset({a_t, b_t}, {ratio, 1}), {});
  }
};

TEST(ConcatDataset, RepeatsThePrimaryAndMapsEveryExampleToItsSentence) {
  TwoParts d;
  ConcatDataset all({d.a_s, d.b_s}, {2, 1});
  ASSERT_EQ(all.size(), 8u);  // 2 x 3 + 2
  EXPECT_EQ(all.lengths(), (std::vector<int64_t>{3, 2, 4, 3, 2, 4, 5, 2}));
  const std::vector<std::pair<size_t, size_t>> where{{0, 0}, {0, 1}, {0, 2}, {0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}};
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all.locate(i), where[i]) << i;
    std::vector<int64_t> row(static_cast<size_t>(all.length(i)));
    all.read(i, row.data());
    EXPECT_EQ(row, where[i].first == 0 ? d.a_src[where[i].second] : d.b_src[where[i].second]) << i;
  }
  // An empty part in between takes no index.
  auto empty = write_rows(d.dir.path() + "/e.s", {});
  ConcatDataset gap({d.a_s, empty, d.b_s}, {1, 1, 1});
  EXPECT_EQ(gap.size(), 5u);
  EXPECT_EQ(gap.locate(3), (std::pair<size_t, size_t>{2, 0}));
  EXPECT_THROW(ConcatDataset({d.a_s, d.b_s}, {0, 1}), UserError);
}

TEST(ConcatDataset, PairSizesAndCollateReachAcrossTheParts) {
  TwoParts d;
  LanguagePairDataset ds = d.pair(2);
  ASSERT_EQ(ds.size(), 8u);
  EXPECT_EQ(ds.src_sizes(), (std::vector<int64_t>{3, 2, 4, 3, 2, 4, 5, 2}));
  EXPECT_EQ(ds.tgt_sizes(), (std::vector<int64_t>{2, 4, 2, 2, 4, 2, 3, 2}));
  // Index 5 is A's sentence 2 again, 6 and 7 are B's; 0 is A's first.
  Batch b = ds.collate({7, 5, 6, 0});
  EXPECT_TRUE(torch::equal(b.id, torch::tensor({6, 5, 0, 7}, torch::kLong)));  // by source length, descending
  EXPECT_TRUE(torch::equal(b.src_lengths, torch::tensor({5, 4, 3, 2}, torch::kLong)));
  EXPECT_TRUE(torch::equal(
      b.src_tokens,
      torch::tensor({{15, 16, 17, 18, 2}, {1, 7, 8, 9, 2}, {1, 1, 4, 5, 2}, {1, 1, 1, 19, 2}}, torch::kLong)));
  EXPECT_TRUE(torch::equal(b.target, torch::tensor({{20, 21, 2}, {14, 2, 1}, {10, 2, 1}, {22, 2, 1}}, torch::kLong)));
  EXPECT_TRUE(torch::equal(b.prev_output_tokens,
                           torch::tensor({{2, 20, 21}, {2, 14, 1}, {2, 10, 1}, {2, 22, 1}}, torch::kLong)));
  EXPECT_EQ(b.ntokens, 3 + 2 + 2 + 2);
  EXPECT_EQ(b.nsentences, 4);
}

TEST(ConcatDataset, BatchesEqualThoseOfTheSameSentencesInOneFile) {
  // fairseq orders, filters and batches the concatenation as one dataset: the batches equal those
  // of a data-bin holding A, A, B in one file (all orders are seeded by the dataset's sizes only).
  TwoParts d;
  Rows src, tgt;
  for (int r = 0; r < 2; ++r) {
    src.insert(src.end(), d.a_src.begin(), d.a_src.end());
    tgt.insert(tgt.end(), d.a_tgt.begin(), d.a_tgt.end());
  }
  src.insert(src.end(), d.b_src.begin(), d.b_src.end());
  tgt.insert(tgt.end(), d.b_tgt.begin(), d.b_tgt.end());
  LanguagePairDataset one(write_rows(d.dir.path() + "/one.s", src), write_rows(d.dir.path() + "/one.t", tgt), {});
  LanguagePairDataset concat = d.pair(2);
  BatchingOptions o;
  o.max_tokens = 10;
  SizeFilterOptions f;
  f.max_source_positions = 4;  // drops B's first sentence from both
  for (uint32_t seed : {1u, 2u, 3u}) {
    for (bool shuffle : {true, false}) {
      auto expected = one.make_batches(seed, shuffle, f, o);
      auto got = concat.make_batches(seed, shuffle, f, o);
      EXPECT_EQ(got, expected) << "seed " << seed << " shuffle " << shuffle;
      for (const auto& batch : got) {
        Batch x = concat.collate(batch), y = one.collate(batch);
        EXPECT_TRUE(torch::equal(x.src_tokens, y.src_tokens));
        EXPECT_TRUE(torch::equal(x.target, y.target));
      }
    }
  }
  size_t kept = 0;
  for (const auto& batch : concat.make_batches(1, true, f, o)) kept += batch.size();
  EXPECT_EQ(kept, 7u);
}

// A data-bin directory with the splits `names`, each of `rows` sentences pairs (src id 4 + k,
// tgt id 10 + k for split k), and dictionaries of 16 symbols.
std::string write_bin(const std::string& dir, const std::vector<std::string>& names, const std::vector<int>& rows) {
  std::filesystem::create_directories(dir);
  for (size_t k = 0; k < names.size(); ++k) {
    Rows src(static_cast<size_t>(rows[k]), std::vector<int64_t>{static_cast<int64_t>(4 + k), 2});
    Rows tgt(static_cast<size_t>(rows[k]), std::vector<int64_t>{static_cast<int64_t>(10 + k), 2});
    write_rows(dir + "/" + names[k] + ".x-y.x", src);
    write_rows(dir + "/" + names[k] + ".x-y.y", tgt);
  }
  for (const char* lang : {"x", "y"}) {
    std::ofstream dict(dir + "/dict." + std::string(lang) + ".txt");
    for (int i = 4; i < 16; ++i) dict << "w" << i << " 1\n";
  }
  return dir;
}

TEST(ConcatDataset, LoadCombinedTakesTrainTrain1UpToTheFirstMissingAndUpsamplesTheFirst) {
  TempDir tmp;
  // train4 is past the gap at train3: not read, as fairseq stops at the first missing split.
  const std::string dir = write_bin(tmp.path() + "/bin", {"train", "train1", "train2", "train4"}, {3, 2, 1, 5});
  Dictionary dict = Dictionary::load(dir + "/dict.x.txt");
  auto ds = LanguagePairDataset::load_combined(dir, "train", "x", "y", dict, dict, 3, {});
  ASSERT_EQ(ds.size(), 3u * 3 + 2 + 1);
  ASSERT_EQ(ds.source().num_parts(), 3u);
  EXPECT_EQ(ds.source().sample_ratio(0), 3);
  EXPECT_EQ(ds.target()->sample_ratio(2), 1);
  std::vector<int64_t> first_tokens;
  for (size_t i = 0; i < ds.size(); ++i)
    first_tokens.push_back(ds.collate({static_cast<int64_t>(i)}).target[0][0].item<int64_t>());
  EXPECT_EQ(first_tokens, (std::vector<int64_t>{10, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 12}));
  // A split alone is used as it is: upsample_primary repeats it only beside others (fairseq).
  auto alone = LanguagePairDataset::load_combined(dir, "train4", "x", "y", dict, dict, 3, {});
  EXPECT_EQ(alone.size(), 5u);
  EXPECT_THROW(LanguagePairDataset::load_combined(dir, "valid", "x", "y", dict, dict, 1, {}), DataError);
}

TEST(ShardedData, SplitPathsAndCheckedDirectories) {
  EXPECT_EQ(split_paths("a"), (std::vector<std::string>{"a"}));
  EXPECT_EQ(split_paths("bin1:bin2:/x/bin3"), (std::vector<std::string>{"bin1", "bin2", "/x/bin3"}));
  EXPECT_EQ(split_paths("bin1::bin2:"), (std::vector<std::string>{"bin1", "bin2"}));
  EXPECT_TRUE(split_paths("").empty());
  EXPECT_EQ(data_shard_of_epoch(1, 3), 0);
  EXPECT_EQ(data_shard_of_epoch(3, 3), 2);
  EXPECT_EQ(data_shard_of_epoch(4, 3), 0);
  EXPECT_EQ(data_shard_of_epoch(5, 1), 0);

  TempDir tmp;
  const std::string a = write_bin(tmp.path() + "/a", {"train"}, {1}), b = write_bin(tmp.path() + "/b", {"train"}, {1});
  EXPECT_NO_THROW(check_data_directories({a, b}, "train", "x", "y"));
  try {
    check_data_directories({a, b}, "train1", "x", "y");
    FAIL() << "a missing split was accepted";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), a + "/train1.x-y.x.idx does not exist; every data directory needs its own train1 "
                                         "split (validation reads the first only)");
  }
  {
    std::ofstream dict(b + "/dict.y.txt");
    for (int i = 4; i < 16; ++i) dict << (i == 9 ? "other" : "w" + std::to_string(i)) << " 1\n";
  }
  try {
    check_data_directories({a, b}, "train", "x", "y");
    FAIL() << "different dictionaries were accepted";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              b + "/dict.y.txt: symbol 9 is 'other' here but 'w9' in " + a +
                  "/dict.y.txt; every data directory must be binarized with the first one's dictionaries (training "
                  "reads them there only): fairseq-cpp-preprocess --srcdict/--tgtdict " +
                  a + "/dict.LANG.txt");
  }
}

// Data directory k: batches {100k}, {100k + 1}, ... (5 - k of them); the loader returns the id in ntokens.
EpochData shard_data(int64_t k) {
  EpochData d;
  for (int64_t i = 0; i < 5 - k; ++i) d.batches.push_back({100 * k + i});
  d.loader = [](const std::vector<int64_t>& ids) {
    Batch b;
    b.nsentences = 1;
    b.ntokens = ids[0];
    return b;
  };
  return d;
}

std::vector<int64_t> drain_ids(EpochIterator& it) {
  std::vector<int64_t> out;
  while (auto b = it.next()) out.push_back(b->ntokens);
  return out;
}

TEST(ShardedData, EpochsRotateOverTheDirectoriesAndResumeInTheSameOne) {
  std::vector<int64_t> loads;
  auto loader = [&](int64_t shard) {
    loads.push_back(shard);
    return shard_data(shard);
  };
  EpochBatchIteratorOptions o;
  o.seed = 5;
  o.num_workers = 0;
  EpochBatchIterator itr(3, loader, o);
  EXPECT_TRUE(loads.empty());  // nothing is read before an epoch starts
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 1; e <= 4; ++e) {
    auto ids = drain_ids(itr.next_epoch_itr());
    std::sort(ids.begin(), ids.end());
    epochs.push_back(ids);
    EXPECT_EQ(itr.state().data_shard, (e - 1) % 3) << e;
    EXPECT_EQ(itr.state().data_shards, 3);
    EXPECT_EQ(itr.next_epoch_state().data_shard, e % 3) << e;
  }
  EXPECT_EQ(epochs[0], (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(epochs[1], (std::vector<int64_t>{100, 101, 102, 103}));
  EXPECT_EQ(epochs[2], (std::vector<int64_t>{200, 201, 202}));
  EXPECT_EQ(epochs[3], epochs[0]);
  EXPECT_EQ(loads, (std::vector<int64_t>{0, 1, 2, 0}));

  // Epoch 2 (directory 1) shuffled with seed + 2; stop after 2 batches, resume: the same 2 remaining.
  EpochBatchIterator straight(3, shard_data, o);
  straight.next_epoch_itr();
  auto whole = drain_ids(straight.next_epoch_itr());
  EpochBatchIterator first(3, shard_data, o);
  drain_ids(first.next_epoch_itr());
  auto& epoch2 = first.next_epoch_itr();
  std::vector<int64_t> part{epoch2.next()->ntokens, epoch2.next()->ntokens};
  IteratorState cursor = first.state();
  EXPECT_EQ(cursor.epoch, 2);
  EXPECT_EQ(cursor.global_batches, 2);
  EXPECT_EQ(cursor.data_shard, 1);
  loads.clear();
  EpochBatchIterator resumed(3, loader, o);
  resumed.load_state(cursor);
  EXPECT_EQ(loads, (std::vector<int64_t>{1}));
  auto rest = drain_ids(resumed.next_epoch_itr());
  part.insert(part.end(), rest.begin(), rest.end());
  EXPECT_EQ(part, whole);
  drain_ids(resumed.next_epoch_itr());
  EXPECT_EQ(loads, (std::vector<int64_t>{1, 2}));
}

}  // namespace
}  // namespace fairseq_cpp::data
