// Our checkpoint files as Python sees them: torch.load reads them with plain dicts and tensors. In
// the wheel lane that is torch 2.x, whose torch.load defaults to weights_only=True: a checkpoint
// must name no global but a tensor's, whatever it holds.
#include <gtest/gtest.h>

#include "tests/support/torch.h"

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/optim/optimizer.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::checkpoint {
namespace {

TEST(CheckpointInterop, PythonTorchLoadReadsOurFile) {
  testing::TempDir dir;
  StateDict state = new_state_dict();
  TensorDict model;
  model.insert("encoder.embed_tokens.weight", torch::arange(6, torch::kFloat32).view({2, 3}));
  model.insert("decoder.embed_tokens.weight", model.at("encoder.embed_tokens.weight"));
  state.insert(kModelKey, model);
  state.insert(kConfigKey, config::dump_config(config::Config{}));
  const std::string path = dir.path() + "/c.pt";
  save_file(path, state);
  const char* script =
      "import sys, torch, yaml\n"
      "c = torch.load(sys.argv[1])\n"
      "m = c['model']\n"
      "print(sorted(c.keys()), type(m).__name__, m['decoder.embed_tokens.weight'].sum().item(),\n"
      "      yaml.safe_load(c['cfg'])['model']['arch'])\n";
  auto r = testing::run({testing::python_executable(), "-c", script, path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "['cfg', 'model'] dict 15.0 transformer\n");
}

TEST(CheckpointInterop, PythonTorchLoadReadsTrainingStateWithItsDefaults) {
  // An Adam state after one step (lists of ints and of tensors), a float and nested dicts, as a
  // training checkpoint holds them; torch.load with its defaults, then our own reader.
  testing::TempDir dir;
  std::vector<at::Tensor> params{torch::ones({2, 2}).requires_grad_(), torch::ones({3}).requires_grad_()};
  for (auto& p : params) p.mutable_grad() = torch::full_like(p, 0.5);
  auto adam = optim::build_optimizer(optim::OptimizerOptions{}, params);
  adam->step();
  StateDict state = new_state_dict();
  TensorDict model;
  model.insert("w", params[0].detach());
  state.insert(kModelKey, model);
  state.insert(kConfigKey, config::dump_config(config::Config{}));
  state.insert("optimizer", adam->state_dict());
  StateDict extra = new_state_dict();
  extra.insert("num_updates", int64_t{7});
  extra.insert("best", 4.25);
  state.insert("extra_state", extra);
  const std::string path = dir.path() + "/c.pt";
  save_file(path, state);
  const char* script =
      "import sys, torch\n"
      "c = torch.load(sys.argv[1])\n"
      "o = c['optimizer']\n"
      "print(o['name'], o['step'], [tuple(t.shape) for t in o['exp_avg']], c['extra_state']['best'])\n";
  auto r = testing::run({testing::python_executable(), "-c", script, path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "adam [1, 1] [(2, 2), (3,)] 4.25\n");
  // And back: the untyped lists load into a fresh optimizer with the same moments.
  auto loaded = load_file(path);
  auto again = optim::build_optimizer(optim::OptimizerOptions{}, params);
  again->load_state_dict(loaded.at("optimizer").toGenericDict());
  auto a = adam->state_dict(), b = again->state_dict();
  EXPECT_TRUE(torch::equal(a.at("exp_avg_sq").toTensorVector()[1], b.at("exp_avg_sq").toTensorVector()[1]));
  EXPECT_EQ(b.at("step").toIntVector(), (std::vector<int64_t>{1, 1}));
  // Typed lists, as in memory and in checkpoints written before lists were stored untyped.
  ASSERT_TRUE(a.at("step").isIntList());
  again->load_state_dict(a);
  EXPECT_EQ(again->state_dict().at("step").toIntVector(), (std::vector<int64_t>{1, 1}));
}

}  // namespace
}  // namespace fairseq_cpp::checkpoint
