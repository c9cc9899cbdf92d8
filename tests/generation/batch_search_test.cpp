// search_batches: batches dealt out in parts to worker threads give the hypotheses of searching
// each whole batch on its own, in batch order on the calling thread; errors stop the workers. On
// each device: off the CPU search_batches searches the batches one by one, and must give the same.
// Hypotheses are compared with a search on the same device, so near ties resolve alike.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <cmath>
#include <thread>

#include "tests/support/torch.h"

#include "fairseq_cpp/generation/batch_search.h"
#include "fairseq_cpp/models/transformer.h"
#include "tests/support/devices.h"

namespace fairseq_cpp::generation {
namespace {

constexpr int64_t kRandomVocab = 40;

// Weights drawn on the CPU (the same on every device), then moved to `device`.
std::shared_ptr<models::TransformerModel> small_model(torch::Device device) {
  torch::manual_seed(3);
  config::ModelConfig m;
  m.arch = "transformer";
  m.encoder_layers = 2;
  m.decoder_layers = 2;
  m.encoder_embed_dim = 32;
  m.decoder_embed_dim = 32;
  m.encoder_ffn_embed_dim = 64;
  m.decoder_ffn_embed_dim = 64;
  m.encoder_attention_heads = 4;
  m.decoder_attention_heads = 4;
  m.share_all_embeddings = true;
  auto model = std::make_shared<models::TransformerModel>(models::resolve_transformer_options(m, config::TaskConfig{}),
                                                          models::Vocabularies{kRandomVocab, kRandomVocab, 1, true});
  model->eval();
  model->to(device);
  return model;
}

// `sizes` sentences of random words 4.. of random lengths, left-padded with <pad> = 1, </s> = 2 last;
// drawn on the CPU, then moved to `device`.
std::vector<SearchBatch> random_batches(const std::vector<int64_t>& sizes, torch::Device device) {
  torch::manual_seed(11);
  std::vector<SearchBatch> batches;
  for (int64_t rows : sizes) {
    at::Tensor lengths = torch::randint(2, 9, {rows}, torch::kInt64);
    const int64_t width = lengths.max().item<int64_t>();
    at::Tensor src = torch::full({rows, width}, 1, torch::kInt64);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t len = lengths[r].item<int64_t>();
      src[r].narrow(0, width - len, len).copy_(torch::randint(4, kRandomVocab, {len}, torch::kInt64));
      src[r][width - 1] = 2;
    }
    batches.push_back({src.to(device), lengths.to(device), at::Tensor(), {}});
  }
  return batches;
}

GeneratorOptions options() {
  GeneratorOptions o;
  o.beam = 3;
  o.max_len_b = 12;
  return o;
}

class SearchBatches : public ::testing::TestWithParam<std::string> {
 protected:
  torch::Device device() const { return torch::Device(GetParam()); }
};

TEST_P(SearchBatches, PartsOnWorkersGiveTheHypothesesOfWholeBatchesInOrder) {
  auto model = small_model(device());
  SequenceGenerator generator(options(), {1, 2, 3, kRandomVocab});
  const auto batches = random_batches({7, 5, 1, 8, 3}, device());
  std::vector<Hypotheses> expected;
  for (const auto& b : batches) expected.push_back(generator.generate(*model, b.src_tokens, b.src_lengths));

  const int threads_before = at::get_num_threads();
  std::vector<size_t> order;
  const auto caller = std::this_thread::get_id();
  search_batches(generator, *model, batches, 3, [&](size_t i, Hypotheses&& found) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    order.push_back(i);
    ASSERT_EQ(found.size(), expected[i].size());
    for (size_t s = 0; s < found.size(); ++s) {
      ASSERT_EQ(found[s].size(), expected[i][s].size()) << "batch " << i << " sentence " << s;
      for (size_t h = 0; h < found[s].size(); ++h) {
        EXPECT_EQ(found[s][h].tokens, expected[i][s][h].tokens) << "batch " << i << " sentence " << s;
        EXPECT_NEAR(found[s][h].score, expected[i][s][h].score, 1e-5);
      }
    }
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(at::get_num_threads(), threads_before) << "the intra-op thread count is restored";

  // One sentence for 3 workers (fewer parts than workers): searched as it is.
  const auto single = random_batches({1}, device());
  Hypotheses alone = generator.generate(*model, single[0].src_tokens, single[0].src_lengths);
  search_batches(generator, *model, single, 3, [&](size_t, Hypotheses&& found) {
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0][0].tokens, alone[0][0].tokens);
  });
}

