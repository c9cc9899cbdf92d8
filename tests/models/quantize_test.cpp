// Switching a Transformer to int8 linear layers, or packing its float32 weights in place: which
// weights are converted, and the model's log-probabilities against float32's.
#include <gtest/gtest.h>

#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tests/support/torch.h"

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/models/quantize.h"
#include "fairseq_cpp/models/transformer.h"
#include "fairseq_cpp/nn/bf16_gemm.h"
#include "fairseq_cpp/nn/packed_linear.h"
#include "fairseq_cpp/nn/quantized_linear.h"

namespace fairseq_cpp::models {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::shared_ptr<TransformerModel> tiny_model(bool share_output, bool share_all = false) {
  torch::manual_seed(3);
  config::ModelConfig m;
  m.arch = "transformer_tiny";
  m.share_decoder_input_output_embed = share_output;
  m.share_all_embeddings = share_all;
  auto model = std::make_shared<TransformerModel>(resolve_transformer_options(m, config::TaskConfig{}),
                                                  Vocabularies{30, 30, 1, share_all});
  model->eval();
  return model;
}

// Three sentences for the tiny model, and their log-probabilities.
struct TinyBatch {
  at::Tensor src = torch::tensor({1, 1, 5, 6, 2, 7, 8, 9, 10, 2, 1, 11, 12, 13, 2}).view({3, 5});
  at::Tensor lengths = torch::tensor({3, 5, 4});
  at::Tensor prev = torch::tensor({2, 14, 15, 16, 17, 18, 2, 19, 20, 21, 22, 23, 2, 24, 25, 26, 27, 28}).view({3, 6});
  at::Tensor log_probs(TransformerModel& model) const {
    return EncoderDecoderModel::log_probs(model.decode(prev, model.encode(src, lengths)));
  }
};

// The model's linear layers' weights (attention projections, fc1, fc2), by name.
size_t linear_weight_count(TransformerModel& model) {
  size_t linear = 0;
  for (const auto& p : model.named_parameters()) {
    if (ends_with(p.key(), "proj.weight") || ends_with(p.key(), "fc1.weight") || ends_with(p.key(), "fc2.weight"))
      ++linear;
  }
  return linear;
}

TEST(QuantizeInt8, QuantizesEveryLinearLayerAndTheOutputProjection) {
  if (!nn::int8_linear_supported()) {
    auto model = tiny_model(false);
    try {
      quantize_int8(*model);
      ADD_FAILURE() << "no error without AVX-512 VNNI";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(nn::int8_linear_unsupported_reason()), std::string::npos) << e.what();
    }
    return;
  }
  for (bool shared : {false, true}) {
    auto model = tiny_model(shared);
    const std::string output = shared ? "decoder.embed_tokens.weight" : "decoder.embed_out";
    const size_t linear = linear_weight_count(*model);
    ASSERT_GT(linear, 0u);
    EXPECT_EQ(quantize_int8(*model), linear + 1);
    for (const auto& p : model->named_parameters()) {
      const bool expected = ends_with(p.key(), "proj.weight") || ends_with(p.key(), "fc1.weight") ||
                            ends_with(p.key(), "fc2.weight") || p.key() == output;
      EXPECT_EQ(nn::int8_weight_for(p.value()) != nullptr, expected) << p.key();
    }
    QuantizeOptions without_output;
    without_output.output_projection = false;
    auto other = tiny_model(shared);
    EXPECT_EQ(quantize_int8(*other, without_output), linear);
    EXPECT_EQ(nn::int8_weight_for(other->named_parameters()[output]), nullptr);
  }
}

