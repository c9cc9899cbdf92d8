// The Transformer against fairseq: parameter names and counts, presets, positions, and
// incremental decoding against full decoding. Tests that compute run on each device (CPU always,
// CUDA where present); those that only build models or read options stay device-free.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "tests/support/torch.h"

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/models/transformer.h"
#include "fairseq_cpp/nn/attention.h"
#include "fairseq_cpp/nn/positional_embedding.h"
#include "tests/support/devices.h"

namespace fairseq_cpp::models {
namespace {

TransformerOptions options_for(const std::string& arch, const std::function<void(config::ModelConfig&)>& edit = {}) {
  config::ModelConfig m;
  m.arch = arch;
  if (edit) edit(m);
  return resolve_transformer_options(m, config::TaskConfig{});
}

// The Multi30k fixture's shape (fairseq v0.9 `--arch transformer` with these flags).
TransformerOptions fixture_options() {
  return options_for("transformer", [](config::ModelConfig& m) {
    m.encoder_layers = 3;
    m.decoder_layers = 3;
    m.encoder_embed_dim = 256;
    m.decoder_embed_dim = 256;
    m.encoder_ffn_embed_dim = 1024;
    m.decoder_ffn_embed_dim = 1024;
    m.encoder_attention_heads = 4;
    m.decoder_attention_heads = 4;
    m.share_all_embeddings = true;
  });
}

std::set<std::string> parameter_names(const torch::nn::Module& module) {
  std::set<std::string> names;
  for (const auto& p : module.named_parameters(true)) names.insert(p.key());
  return names;
}

TEST(Transformer, FixtureShapeHasFairseqsNamesAndCount) {
  TransformerModel model(fixture_options(), Vocabularies{8000, 8000, 1, true});
  EXPECT_EQ(count_parameters(model), 7577600);  // fixture README: 7,577,600 parameters

  std::set<std::string> expected{"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"};
  const char* blocks[] = {"self_attn", "encoder_attn"};
  for (const char* side : {"encoder", "decoder"}) {
    for (int layer = 0; layer < 3; ++layer) {
      std::string prefix = std::string(side) + ".layers." + std::to_string(layer) + ".";
      for (const char* block : blocks) {
        if (std::string(side) == "encoder" && std::string(block) == "encoder_attn") continue;
        for (const char* proj : {"k_proj", "v_proj", "q_proj", "out_proj"}) {
          for (const char* kind : {"weight", "bias"}) expected.insert(prefix + block + "." + proj + "." + kind);
        }
        for (const char* kind : {"weight", "bias"}) expected.insert(prefix + block + "_layer_norm." + kind);
      }
      for (const char* name : {"fc1", "fc2", "final_layer_norm"}) {
        for (const char* kind : {"weight", "bias"}) expected.insert(prefix + name + "." + kind);
      }
    }
  }
  EXPECT_EQ(expected.size(), 128u);  // fairseq's 132 state-dict entries minus 2 version + 2 _float_tensor
  EXPECT_EQ(parameter_names(model), expected);
  // The shared embedding is one tensor under two names.
  auto params = model.named_parameters(true);
  EXPECT_TRUE(params["encoder.embed_tokens.weight"].is_same(params["decoder.embed_tokens.weight"]));
}

// Counts fairseq prints ("num. model params") for its presets, computed by hand:
// transformer_iwslt_de_en on IWSLT'14 (8848 de / 6632 en types, tied decoder output) = 39,469,056.
TEST(Transformer, IwsltPresetCountEqualsFairseqs) {
  auto o =
      options_for("transformer_iwslt_de_en", [](config::ModelConfig& m) { m.share_decoder_input_output_embed = true; });
  TransformerModel model(o, Vocabularies{8848, 6632, 1, false});
  EXPECT_EQ(count_parameters(model), 39469056);
  EXPECT_EQ(parameter_names(model).count("decoder.embed_out"), 0u);
}

// transformer_vaswani_wmt_en_de_big, joined 32768-type dictionary, all embeddings shared: 209,911,808.
TEST(Transformer, BigPresetCountEqualsFairseqs) {
  auto o =
      options_for("transformer_vaswani_wmt_en_de_big", [](config::ModelConfig& m) { m.share_all_embeddings = true; });
  TransformerModel model(o, Vocabularies{32768, 32768, 1, true});
  EXPECT_EQ(count_parameters(model), 209911808);
}

TEST(Transformer, UntiedOutputAndPreNormAddFairseqsExtraParameters) {
  auto o = options_for("transformer_tiny", [](config::ModelConfig& m) {
    m.encoder_normalize_before = true;
    m.decoder_normalize_before = true;
    m.encoder_learned_pos = true;
    m.layernorm_embedding = true;
  });
  TransformerModel model(o, Vocabularies{40, 50, 1, false});
  auto params = model.named_parameters(true);
  ASSERT_TRUE(params.contains("decoder.embed_out"));
  EXPECT_EQ(params["decoder.embed_out"].sizes(), (std::vector<int64_t>{50, 64}));
  EXPECT_TRUE(params.contains("encoder.layer_norm.weight"));
  EXPECT_TRUE(params.contains("decoder.layer_norm.bias"));
  EXPECT_TRUE(params.contains("encoder.layernorm_embedding.weight"));
  // Learned positions: max_source_positions + padding_idx + 1 rows, the padding row zero.
  ASSERT_TRUE(params.contains("encoder.embed_positions.weight"));
  EXPECT_EQ(params["encoder.embed_positions.weight"].size(0), 1024 + 1 + 1);
  EXPECT_EQ(params["encoder.embed_positions.weight"][1].abs().sum().item<double>(), 0.0);
  EXPECT_FALSE(params.contains("decoder.embed_positions.weight"));                      // sinusoidal: no parameter
  EXPECT_EQ(params["encoder.embed_tokens.weight"][1].abs().sum().item<double>(), 0.0);  // pad row
}

TEST(Transformer, PresetsFollowFairseqsDerivations) {
  auto big = options_for("transformer_wmt_en_de_big");
  EXPECT_EQ(big.encoder_embed_dim, 1024);
  EXPECT_EQ(big.decoder_ffn_embed_dim, 4096);
  EXPECT_EQ(big.decoder_attention_heads, 16);
  EXPECT_DOUBLE_EQ(big.dropout, 0.3);
  EXPECT_DOUBLE_EQ(big.attention_dropout, 0.1);
  EXPECT_DOUBLE_EQ(options_for("transformer_vaswani_wmt_en_de_big").attention_dropout, 0.0);
  auto base = options_for("transformer_wmt_en_de");
  EXPECT_EQ(base.encoder_layers, 6);
  EXPECT_EQ(base.encoder_ffn_embed_dim, 2048);
  // Decoder sizes default to the (overridden) encoder's, as in fairseq's base_architecture.
  auto derived = options_for("transformer", [](config::ModelConfig& m) {
    m.encoder_embed_dim = 256;
    m.encoder_ffn_embed_dim = 768;
    m.dropout = 0.25;
  });
  EXPECT_EQ(derived.decoder_embed_dim, 256);
  EXPECT_EQ(derived.decoder_ffn_embed_dim, 768);
  EXPECT_EQ(derived.decoder_output_dim, 256);
  EXPECT_DOUBLE_EQ(derived.dropout, 0.25);
  auto tiny = options_for("transformer_tiny");
  EXPECT_EQ(tiny.decoder_embed_dim, 64);
  EXPECT_EQ(tiny.decoder_layers, 2);
  EXPECT_TRUE(options_for("transformer", [](config::ModelConfig& m) {
                m.share_all_embeddings = true;
              }).share_decoder_input_output_embed);
}

TEST(Transformer, RefusesBadConfigurationsClearly) {
  try {
    options_for("transformer_iwslt_de_enn");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("Did you mean `transformer_iwslt_de_en`"), std::string::npos) << e.what();
  }
  auto shared = options_for("transformer_tiny", [](config::ModelConfig& m) { m.share_all_embeddings = true; });
  try {
    TransformerModel model(shared, Vocabularies{40, 50, 1, false});
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("joined dictionary"), std::string::npos) << e.what();
  }
  EXPECT_THROW(options_for("transformer_tiny", [](config::ModelConfig& m) { m.encoder_attention_heads = 3; }),
               UserError);
  EXPECT_THROW(options_for("transformer_tiny", [](config::ModelConfig& m) { m.activation_fn = "swish"; }), UserError);
}

