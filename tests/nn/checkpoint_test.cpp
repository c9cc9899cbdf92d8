// Activation checkpointing (nn/checkpoint.h) against the plain forward and backward: the output,
// the loss and every gradient equal to the bit, with dropout drawing masks, in float32 and in
// bf16 autocast, on each device (CPU always, CUDA where present); the random generators continue
// as after the plain step.
#include <gtest/gtest.h>

#include <torch/nn/functional/linear.h>
#include "tests/support/torch.h"

#include "fairseq_cpp/models/transformer.h"
#include "fairseq_cpp/nn/checkpoint.h"
#include "fairseq_cpp/nn/dropout.h"
#include "fairseq_cpp/optim/mixed_precision.h"
#include "tests/support/devices.h"

namespace fairseq_cpp::nn {
namespace {

using optim::Precision;

class Checkpoint : public ::testing::TestWithParam<std::string> {
 protected:
  torch::Device device() const { return torch::Device(GetParam()); }
};

// The next number each generator the checkpoint touches would give: equal after equal histories.
std::vector<double> next_draws(const torch::Device& device) {
  std::vector<double> draws{torch::rand({1}).item<double>()};
  if (device.is_cuda()) draws.push_back(torch::rand({1}, torch::TensorOptions().device(device)).item<double>());
  return draws;
}

void expect_bitwise_equal(const at::Tensor& plain, const at::Tensor& checkpointed, const std::string& what) {
  ASSERT_TRUE(plain.defined()) << what;
  ASSERT_TRUE(checkpointed.defined()) << what;
  EXPECT_TRUE(torch::equal(plain.cpu(), checkpointed.cpu()))
      << what << ": largest difference "
      << (plain.cpu().to(at::kDouble) - checkpointed.cpu().to(at::kDouble)).abs().max();
}

// y = dropout(x W^T + b) * z + x: two inputs, two parameters, a dropout mask, x read twice.
at::Tensor small_block(const std::vector<at::Tensor>& in, const at::Tensor& w, const at::Tensor& b) {
  return nn::dropout(torch::nn::functional::linear(in[0], w, b), 0.3, true) * in[1] + in[0];
}

TEST_P(Checkpoint, BlockOutputAndGradientsEqualThePlainBlock) {
  auto options = torch::TensorOptions().device(device());
  torch::manual_seed(3);
  at::Tensor w = torch::randn({16, 16}, options).requires_grad_(true);
  at::Tensor b = torch::randn({16}, options).requires_grad_(true);
  at::Tensor x0 = torch::randn({4, 5, 16}, options).requires_grad_(true);
  at::Tensor z = torch::randn({4, 5, 16}, options).requires_grad_(true);
  at::Tensor upstream = torch::randn({4, 5, 16}, options);

  std::vector<std::vector<at::Tensor>> grads;
  std::vector<at::Tensor> outputs;
  std::vector<std::vector<double>> draws;
  for (bool recompute : {false, true}) {
    torch::manual_seed(11);
    if (device().is_cuda()) torch::cuda::manual_seed(11);
    at::Tensor x = x0 * 2;  // not a leaf: its gradient flows on to x0
    at::Tensor y = recompute ? checkpoint([&](const auto& in) { return small_block(in, w, b); }, {x, z}, {w, b})
                             : small_block({x, z}, w, b);
    (y * upstream).sum().backward();
    draws.push_back(next_draws(device()));
    outputs.push_back(y.detach());
    grads.push_back({x0.grad().clone(), z.grad().clone(), w.grad().clone(), b.grad().clone()});
    for (at::Tensor* p : {&x0, &z, &w, &b}) p->mutable_grad() = at::Tensor();
  }
  expect_bitwise_equal(outputs[0], outputs[1], "output");
  const char* names[] = {"x", "z", "w", "b"};
  for (size_t i = 0; i < grads[0].size(); ++i) expect_bitwise_equal(grads[0][i], grads[1][i], names[i]);
  EXPECT_EQ(draws[0], draws[1]) << "the random generators continue as after the plain step";
  // The mask was drawn: some outputs are the residual alone.
  EXPECT_GT((outputs[0] == x0.detach() * 2).sum().item<int64_t>(), 0);
}

// A small Transformer with every dropout on: post-norm encoder, pre-norm decoder.
models::TransformerOptions dropout_model(bool checkpoint_activations) {
  config::ModelConfig m;
  m.arch = "transformer_tiny";
  m.encoder_embed_dim = 32;
  m.encoder_ffn_embed_dim = 64;
  m.dropout = 0.3;
  m.attention_dropout = 0.1;
  m.activation_dropout = 0.1;
  m.decoder_normalize_before = true;
  m.checkpoint_activations = checkpoint_activations;
  return models::resolve_transformer_options(m, config::TaskConfig{});
}

struct StepResult {
  at::Tensor loss;
  std::map<std::string, at::Tensor> grads;
  std::vector<double> draws;
};

StepResult train_step(bool checkpoint_activations, Precision precision, const torch::Device& device) {
  torch::manual_seed(5);
  models::TransformerModel model(dropout_model(checkpoint_activations), models::Vocabularies{40, 40, 1, false});
  model.to(device);
  model.train();
  auto tokens = torch::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor src = torch::randint(4, 40, {3, 7}, tokens);
  src[2][0] = src[2][1] = 1;  // left padding
  at::Tensor prev = torch::randint(4, 40, {3, 6}, tokens);
  at::Tensor target = torch::randint(4, 40, {3, 6}, tokens);
  torch::manual_seed(17);
  if (device.is_cuda()) torch::cuda::manual_seed(17);
  at::Tensor logits;
  {
    optim::AutocastScope autocast(precision, device.type());
    logits = model.forward(src, torch::full({3}, 7, tokens), prev);
  }
  StepResult result;
  result.loss = torch::nll_loss(torch::log_softmax(logits.to(at::kFloat).view({18, 40}), -1), target.view({18}), {},
                                at::Reduction::Sum);
  result.loss.backward();
  for (const auto& p : model.named_parameters()) result.grads[p.key()] = p.value().grad().cpu();
  result.draws = next_draws(device);
  return result;
}

void expect_same_step(Precision precision, const torch::Device& device) {
  StepResult plain = train_step(false, precision, device);
  StepResult checkpointed = train_step(true, precision, device);
  expect_bitwise_equal(plain.loss, checkpointed.loss, "loss");
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (const auto& [name, grad] : plain.grads) expect_bitwise_equal(grad, checkpointed.grads.at(name), name);
  EXPECT_EQ(plain.draws, checkpointed.draws);
  EXPECT_GT(plain.grads.at("encoder.layers.0.fc1.weight").abs().sum().item<double>(), 0);
}

TEST_P(Checkpoint, TransformerLossAndEveryGradientEqualThePlainModelInFloat32) {
  expect_same_step(Precision::kFloat32, device());
}

TEST_P(Checkpoint, TransformerLossAndEveryGradientEqualThePlainModelInBf16) {
  expect_same_step(Precision::kBFloat16, device());
}

TEST_P(Checkpoint, EvaluationAndNoGradForwardsAreThePlainOnes) {
  torch::manual_seed(5);
  models::TransformerModel plain(dropout_model(false), models::Vocabularies{40, 40, 1, false});
  torch::manual_seed(5);
  models::TransformerModel checkpointed(dropout_model(true), models::Vocabularies{40, 40, 1, false});
  plain.to(device());
  checkpointed.to(device());
  plain.eval();
  checkpointed.eval();
  auto tokens = torch::TensorOptions().dtype(at::kLong).device(device());
  at::Tensor src = torch::randint(4, 40, {2, 5}, tokens);
  at::Tensor prev = torch::randint(4, 40, {2, 4}, tokens);
  at::Tensor lengths = torch::full({2}, 5, tokens);
  expect_bitwise_equal(plain.forward(src, lengths, prev), checkpointed.forward(src, lengths, prev), "eval logits");
}

INSTANTIATE_TEST_SUITE_P(Devices, Checkpoint, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

}  // namespace
}  // namespace fairseq_cpp::nn