TEST_P(SearchBatches, SamplingKeepsWholeBatches) {
  auto model = small_model(device());
  GeneratorOptions o = options();
  o.sampling = true;
  o.seed = 5;
  SequenceGenerator generator(o, {1, 2, 3, kRandomVocab});
  const auto batches = random_batches({6, 4}, device());
  std::vector<Hypotheses> expected;
  for (const auto& b : batches) expected.push_back(generator.generate(*model, b.src_tokens, b.src_lengths));
  search_batches(generator, *model, batches, 2, [&](size_t i, Hypotheses&& found) {
    for (size_t s = 0; s < found.size(); ++s) {
      for (size_t h = 0; h < found[s].size(); ++h) EXPECT_EQ(found[s][h].tokens, expected[i][s][h].tokens);
    }
  });
}

// Diverse beam search treats each sentence on its own, as beam search does: parts give the whole
// batch's hypotheses. match_source_len's longest output is the batch's longest source: whole batches.
TEST_P(SearchBatches, DiverseBeamSearchAndMatchSourceLenGiveTheHypothesesOfWholeBatches) {
  auto model = small_model(device());
  GeneratorOptions diverse = options();
  diverse.beam = 4;
  diverse.diverse_beam_groups = 2;
  GeneratorOptions match = options();
  match.match_source_len = true;
  for (const GeneratorOptions& o : {diverse, match}) {
    SequenceGenerator generator(o, {1, 2, 3, kRandomVocab});
    const auto batches = random_batches({7, 5}, device());
    std::vector<Hypotheses> expected;
    for (const auto& b : batches) expected.push_back(generator.generate(*model, b.src_tokens, b.src_lengths));
    search_batches(generator, *model, batches, 2, [&](size_t i, Hypotheses&& found) {
      ASSERT_EQ(found.size(), expected[i].size());
      for (size_t s = 0; s < found.size(); ++s) {
        ASSERT_EQ(found[s].size(), expected[i][s].size());
        for (size_t h = 0; h < found[s].size(); ++h) {
          EXPECT_EQ(found[s][h].tokens, expected[i][s][h].tokens) << "batch " << i << " sentence " << s;
          if (o.match_source_len && std::isfinite(found[s][h].score)) {
            EXPECT_EQ(static_cast<int64_t>(found[s][h].tokens.size()), batches[i].src_lengths[s].item<int64_t>() + 1);
          }
        }
      }
    });
  }
}

// Fails every decoding step of batches with more than `limit` rows.
class FailingModel : public models::EncoderDecoderModel {
 public:
  FailingModel(std::shared_ptr<models::TransformerModel> inner, int64_t limit) : inner_(std::move(inner)), limit_(limit) {}
  models::EncoderOut encode(const at::Tensor& s, const at::Tensor& l) override {
    if (s.size(0) > limit_) throw std::runtime_error("too many rows");
    return inner_->encode(s, l);
  }
  at::Tensor decode(const at::Tensor& p, const models::EncoderOut& e) override { return inner_->decode(p, e); }
  at::Tensor decode_step(const at::Tensor& p, const models::EncoderOut& e, models::IncrementalState& s) override {
    return inner_->decode_step(p, e, s);
  }
  int64_t max_source_positions() const override { return inner_->max_source_positions(); }
  int64_t max_target_positions() const override { return inner_->max_target_positions(); }

 private:
  std::shared_ptr<models::TransformerModel> inner_;
  int64_t limit_;
};

TEST_P(SearchBatches, AnErrorInAWorkerOrInTheCallbackStopsTheSearch) {
  SequenceGenerator generator(options(), {1, 2, 3, kRandomVocab});
  // CPU: parts of at most 2 rows (4 sentences on 2 workers) pass; the 6-sentence batch's parts fail.
  // CUDA: whole batches, one by one: the first fails.
  FailingModel failing(small_model(device()), 2);
  const auto batches = random_batches({4, 4, 6, 4}, device());
  std::vector<size_t> done;
  EXPECT_THROW(search_batches(generator, failing, batches, 2, [&](size_t i, Hypotheses&&) { done.push_back(i); }),
               std::runtime_error);
  // Batches finished before the failure may be delivered, in order; none from the failing one on.
  EXPECT_TRUE(done == std::vector<size_t>{} || done == std::vector<size_t>{0} || done == (std::vector<size_t>{0, 1}));

  auto model = small_model(device());
  int calls = 0;
  EXPECT_THROW(search_batches(generator, *model, random_batches({3, 3, 3, 3}, device()), 2,
                              [&](size_t, Hypotheses&&) {
                                if (++calls == 2) throw std::logic_error("printing failed");
                              }),
               std::logic_error);
  EXPECT_EQ(calls, 2);
}

INSTANTIATE_TEST_SUITE_P(Devices, SearchBatches, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

}  // namespace
}  // namespace fairseq_cpp::generation