TEST(Positions, SinusoidalTableIsFairseqs) {
  // dim 4: frequencies exp(-i * ln(10000) / (2 - 1)) = {1, 1e-4}; rows [sin, sin, cos, cos].
  at::Tensor table = nn::sinusoidal_table(6, 4, 1);
  for (int p = 0; p < 6; ++p) {
    auto row = table[p];
    if (p == 1) {
      EXPECT_EQ(row.abs().sum().item<double>(), 0.0);
      continue;
    }
    EXPECT_NEAR(row[0].item<double>(), std::sin(p), 1e-6);
    EXPECT_NEAR(row[1].item<double>(), std::sin(p * 1e-4), 1e-6);
    EXPECT_NEAR(row[2].item<double>(), std::cos(p), 1e-6);
    EXPECT_NEAR(row[3].item<double>(), std::cos(p * 1e-4), 1e-6);
  }
  EXPECT_EQ(nn::sinusoidal_table(3, 5, 1).size(1), 5);  // odd width: a zero column
  EXPECT_EQ(nn::sinusoidal_table(3, 5, 1).select(1, 4).abs().sum().item<double>(), 0.0);
}

class Positions : public ::testing::TestWithParam<std::string> {
 protected:
  torch::Device device() const { return torch::Device(GetParam()); }
};

