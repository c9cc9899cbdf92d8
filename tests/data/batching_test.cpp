// fairseq's orders and batches (numpy's RNG reproduced), collate, and the epoch iterator.
#include <gtest/gtest.h>

#include "tests/support/torch.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/data/batching.h"
#include "fairseq_cpp/data/epoch_batch_iterator.h"
#include "fairseq_cpp/data/language_pair_dataset.h"
#include "tests/data/data_test_util.h"

namespace fairseq_cpp::data {
namespace {

using testing::TempDir;

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
  return s;
}

// Sizes of n examples: 1-60 tokens, one in 50 up to `long_tail` (drawn from numpy's stream, so
// the same on every platform).
void synthetic_sizes(size_t n, uint32_t seed, int64_t long_tail, std::vector<int64_t>& src, std::vector<int64_t>& tgt) {
  NumpyRandom r(seed);
  src.resize(n);
  tgt.resize(n);
  for (size_t i = 0; i < n; ++i) {
    src[i] = 1 + static_cast<int64_t>(r.interval(r.interval(49) == 0 ? static_cast<uint64_t>(long_tail - 1) : 59));
    tgt[i] = 1 + static_cast<int64_t>(r.interval(r.interval(49) == 0 ? static_cast<uint64_t>(long_tail - 1) : 59));
  }
}

// FNV-1a of every batch's ids in order, with a separator after each batch.
uint64_t fingerprint(const std::vector<std::vector<int64_t>>& batches) {
  uint64_t h = 14695981039346656037ULL;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ULL; };
  for (const auto& b : batches) {
    for (int64_t i : b) mix(static_cast<uint64_t>(i));
    mix(~0ULL);
  }
  return h;
}

// The three steps one by one (what make_batches must equal).
std::vector<std::vector<int64_t>> three_steps(const std::vector<int64_t>& src, const std::vector<int64_t>& tgt,
                                              bool shuffle, uint32_t seed, const SizeFilterOptions& filter,
                                              const BatchingOptions& batching) {
  auto indices = filter_by_size(ordered_indices(src, tgt, shuffle, seed), src, tgt, filter);
  std::vector<int64_t> num_tokens(src);
  for (size_t i = 0; i < tgt.size(); ++i) num_tokens[i] = std::max(num_tokens[i], tgt[i]);
  return batch_by_size(indices, num_tokens, batching);
}

TEST(Batching, PermutationAndShuffleEqualNumpy) {
  std::string expected = testing::python(
      "import numpy as np\n"
      "for seed in (1, 2, 7):\n"
      "  np.random.seed(seed); print(' '.join(map(str, np.random.permutation(1000))))\n"
      "np.random.seed(3); x=[[i] for i in range(50)]; np.random.shuffle(x); print(' '.join(str(b[0]) for b in x))\n");
  std::string mine;
  for (uint32_t seed : {1u, 2u, 7u}) mine += join(NumpyRandom(seed).permutation(1000)) + "\n";
  std::vector<std::vector<int64_t>> x;
  for (int64_t i = 0; i < 50; ++i) x.push_back({i});
  NumpyRandom(3).shuffle(x);
  std::vector<int64_t> firsts;
  for (auto& b : x) firsts.push_back(b[0]);
  mine += join(firsts) + "\n";
  EXPECT_EQ(mine, expected);
}

TEST(Batching, OrderedIndicesAsFairseq) {
  std::vector<int64_t> src = {5, 3, 5, 1, 3, 5, 2, 9}, tgt = {4, 4, 2, 1, 6, 2, 3, 1};
  std::string expected = testing::python(
      "import numpy as np\n"
      "src=np.array([5,3,5,1,3,5,2,9]); tgt=np.array([4,4,2,1,6,2,3,1])\n"
      "np.random.seed(5); i=np.random.permutation(len(src))\n"
      "i=i[np.argsort(tgt[i], kind='mergesort')]; i=i[np.argsort(src[i], kind='mergesort')]\n"
      "print(' '.join(map(str, i)))\n");
  EXPECT_EQ(join(ordered_indices(src, tgt, true, 5)) + "\n", expected);
  EXPECT_EQ(join(ordered_indices(src, tgt, false, 5)), "3 6 1 4 2 5 0 7");
}

