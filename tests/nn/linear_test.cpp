// nn::Linear draws its parameters as torch::nn::Linear does for the same seed, and a model built
// under ParametersFromCheckpoint (as load_model builds one) draws no random number at all.
#include <gtest/gtest.h>

#include <thread>

#include <torch/nn/modules/linear.h>
#include "tests/support/torch.h"

#include "fairseq_cpp/models/transformer.h"
#include "fairseq_cpp/nn/linear.h"

namespace fairseq_cpp::nn {
namespace {

TEST(Linear, DrawsWhatTorchLinearDrawsForTheSameSeed) {
  for (bool bias : {true, false}) {
    torch::manual_seed(7);
    torch::nn::Linear reference(torch::nn::LinearOptions(13, 5).bias(bias));
    const at::Tensor after_reference = torch::rand({8});
    torch::manual_seed(7);
    Linear ours(13, 5, bias);
    const at::Tensor after_ours = torch::rand({8});
    EXPECT_TRUE(torch::equal(ours->weight, reference->weight)) << "bias " << bias;
    EXPECT_EQ(ours->bias.defined(), bias);
    if (bias) {
      EXPECT_TRUE(torch::equal(ours->bias, reference->bias));
    }
    // The same count of numbers drawn: what comes next is the same too.
    EXPECT_TRUE(torch::equal(after_ours, after_reference)) << "bias " << bias;
    EXPECT_EQ(ours->named_parameters().keys(), reference->named_parameters().keys());
  }
}

models::TransformerOptions every_drawn_parameter() {
  models::TransformerOptions o;
  o.encoder_embed_dim = o.decoder_embed_dim = 16;
  o.encoder_ffn_embed_dim = o.decoder_ffn_embed_dim = 32;
  o.encoder_layers = o.decoder_layers = 2;
  o.encoder_attention_heads = o.decoder_attention_heads = 2;
  o.encoder_learned_pos = o.decoder_learned_pos = true;
  o.decoder_output_dim = 8;  // project_out_dim and embed_out, both drawn
  o.layernorm_embedding = true;
  return o;
}

TEST(Linear, AModelBuiltForACheckpointDrawsNothing) {
  const models::Vocabularies vocabularies{20, 24, 1, false};
  torch::manual_seed(3);
  const at::Tensor first_draw = torch::rand({16});

  torch::manual_seed(3);
  std::shared_ptr<models::TransformerModel> built;
  {
    ParametersFromCheckpoint loading;
    EXPECT_FALSE(initialise_parameters());
    {
      ParametersFromCheckpoint nested;
      EXPECT_FALSE(initialise_parameters());
    }
    EXPECT_FALSE(initialise_parameters());
    bool other_thread = false;
    std::thread([&] { other_thread = initialise_parameters(); }).join();
    EXPECT_TRUE(other_thread);  // the guard is this thread's
    built = std::make_shared<models::TransformerModel>(every_drawn_parameter(), vocabularies);
  }
  EXPECT_TRUE(initialise_parameters());
  EXPECT_TRUE(torch::equal(torch::rand({16}), first_draw));

  // Without the guard, the same model draws (so the check above can fail), and has the same
  // parameters by name and shape.
  torch::manual_seed(3);
  auto drawn = std::make_shared<models::TransformerModel>(every_drawn_parameter(), vocabularies);
  EXPECT_FALSE(torch::equal(torch::rand({16}), first_draw));
  auto a = built->named_parameters(true), b = drawn->named_parameters(true);
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& item : b) EXPECT_EQ(a[item.key()].sizes(), item.value().sizes()) << item.key();
  EXPECT_TRUE(a.contains("decoder.embed_out"));
  EXPECT_TRUE(a.contains("decoder.project_out_dim.weight"));
  EXPECT_TRUE(a.contains("encoder.embed_positions.weight"));
}

}  // namespace
}  // namespace fairseq_cpp::nn