// In place (generation's way): every float32 weight quantized is freed. Without a shared embedding
// the log-probabilities are those of the int8 copies to the bit; a shared embedding (the output
// projection's weight) then looks its rows up in int8, dequantized, as CTranslate2 does: those rows
// are exactly its int8 copy's values times their scales, and the log-probabilities stay within the
// quantization's error of the int8 copies' (under a tenth of a nat, where two positions of the
// same sentence differ by more than one).
TEST(QuantizeInt8, InPlaceFreesEveryQuantizedWeightAndASharedEmbeddingReadsItsInt8Rows) {
  if (!nn::int8_linear_supported()) GTEST_SKIP() << nn::int8_linear_unsupported_reason();
  torch::NoGradGuard no_grad;
  at::Tensor src = torch::tensor({1, 1, 5, 6, 2, 7, 8, 9, 10, 2, 1, 11, 12, 13, 2}).view({3, 5});
  at::Tensor lengths = torch::tensor({3, 5, 4});
  at::Tensor prev = torch::tensor({2, 14, 15, 16, 17, 18, 2, 19, 20, 21, 22, 23, 2, 24, 25, 26, 27, 28}).view({3, 6});
  // Embeddings shared: none, the decoder's with the output projection, or all (the encoder's too).
  for (const auto& [shared, all] : std::vector<std::pair<bool, bool>>{{false, false}, {true, false}, {true, true}}) {
    SCOPED_TRACE(::testing::Message() << "shared " << shared << ", all " << all);
    auto copies = tiny_model(shared, all), in_place = tiny_model(shared, all);
    auto log_probs = [&](TransformerModel& m) {
      return EncoderDecoderModel::log_probs(m.decode(prev, m.encode(src, lengths)));
    };
    const std::string output = shared ? "decoder.embed_tokens.weight" : "decoder.embed_out";
    quantize_int8(*copies);
    const at::Tensor expected = log_probs(*copies);
    const at::Tensor original = in_place->named_parameters()[output].clone();
    QuantizeOptions options;
    options.in_place = true;
    const size_t quantized = quantize_int8(*in_place, options);
    EXPECT_EQ(quantized, quantize_int8(*tiny_model(shared, all)));
    std::unordered_set<const c10::TensorImpl*> freed;
    for (const auto& p : in_place->named_parameters()) {
      const bool linear = ends_with(p.key(), "proj.weight") || ends_with(p.key(), "fc1.weight") ||
                          ends_with(p.key(), "fc2.weight") || p.key() == output ||
                          (all && p.key() == "encoder.embed_tokens.weight");
      EXPECT_EQ(nn::int8_weight_for(p.value()) != nullptr, linear) << p.key();
      EXPECT_EQ(nn::quantized_in_place(p.value()), linear) << p.key();
      EXPECT_EQ(p.value().numel() == 0, linear) << p.key() << ": freed once quantized in place";
      if (p.value().numel() == 0) freed.insert(p.value().unsafeGetTensorImpl());
    }
    EXPECT_EQ(freed.size(), quantized);
    const at::Tensor result = log_probs(*in_place);  // the encoder's lookups too, when all are shared
    if (!shared) {
      EXPECT_TRUE(torch::equal(result, expected));
      continue;
    }
    const nn::Int8Weight embedding = nn::Int8Weight::quantize(original);
    const at::Tensor rows = nn::int8_rows(in_place->named_parameters()[output], src);
    EXPECT_TRUE(torch::equal(
        rows, embedding.values().to(at::kFloat).index({src}) * embedding.scales().index({src}).unsqueeze(-1)));
    EXPECT_FALSE(torch::equal(result, expected)) << "the lookups changed";
    EXPECT_LT((result - expected).abs().max().item<double>(), 0.1);
    EXPECT_GT((expected[0][1] - expected[0][2]).abs().max().item<double>(), 1.0);
  }
}

TEST(QuantizeInt8, LogProbabilitiesStayCloseToFloat32s) {
  if (!nn::int8_linear_supported()) GTEST_SKIP() << nn::int8_linear_unsupported_reason();
  torch::NoGradGuard no_grad;
  auto model = tiny_model(true);
  at::Tensor src = torch::tensor({1, 1, 5, 6, 2, 7, 8, 9, 10, 2, 1, 11, 12, 13, 2}).view({3, 5});
  at::Tensor lengths = torch::tensor({3, 5, 4});
  at::Tensor prev = torch::tensor({2, 14, 15, 16, 17, 18, 2, 19, 20, 21, 22, 23, 2, 24, 25, 26, 27, 28}).view({3, 6});
  auto log_probs = [&] { return EncoderDecoderModel::log_probs(model->decode(prev, model->encode(src, lengths))); };
  const at::Tensor float32 = log_probs();
  quantize_int8(*model);
  const at::Tensor int8 = log_probs();
  // About 1% error per product through the 2 + 2 layers of a random model (the log-probabilities span
  // about 3 nats around log(1/30)).
  const double diff = (int8 - float32).abs().max().item<double>();
  const double mean = (int8 - float32).abs().mean().item<double>();
  EXPECT_GT(diff, 0.0) << "the int8 path was not taken";
  EXPECT_LT(diff, 0.15);
  EXPECT_LT(mean, 0.03);
}

