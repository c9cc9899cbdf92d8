// Our checkpoint files as Python sees them: torch.load reads them with plain dicts and tensors.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/config/config.h"
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
  auto r = testing::run({"/usr/bin/python3", "-c", script, path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "['cfg', 'model'] dict 15.0 transformer\n");
}

}  // namespace
}  // namespace fairseq_cpp::checkpoint