TEST_P(Positions, MakePositionsSkipsPaddingOnEitherSide) {
  at::Tensor tokens = torch::tensor({1, 1, 7, 8, 2, 5, 6, 7, 8, 2, 5, 2, 1, 1, 1}).view({3, 5});
  at::Tensor expected = torch::tensor({1, 1, 2, 3, 4, 2, 3, 4, 5, 6, 2, 3, 1, 1, 1}).view({3, 5});
  at::Tensor got = nn::make_positions(tokens.to(device()), 1);
  EXPECT_EQ(got.device(), device());
  EXPECT_TRUE(torch::equal(got.to(torch::kCPU), expected));
}

INSTANTIATE_TEST_SUITE_P(Devices, Positions, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

// Variants x devices: CPU always, CUDA where LibTorch sees one.
class Decoding : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  std::string variant() const { return std::get<0>(GetParam()); }
  torch::Device device() const { return torch::Device(std::get<1>(GetParam())); }
  double tolerance() const { return device().is_cuda() ? 1e-4 : 1e-5; }
};

// A random tiny model in eval mode; sources left-padded, as fairseq batches them.
struct Fixture {
  std::shared_ptr<TransformerModel> model;
  at::Tensor src, lengths, prev;
  explicit Fixture(const std::string& arch_edit, torch::Device device = torch::kCPU) {
    torch::manual_seed(3);
    auto o = options_for("transformer_tiny", [&](config::ModelConfig& m) {
      m.decoder_normalize_before = arch_edit == "prenorm";
      m.encoder_normalize_before = arch_edit == "prenorm";
      m.decoder_learned_pos = arch_edit == "learned";
      m.activation_fn = arch_edit == "prenorm" ? "gelu" : "";
      if (arch_edit == "heads64") {  // the decoder's one-row attention kernel and caches kept in place (AVX2)
        m.encoder_embed_dim = m.decoder_embed_dim = 128;
        m.encoder_ffn_embed_dim = m.decoder_ffn_embed_dim = 256;
        m.encoder_attention_heads = m.decoder_attention_heads = 2;
      }
    });
    model = std::make_shared<TransformerModel>(o, Vocabularies{30, 30, 1, true});
    model->eval();
    src = torch::tensor({1, 1, 5, 6, 2, 7, 8, 9, 10, 2, 1, 11, 12, 13, 2}).view({3, 5});
    lengths = torch::tensor({3, 5, 4});
    prev = torch::tensor({2, 14, 15, 16, 17, 18, 2, 19, 20, 21, 22, 23, 2, 24, 25, 26, 27, 28}).view({3, 6});
    model->to(device);
    src = src.to(device);
    lengths = lengths.to(device);
    prev = prev.to(device);
  }
};

TEST_P(Decoding, IncrementalEqualsFullDecoding) {
  torch::NoGradGuard no_grad;
  Fixture f(variant(), device());
  EncoderOut enc = f.model->encode(f.src, f.lengths);
  at::Tensor full = EncoderDecoderModel::log_probs(f.model->decode(f.prev, enc));  // (B, T, V)
  IncrementalState state;
  state.buffers = std::make_shared<nn::CacheBuffers>(f.prev.size(1));  // as beam search sets them
  for (int64_t t = 0; t < f.prev.size(1); ++t) {
    at::Tensor step = f.model->decode_step(f.prev.narrow(1, 0, t + 1), enc, state);
    ASSERT_EQ(step.sizes(), (std::vector<int64_t>{3, 1, 30}));
    at::Tensor diff = (EncoderDecoderModel::log_probs(step).squeeze(1) - full.select(1, t)).abs().max();
    EXPECT_LT(diff.item<double>(), tolerance()) << "step " << t;
  }
}