TEST(Batching, BatchBySizeCountsPaddedTokensAndRoundsToMultiple) {
  std::vector<int64_t> idx = {0, 1, 2, 3, 4, 5, 6};
  std::vector<int64_t> len = {2, 2, 3, 3, 3, 4, 10};
  // max_tokens 12: [0 1 2 3] is 4 x 3 = 12; adding 4 makes 5 x 3 = 15 > 12 -> cut.
  // With multiple 1: [0 1 2 3], then [4 5] (3 x 4 = 12 with 6? no: 3 x 10 = 30) -> [4 5], [6].
  BatchingOptions o;
  o.max_tokens = 12;
  auto b = batch_by_size(idx, len, o);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(b[1], (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(b[2], (std::vector<int64_t>{6}));
  // Multiple 3: a full batch of 4 keeps 3 (mod_len = max(3 * 1, 4 % 3)); the rest carries over.
  o.required_batch_size_multiple = 3;
  b = batch_by_size(idx, len, o);
  EXPECT_EQ(b[0], (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(b[1], (std::vector<int64_t>{3, 4, 5}));
  // max_sentences
  BatchingOptions s;
  s.max_sentences = 2;
  EXPECT_EQ(batch_by_size(idx, len, s).size(), 4u);
  BatchingOptions tiny;
  tiny.max_tokens = 5;
  EXPECT_THROW(batch_by_size(idx, len, tiny), DataError);
}

LanguagePairDataset fixture_dataset(const std::string& split) {
  std::string dir = testing::fixture_dir() + "/data-bin";
  Dictionary en = Dictionary::load(dir + "/dict.en.txt");
  Dictionary de = Dictionary::load(dir + "/dict.de.txt");
  return LanguagePairDataset::load(dir, split, "en", "de", en, de, {});
}

TEST(Batching, FixtureTrainGivesFairseqsBatchCount) {
  // fairseq v0.9 made 136 batches per epoch of this data with --max-tokens 4096 (fixture README),
  // required_batch_size_multiple 8 and seed 1.
  auto ds = fixture_dataset("train");
  BatchingOptions o;
  o.max_tokens = 4096;
  o.required_batch_size_multiple = 8;
  auto batches = ds.make_batches(1, true, {}, o);
  EXPECT_EQ(batches.size(), 136u);
  EXPECT_EQ(fingerprint(batches), 0xdbf3198324770a49ULL);  // made by the comparison sorts
  size_t total = 0;
  for (auto& b : batches) total += b.size();
  EXPECT_EQ(total, 29000u);
}

TEST(Batching, LargeCorpusBatchesArePinned) {
  // Fingerprints made by the comparison sorts (std::stable_sort by target, then by source), before
  // the counting sort replaced them: any change of order, filter or cut changes them.
  std::vector<int64_t> src, tgt;
  synthetic_sizes(200000, 11, 1500, src, tgt);
  SizeFilterOptions filter;
  filter.max_source_positions = 1024;
  filter.max_target_positions = 1024;
  BatchingOptions tokens;
  tokens.max_tokens = 4096;
  auto batches = make_batches(src, tgt, true, 1, filter, tokens);
  EXPECT_EQ(batches.size(), 2773u);
  EXPECT_EQ(fingerprint(batches), 0x1e2224ff0c31115dULL);
  EXPECT_EQ(fingerprint(three_steps(src, tgt, true, 1, filter, tokens)), 0x1e2224ff0c31115dULL);

  // Each epoch's shuffle, and one worker's share of a resumed epoch.
  auto size_only = [](const std::vector<int64_t>& ids) {
    Batch b;
    b.nsentences = static_cast<int64_t>(ids.size());
    return b;
  };
  EpochBatchIteratorOptions o;
  o.seed = 1;
  EpochBatchIterator itr(batches, size_only, o);
  EXPECT_EQ(fingerprint(itr.epoch_batches(1, true)), 0xac5d33a0bf0ed631ULL);
  EXPECT_EQ(fingerprint(itr.epoch_batches(2, true)), 0xe87b7be1d3890919ULL);
  EXPECT_EQ(fingerprint(itr.epoch_batches(2, false)), fingerprint(batches));
  o.num_shards = 3;
  o.shard_id = 1;
  o.num_workers = 0;
  std::vector<std::vector<int64_t>> seen;
  EpochBatchIterator shard(
      batches,
      [&](const std::vector<int64_t>& ids) {
        seen.push_back(ids);
        return size_only(ids);
      },
      o);
  shard.load_state(IteratorState{2, 301, true});
  auto& epoch = shard.next_epoch_itr();
  while (epoch.next()) {
  }
  EXPECT_EQ(seen.size(), 824u);
  EXPECT_EQ(fingerprint(seen), 0x9cd80ac8121783afULL);

  // Source only, sentence limit and multiple of 8; no shuffle.
  BatchingOptions mixed;
  mixed.max_tokens = 2048;
  mixed.max_sentences = 100;
  mixed.required_batch_size_multiple = 8;
  auto source_only = make_batches(src, {}, true, 7, filter, mixed);
  EXPECT_EQ(source_only.size(), 4312u);
  EXPECT_EQ(fingerprint(source_only), 0x6cd66883970468a6ULL);
  BatchingOptions sentences;
  sentences.max_sentences = 64;
  sentences.required_batch_size_multiple = 8;
  auto unshuffled = make_batches(src, tgt, false, 1, filter, sentences);
  EXPECT_EQ(unshuffled.size(), 3086u);
  EXPECT_EQ(fingerprint(unshuffled), 0x6b24335735292560ULL);

  // Sizes past 65,535 (the comparison sorts' path).
  synthetic_sizes(50000, 3, 100000, src, tgt);
  SizeFilterOptions wide;
  wide.max_source_positions = 1 << 20;
  wide.max_target_positions = 90000;
  BatchingOptions big;
  big.max_tokens = 1 << 20;
  auto long_ones = make_batches(src, tgt, true, 3, wide, big);
  EXPECT_EQ(long_ones.size(), 212u);
  EXPECT_EQ(fingerprint(long_ones), 0x08268f0b67ee0e8aULL);
}

TEST(Batching, OrderFilterAndBatchesEqualNumpyAtScale) {
  // fairseq's pipeline in numpy (ordered_indices' two mergesorts, filter_indices_by_size,
  // batch_by_size_fast, the epoch's shuffle) on 100,000 examples with ties and filtered ones.
  std::vector<int64_t> src, tgt;
  synthetic_sizes(100000, 5, 1300, src, tgt);
  TempDir dir;
  std::string text;
  for (size_t i = 0; i < src.size(); ++i) text += std::to_string(src[i]) + " " + std::to_string(tgt[i]) + "\n";
  const std::string path = dir.write("sizes.txt", text);
  std::string expected = testing::python(
      "import numpy as np\n"
      "a=np.loadtxt('" +
      path +
      "', dtype=np.int64).reshape(-1, 2); src=a[:, 0]; tgt=a[:, 1]\n"
      "np.random.seed(9); i=np.random.permutation(len(src))\n"
      "i=i[np.argsort(tgt[i], kind='mergesort')]; i=i[np.argsort(src[i], kind='mergesort')]\n"
      "i=i[(src[i] <= 1024) & (tgt[i] <= 1000)]\n"
      "ntok=np.maximum(src, tgt)\n"
      "batches=[]; batch=[]; lens=[]; longest=0\n"
      "for idx in i.tolist():\n"
      "  lens.append(int(ntok[idx])); longest=max(longest, lens[-1])\n"
      "  if batch and (len(batch) == 120 or (len(batch) + 1) * longest > 4096):\n"
      "    m=max(8 * (len(batch) // 8), len(batch) % 8)\n"
      "    batches.append(batch[:m]); batch=batch[m:]; lens=lens[m:]; longest=max(lens) if lens else 0\n"
      "  batch.append(idx)\n"
      "if batch: batches.append(batch)\n"
      "def fp(bs):\n"
      "  h=14695981039346656037\n"
      "  for b in bs:\n"
      "    for v in b + [2**64 - 1]: h=((h ^ v) * 1099511628211) % 2**64\n"
      "  return h\n"
      "print(len(batches), fp(batches))\n"
      "np.random.seed(9 + 2); np.random.shuffle(batches); print(fp(batches))\n");
  SizeFilterOptions filter;
  filter.max_source_positions = 1024;
  filter.max_target_positions = 1000;
  BatchingOptions o;
  o.max_tokens = 4096;
  o.max_sentences = 120;
  o.required_batch_size_multiple = 8;
  auto batches = make_batches(src, tgt, true, 9, filter, o);
  EpochBatchIteratorOptions io;
  io.seed = 9;
  EpochBatchIterator itr(
      batches, [](const std::vector<int64_t>&) { return Batch{}; }, io);
  EXPECT_EQ(fmt::format("{} {}\n{}\n", batches.size(), fingerprint(batches), fingerprint(itr.epoch_batches(2, true))),
            expected);
}

// ordered_indices as its definition says, by comparison sorts.
std::vector<int64_t> reference_order(const std::vector<int64_t>& src, const std::vector<int64_t>& tgt, bool shuffle,
                                     uint32_t seed) {
  std::vector<int64_t> indices(src.size());
  std::iota(indices.begin(), indices.end(), 0);
  if (shuffle) NumpyRandom(seed).shuffle(indices);
  auto by = [](const std::vector<int64_t>& sizes) {
    return [&sizes](int64_t a, int64_t b) { return sizes[static_cast<size_t>(a)] < sizes[static_cast<size_t>(b)]; };
  };
  if (!tgt.empty()) std::stable_sort(indices.begin(), indices.end(), by(tgt));
  std::stable_sort(indices.begin(), indices.end(), by(src));
  return indices;
}

TEST(Batching, CountingSortEqualsComparisonSortOnRandomCases) {
  NumpyRandom r(17);
  for (int round = 0; round < 300; ++round) {
    const auto n = static_cast<size_t>(r.interval(round < 20 ? 2 : 3000));
    // Narrow or wide size ranges (ties or none), zeros, and now and then sizes past 65,535.
    const uint64_t range = std::vector<uint64_t>{3, 60, 1000, 70000}[r.interval(3)];
    std::vector<int64_t> src(n), tgt(n);
    for (size_t i = 0; i < n; ++i) {
      src[i] = static_cast<int64_t>(r.interval(range));
      tgt[i] = static_cast<int64_t>(r.interval(range));
    }
    if (round % 5 == 0) tgt.clear();
    const bool shuffle = round % 7 != 0;
    const auto seed = static_cast<uint32_t>(r.interval(1000));
    SCOPED_TRACE(fmt::format("round {}: n {}, sizes 0-{}, targets {}, shuffle {}, seed {}", round, n, range,
                             !tgt.empty(), shuffle, seed));
    ASSERT_EQ(ordered_indices(src, tgt, shuffle, seed), reference_order(src, tgt, shuffle, seed));
    SizeFilterOptions filter;
    filter.max_source_positions = static_cast<int64_t>(range) * 3 / 4;
    filter.max_target_positions = static_cast<int64_t>(range) - 1;
    BatchingOptions o;
    o.max_tokens = static_cast<int64_t>(range) * 4;
    o.max_sentences = static_cast<int64_t>(r.interval(20));
    o.required_batch_size_multiple = 1 + static_cast<int64_t>(r.interval(8));
    ASSERT_EQ(make_batches(src, tgt, shuffle, seed, filter, o), three_steps(src, tgt, shuffle, seed, filter, o));
  }
  EXPECT_THROW(ordered_indices({1, 2, 3}, {1, 2}, true, 1), DataError);
  EXPECT_THROW(make_batches({1, 2, 3}, {1, 2}, true, 1, {}, {}), DataError);
}

TEST(Batching, MakeBatchesWarnsAndFailsAsTheThreeSteps) {
  std::vector<int64_t> src, tgt;
  synthetic_sizes(5000, 2, 400, src, tgt);
  SizeFilterOptions filter;
  filter.max_source_positions = 300;
  filter.max_target_positions = 200;
  filter.what = "train";
  BatchingOptions o;
  o.max_tokens = 1000;
  // The same warning (count and first ids), from both paths.
  TempDir dir;
  const log::LogOptions saved = log::options();
  auto warnings = [&](const std::string& name, auto&& run) {
    log::LogOptions logged = saved;
    logged.file = dir.path() + "/" + name;
    log::configure(logged);
    run();
    log::configure(saved);
    std::ifstream in(logged.file);
    std::string line, all;
    while (std::getline(in, line)) all += line.substr(line.find(" | ")) + "\n";
    return all;
  };
  std::string fused = warnings("fused", [&] { make_batches(src, tgt, true, 4, filter, o); });
  std::string steps = warnings("steps", [&] { three_steps(src, tgt, true, 4, filter, o); });
  size_t invalid = 0;
  for (size_t i = 0; i < src.size(); ++i) invalid += src[i] > 300 || tgt[i] > 200;
  ASSERT_GT(invalid, 10u);
  EXPECT_NE(fused.find(fmt::format(
                "train: {} examples have invalid sizes and will be skipped, max_positions=(300, 200)", invalid)),
            std::string::npos)
      << fused;
  EXPECT_EQ(fused, steps);
  // Without skip_invalid, the same error naming the first example dropped.
  filter.skip_invalid = false;
  auto message = [&](auto&& run) {
    try {
      run();
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string fused_error = message([&] { make_batches(src, tgt, true, 4, filter, o); });
  EXPECT_EQ(fused_error, message([&] { three_steps(src, tgt, true, 4, filter, o); }));
  EXPECT_EQ(fused_error.rfind("train: example ", 0), 0u) << fused_error;
  // An example longer than max_tokens.
  filter.max_source_positions = filter.max_target_positions = 1000;
  o.max_tokens = 300;
  std::string too_long = message([&] { make_batches(src, tgt, false, 4, filter, o); });
  EXPECT_EQ(too_long, message([&] { three_steps(src, tgt, false, 4, filter, o); }));
  EXPECT_NE(too_long.find("more than dataset.max_tokens = 300"), std::string::npos) << too_long;
}

TEST(Batching, FilterBySizeSkipsWithCountOrFails) {
  std::vector<int64_t> src = {3, 8, 2}, tgt = {2, 2, 9};
  SizeFilterOptions f;
  f.max_source_positions = 5;
  f.max_target_positions = 5;
  EXPECT_EQ(filter_by_size({0, 1, 2}, src, tgt, f), (std::vector<int64_t>{0}));
  f.skip_invalid = false;
  f.what = "valid";
  try {
    filter_by_size({0, 1, 2}, src, tgt, f);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("valid: example 1 has size (8, 2), over max_positions (5, 5)", 0), 0u)
        << e.what();
  }
}

// A tiny data-bin: sources {4 5 2}, {6 2}, {7 8 9 2}; targets {10 2}, {11 12 13 2}, {14 2}.
struct TinyData {
  TempDir dir;
  std::shared_ptr<IndexedDataset> src, tgt;
  TinyData() {
    auto write = [&](const std::string& name, std::vector<std::vector<int64_t>> rows) {
      IndexedDatasetBuilder b(dir.path() + "/" + name, DType::uint16);
      for (auto& r : rows) b.add_item(r.data(), r.size());
      b.finalize();
      return std::make_shared<IndexedDataset>(dir.path() + "/" + name);
    };
    src = write("s", {{4, 5, 2}, {6, 2}, {7, 8, 9, 2}});
    tgt = write("t", {{10, 2}, {11, 12, 13, 2}, {14, 2}});
  }
};

TEST(Collate, PadsSortsAndShiftsAsFairseq) {
  TinyData data;
  LanguagePairDataset ds(data.src, data.tgt, {});
  Batch b = ds.collate({0, 1, 2});
  // Rows by descending source length: 2 (4), 0 (3), 1 (2).
  EXPECT_TRUE(torch::equal(b.id, torch::tensor({2, 0, 1}, torch::kLong)));
  EXPECT_TRUE(torch::equal(b.src_lengths, torch::tensor({4, 3, 2}, torch::kLong)));
  EXPECT_TRUE(torch::equal(b.src_tokens, torch::tensor({{7, 8, 9, 2}, {1, 4, 5, 2}, {1, 1, 6, 2}}, torch::kLong)));
  EXPECT_TRUE(torch::equal(b.target, torch::tensor({{14, 2, 1, 1}, {10, 2, 1, 1}, {11, 12, 13, 2}}, torch::kLong)));
  EXPECT_TRUE(
      torch::equal(b.prev_output_tokens, torch::tensor({{2, 14, 1, 1}, {2, 10, 1, 1}, {2, 11, 12, 13}}, torch::kLong)));
  EXPECT_EQ(b.ntokens, 8);
  EXPECT_EQ(b.nsentences, 3);
  EXPECT_EQ(b.src_tokens.dtype(), torch::kLong);

  LanguagePairOptions flipped;
  flipped.left_pad_source = false;
  flipped.left_pad_target = true;
  Batch f = LanguagePairDataset(data.src, data.tgt, flipped).collate({0, 1});
  EXPECT_TRUE(torch::equal(f.src_tokens, torch::tensor({{4, 5, 2}, {6, 2, 1}}, torch::kLong)));
  EXPECT_TRUE(torch::equal(f.target, torch::tensor({{1, 1, 10, 2}, {11, 12, 13, 2}}, torch::kLong)));
  EXPECT_TRUE(torch::equal(f.prev_output_tokens, torch::tensor({{1, 1, 2, 10}, {2, 11, 12, 13}}, torch::kLong)));
}

TEST(Collate, TruncateSourceKeepsTheFirstTokensAndEndsInEos) {
  // fairseq's truncate_source at max_source_positions 3: {7 8 9 2} -> {7 8 2}; shorter ones unchanged.
  TinyData data;
  LanguagePairOptions o;
  o.truncate_source = 3;
  LanguagePairDataset ds(data.src, data.tgt, o);
  EXPECT_EQ(ds.src_sizes(), (std::vector<int64_t>{3, 2, 3}));
  Batch b = ds.collate({0, 1, 2});
  EXPECT_TRUE(torch::equal(b.id, torch::tensor({0, 2, 1}, torch::kLong)));  // a stable sort of equal lengths
  EXPECT_TRUE(torch::equal(b.src_tokens, torch::tensor({{4, 5, 2}, {7, 8, 2}, {1, 6, 2}}, torch::kLong)));
  EXPECT_TRUE(torch::equal(b.src_lengths, torch::tensor({3, 3, 2}, torch::kLong)));
  EXPECT_TRUE(torch::equal(b.target, torch::tensor({{10, 2, 1, 1}, {14, 2, 1, 1}, {11, 12, 13, 2}}, torch::kLong)));
  o.truncate_source = 1;  // only </s> is left
  EXPECT_TRUE(torch::equal(LanguagePairDataset(data.src, data.tgt, o).collate({2}).src_tokens,
                           torch::tensor({{2}}, torch::kLong)));
}

// Batches 0..n-1 of one example each; the loader returns the example id in `ntokens`.
std::vector<std::vector<int64_t>> numbered(int64_t n) {
  std::vector<std::vector<int64_t>> b;
  for (int64_t i = 0; i < n; ++i) b.push_back({i});
  return b;
}
Batch fake_load(const std::vector<int64_t>& ids) {
  Batch b;
  b.nsentences = static_cast<int64_t>(ids.size());
  b.ntokens = ids[0];
  return b;
}
std::vector<int64_t> drain(EpochIterator& it) {
  std::vector<int64_t> out;
  while (auto b = it.next()) out.push_back(b->empty() ? -1 : b->ntokens);
  return out;
}

TEST(EpochBatchIterator, ShardsAreDisjointCoverEverythingAndHaveEqualLength) {
  for (int64_t workers : {0, 2}) {
    std::multiset<int64_t> seen;
    std::vector<size_t> lengths;
    for (int64_t shard = 0; shard < 3; ++shard) {
      EpochBatchIteratorOptions o;
      o.num_shards = 3;
      o.shard_id = shard;
      o.num_workers = workers;
      EpochBatchIterator itr(numbered(10), fake_load, o);
      EXPECT_EQ(itr.size(), 4);
      auto got = drain(itr.next_epoch_itr());
      lengths.push_back(got.size());
      for (int64_t v : got)
        if (v >= 0) seen.insert(v);
    }
    EXPECT_EQ(lengths, (std::vector<size_t>{4, 4, 4}));
    EXPECT_EQ(seen, (std::multiset<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  }
}

TEST(EpochBatchIterator, SeededShuffleNumpyOrderPerEpoch) {
  EpochBatchIteratorOptions o;
  o.seed = 1;
  EpochBatchIterator a(numbered(20), fake_load, o), b(numbered(20), fake_load, o);
  auto a1 = drain(a.next_epoch_itr()), b1 = drain(b.next_epoch_itr());
  auto a2 = drain(a.next_epoch_itr());
  EXPECT_EQ(a1, b1);
  EXPECT_NE(a1, a2);
  EXPECT_EQ(a.epoch(), 2);
  // fairseq: np.random.seed(seed + epoch); np.random.shuffle(batches).
  std::string expected = testing::python(
      "import numpy as np\n"
      "for e in (1, 2):\n"
      "  x=list(range(20)); np.random.seed(1 + e); np.random.shuffle(x); print(' '.join(map(str, x)))\n");
  EXPECT_EQ(join(a1) + "\n" + join(a2) + "\n", expected);
  auto fixed = drain(a.next_epoch_itr(false));
  EXPECT_EQ(fixed, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
}

TEST(EpochBatchIterator, GroupsByUpdateFreq) {
  EpochBatchIteratorOptions o;
  EpochBatchIterator itr(numbered(7), fake_load, o);
  auto& epoch = itr.next_epoch_itr(false);
  std::vector<size_t> sizes;
  while (true) {
    auto g = epoch.next_group(3);
    if (g.empty()) break;
    sizes.push_back(g.size());
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{3, 3, 1}));
  EXPECT_TRUE(itr.end_of_epoch());
}

// All shards' batches of one epoch in global order, taking `steps` steps on each shard.
std::vector<int64_t> run_shards(int64_t shards, const IteratorState* resume, int64_t steps, IteratorState* out) {
  std::vector<std::unique_ptr<EpochBatchIterator>> itrs;
  std::vector<EpochIterator*> epochs;
  for (int64_t s = 0; s < shards; ++s) {
    EpochBatchIteratorOptions o;
    o.num_shards = shards;
    o.shard_id = s;
    o.seed = 4;
    itrs.push_back(std::make_unique<EpochBatchIterator>(numbered(23), fake_load, o));
    if (resume) itrs.back()->load_state(*resume);
    epochs.push_back(&itrs.back()->next_epoch_itr());
  }
  std::vector<int64_t> order;
  for (int64_t k = 0; k < steps; ++k)
    for (auto* e : epochs)
      if (auto b = e->next(); b && !b->empty()) order.push_back(b->ntokens);
  if (out) *out = itrs[0]->state();
  return order;
}

TEST(EpochBatchIterator, ResumeContinuesExactlyWithSameOrOtherWorkerCount) {
  auto full = run_shards(1, nullptr, 100, nullptr);
  ASSERT_EQ(full.size(), 23u);
  IteratorState cursor;
  auto first = run_shards(2, nullptr, 4, &cursor);  // 8 global batches
  EXPECT_EQ(cursor.epoch, 1);
  EXPECT_EQ(cursor.global_batches, 8);
  for (int64_t shards : {2, 3, 1}) {
    auto rest = run_shards(shards, &cursor, 100, nullptr);
    std::vector<int64_t> joined = first;
    joined.insert(joined.end(), rest.begin(), rest.end());
    EXPECT_EQ(joined, full) << shards << " shards after resume";
  }
  // A cursor at the end of the epoch starts the next one.
  IteratorState end{1, 23, true};
  EpochBatchIteratorOptions o;
  o.seed = 4;
  EpochBatchIterator itr(numbered(23), fake_load, o);
  itr.load_state(end);
  itr.next_epoch_itr();
  EXPECT_EQ(itr.epoch(), 2);
}

TEST(EpochBatchIterator, LoaderErrorReachesConsumerAndEarlyExitDoesNotHang) {
  EpochBatchIteratorOptions o;
  o.num_workers = 3;
  o.buffer_size = 2;
  std::atomic<int> calls{0};
  EpochBatchIterator bad(
      numbered(50),
      [&](const std::vector<int64_t>& ids) {
        ++calls;
        if (ids[0] == 5) throw DataError("broken batch 5");
        return fake_load(ids);
      },
      o);
  auto& epoch = bad.next_epoch_itr(false);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(epoch.next()->ntokens, i);
  EXPECT_THROW(epoch.next(), DataError);
  EXPECT_LE(calls.load(), 5 + 1 + 3 + 2);  // bounded read-ahead
  // Abandoning an epoch with a full queue joins the workers.
  EpochBatchIterator slow(numbered(100), fake_load, o);
  slow.next_epoch_itr();
  slow.next_epoch_itr();
  SUCCEED();
}

}  // namespace
}  // namespace fairseq_cpp::data