TEST(PackWeightsInPlace, FreesEveryLinearWeightAndGivesThePackedKernelsBits) {
  if (!nn::packed_linear_supported()) GTEST_SKIP() << "this CPU has neither AVX-512F nor AVX2 with FMA";
  torch::NoGradGuard no_grad;
  const TinyBatch batch;
  for (bool shared : {false, true}) {
    auto model = tiny_model(shared);
    auto log_probs = [&] { return batch.log_probs(*model); };
    const at::Tensor float32 = log_probs();  // torch's linear
    at::Tensor packed_copies;                // the packed kernel on packed copies of the weights
    {
      nn::PackedLinearScope scope;
      packed_copies = log_probs();
    }
    const size_t linear = linear_weight_count(*model);
    ASSERT_GT(linear, 0u);
    // And the output projection, its own or the embedding it shares (whose lookups then read the
    // packed rows).
    const std::string output = shared ? "decoder.embed_tokens.weight" : "decoder.embed_out";
    EXPECT_EQ(pack_weights_in_place(*model), linear + 1);
    for (const auto& p : model->named_parameters()) {
      const bool expected = ends_with(p.key(), "proj.weight") || ends_with(p.key(), "fc1.weight") ||
                            ends_with(p.key(), "fc2.weight") || p.key() == output;
      EXPECT_EQ(nn::packed_in_place(p.value()), expected) << p.key();
      EXPECT_EQ(p.value().numel() == 0, expected) << p.key() << ": packed in place frees the float32 values";
    }
    // Outside a scope too (the values are gone), to the bit of the packed copies.
    const at::Tensor in_place = log_probs();
    EXPECT_TRUE(torch::equal(in_place, packed_copies)) << "shared " << shared;
    EXPECT_TRUE(torch::allclose(in_place, float32, 1e-4, 1e-5)) << "shared " << shared;
  }
}

// --bf16 generation on the CPU: the same weights packed in place, rounded to bf16 for the
// AVX512_BF16 kernel (its products are checked to the bit in tests/nn/bf16_gemm_test.cpp).
TEST(PackWeightsInPlace, AsBf16TheLogProbabilitiesStayCloseToFloat32s) {
  if (!nn::bf16_gemm_supported()) GTEST_SKIP() << "this CPU has no AVX512_BF16 (--bf16 is refused here)";
  torch::NoGradGuard no_grad;
  const TinyBatch batch;
  for (bool shared : {false, true}) {
    auto model = tiny_model(shared);
    auto log_probs = [&] { return batch.log_probs(*model); };
    const at::Tensor float32 = log_probs();
    const at::Tensor embedding_weight = model->named_parameters()["decoder.embed_tokens.weight"];
    const at::Tensor embedding = embedding_weight.clone();
    const size_t linear = linear_weight_count(*model);
    EXPECT_EQ(pack_weights_in_place(*model, at::kBFloat16), linear + 1);
    const std::string output = shared ? "decoder.embed_tokens.weight" : "decoder.embed_out";
    for (const auto& p : model->named_parameters()) {
      if (p.key() == output || ends_with(p.key(), "fc1.weight")) {
        EXPECT_TRUE(nn::packed_in_place(p.value())) << p.key();
        EXPECT_EQ(p.value().numel(), 0) << p.key();
      }
    }
    const at::Tensor bf16 = log_probs();
    ASSERT_EQ(bf16.scalar_type(), at::kFloat);
    // bf16 rounds each weight and input by up to 2^-9 of itself: about 0.4% per product through
    // the 2 + 2 layers of a random model, less than int8's 1%
    const double diff = (bf16 - float32).abs().max().item<double>();
    EXPECT_GT(diff, 1e-3) << "the bf16 path was not taken (float32 panels differ by less than 1e-4)";
    EXPECT_LT(diff, 0.04) << "shared " << shared;
    EXPECT_LT((bf16 - float32).abs().mean().item<double>(), 0.008) << "shared " << shared;
    if (shared) {  // the decoder's lookups read the rounded rows of the shared embedding
      const at::Tensor rows = nn::packed_rows(embedding_weight, batch.prev);
      EXPECT_TRUE(torch::equal(rows, embedding.to(at::kBFloat16).to(at::kFloat).index({batch.prev})));
    }
  }
}

}  // namespace
}  // namespace fairseq_cpp::models
