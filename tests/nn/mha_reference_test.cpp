// The attention module (matmul-softmax-matmul on LibTorch 1.13, fused on 2.x) against PyTorch's
// own multi_head_attention_forward run by Debian's python3-torch on the same inputs and weights. The
// module runs on each device; the reference on the CPU, on the same inputs and weights.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/support/torch.h"

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/nn/attention.h"
#include "tests/support/devices.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::nn {
namespace {

class AttentionReference : public ::testing::TestWithParam<std::string> {
 protected:
  torch::Device device() const { return torch::Device(GetParam()); }
  // The largest |ours - PyTorch's| allowed: CPU float32, and CUDA float32 (other kernels and orders).
  double tolerance() const { return device().is_cuda() ? 1e-4 : 1e-5; }
};

TEST_P(AttentionReference, EqualsPytorchsMultiHeadAttentionForward) {
  torch::manual_seed(7);
  torch::NoGradGuard no_grad;
  auto cases = checkpoint::new_state_dict();
  struct Case {
    std::string name;
    int64_t batch, tgt, src, dim, heads;
    bool causal, padding;
  };
  for (const Case& c :
       {Case{"self_causal", 2, 5, 5, 16, 4, true, false}, Case{"cross_padded", 3, 4, 7, 12, 3, false, true},
        Case{"self_both", 2, 6, 6, 8, 2, true, true}}) {
    MultiheadAttention mha(MultiheadAttentionOptions{c.dim, c.heads, 0.0});
    at::Tensor query = torch::randn({c.batch, c.tgt, c.dim});
    at::Tensor key = c.causal ? query : torch::randn({c.batch, c.src, c.dim});
    at::Tensor pad = torch::empty({0}, torch::kBool);
    if (c.padding) {
      pad = torch::zeros({c.batch, c.src}, torch::kBool);
      pad[0].narrow(0, c.src - 2, 2).fill_(true);  // right padding keeps key 0 for every query
    }
    at::Tensor mask = c.causal ? causal_mask(c.tgt, torch::kCPU) : torch::empty({0}, torch::kBool);
    // Inputs and weights drawn on the CPU above; the forward pass on the device.
    mha->to(device());
    const at::Tensor query_on_device = query.to(device());
    const at::Tensor key_on_device = c.causal ? query_on_device : key.to(device());  // self-attention: one tensor
    // Evaluation and training without dropout: two cases of the same inputs and weights.
    for (const bool training : {false, true}) {
      mha->train(training);
      at::Tensor out = mha->forward(query_on_device, key_on_device, pad.numel() ? pad.to(device()) : at::Tensor(),
                                    mask.numel() ? mask.to(device()) : at::Tensor())
                           .to(torch::kCPU);
      const std::string name = c.name + (training ? "_training" : "");
      auto put = [&](const std::string& k, const at::Tensor& t) {
        cases.insert(name + "." + k, t.to(torch::kCPU).contiguous());
      };
      put("query", query);
      put("key", key);
      put("heads", torch::tensor({c.heads}));
      put("key_padding_mask", pad);
      put("attn_mask", mask);
      for (const auto& p : mha->named_parameters()) put(p.key(), p.value());
      put("out", out);
    }
  }
  testing::TempDir dir;
  const std::string path = dir.path() + "/cases.pt";
  checkpoint::save_file(path, cases);
  auto r = testing::run({testing::python_executable(), testing::source_dir() + "/tests/nn/mha_reference.py", path});
  ASSERT_EQ(r.exit_code, 0) << "python3-torch reference failed (is python3-torch installed?)\n" << r.err;
  std::istringstream lines(r.out);
  std::string name;
  double diff;
  int seen = 0;
  while (lines >> name >> diff) {
    EXPECT_LT(diff, tolerance()) << name;
    ++seen;
  }
  EXPECT_EQ(seen, 6) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Devices, AttentionReference, ::testing::ValuesIn(testing::test_devices()),
                         testing::device_name);

}  // namespace
}  // namespace fairseq_cpp::nn