TEST_P(Decoding, ReorderedCacheEqualsDecodingTheReorderedBatch) {
  torch::NoGradGuard no_grad;
  Fixture f(variant(), device());
  at::Tensor order = torch::tensor({2, 0, 0, 1}).to(device());  // beam search keeps, drops and duplicates rows
  EncoderOut enc = f.model->encode(f.src, f.lengths);
  IncrementalState state;
  // As beam search sets them: with head size 64 on a CPU with AVX2, the caches are kept in place,
  // and the reorder to 4 rows of 3 moves them to new buffers with their 3 positions gathered.
  state.buffers = std::make_shared<nn::CacheBuffers>(f.prev.size(1));
  for (int64_t t = 0; t < 3; ++t) f.model->decode_step(f.prev.narrow(1, 0, t + 1), enc, state);
  state.reorder(order);
  EncoderOut enc2 = EncoderDecoderModel::reorder_encoder_out(enc, order);
  at::Tensor prev2 = f.prev.index_select(0, order);
  at::Tensor full = EncoderDecoderModel::log_probs(f.model->decode(prev2, enc2));
  for (int64_t t = 3; t < prev2.size(1); ++t) {
    at::Tensor step = f.model->decode_step(prev2.narrow(1, 0, t + 1), enc2, state);
    at::Tensor diff = (EncoderDecoderModel::log_probs(step).squeeze(1) - full.select(1, t)).abs().max();
    EXPECT_LT(diff.item<double>(), tolerance()) << "step " << t;
  }
}

// Test names end in variant_device: .../postnorm_cpu, .../learned_cuda.
INSTANTIATE_TEST_SUITE_P(Variants, Decoding,
                         ::testing::Combine(::testing::Values("postnorm", "prenorm", "learned", "heads64"),
                                            ::testing::ValuesIn(testing::test_devices())),
                         [](const ::testing::TestParamInfo<Decoding::ParamType>& info) {
                           return std::get<0>(info.param) + "_" + testing::device_suffix(std::get<1>(info.param));
                         });

// The model's forward pass (padding, dropout, backward) on each device.
class Transformer : public ::testing::TestWithParam<std::string> {
 protected:
  torch::Device device() const { return torch::Device(GetParam()); }
  double tolerance() const { return device().is_cuda() ? 1e-4 : 1e-5; }
};

TEST_P(Transformer, PaddingDoesNotChangeOtherSentencesOutputs) {
  torch::NoGradGuard no_grad;
  Fixture f("postnorm", device());
  // Sentence 0 alone without its padding vs inside the padded batch.
  at::Tensor alone = f.src.narrow(0, 0, 1).narrow(1, 2, 3);
  at::Tensor prev = f.prev.narrow(0, 0, 1);
  at::Tensor a = f.model->forward(alone, torch::tensor({3}).to(device()), prev).to(torch::kCPU);
  at::Tensor b = f.model->forward(f.src, f.lengths, f.prev).narrow(0, 0, 1).to(torch::kCPU);
  EXPECT_LT((a - b).abs().max().item<double>(), tolerance());
}

TEST_P(Transformer, TrainModeAppliesDropoutEvalModeDoesNot) {
  Fixture f("postnorm", device());
  // Eval mode is deterministic on each device: two passes of the same kernels agree bit for bit.
  at::Tensor e1 = f.model->forward(f.src, f.lengths, f.prev);
  at::Tensor e2 = f.model->forward(f.src, f.lengths, f.prev);
  EXPECT_TRUE(torch::equal(e1, e2));
  f.model->train();
  at::Tensor t1 = f.model->forward(f.src, f.lengths, f.prev);
  EXPECT_FALSE(torch::allclose(t1, e1));
  t1.sum().backward();
  auto params = f.model->named_parameters(true);
  EXPECT_TRUE(params["decoder.layers.1.encoder_attn.k_proj.weight"].grad().defined());
  EXPECT_EQ(params["encoder.layers.0.fc1.weight"].grad().device(), device());
  EXPECT_GT(params["encoder.layers.0.fc1.weight"].grad().abs().sum().item<double>(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Devices, Transformer, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

}  // namespace
}  // namespace fairseq_cpp::models
