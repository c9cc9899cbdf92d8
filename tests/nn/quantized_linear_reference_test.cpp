// The int8 linear layer (AVX-512 VNNI kernel) against tests/nn/quantized_linear_reference.py: the
// same quantization computed by hand with PyTorch (and PyTorch's own per-channel quantizer for the
// weights) on the same inputs, run by the lane's Python (FSQ_PYTHON).
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <sstream>

#include "tests/support/torch.h"

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/nn/quantized_linear.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::nn {
namespace {

TEST(Int8LinearReference, EqualsAPythonComputationOfTheSameQuantization) {
  if (!int8_linear_supported()) GTEST_SKIP() << int8_linear_unsupported_reason();
  torch::manual_seed(13);
  auto cases = checkpoint::new_state_dict();
  struct Case {
    std::string name;
    int64_t m, n, k;
  };
  const std::vector<Case> shapes = {{"tiny", 1, 1, 3},           {"ragged", 9, 33, 18},
                                    {"attention", 40, 256, 256}, {"ffn_out", 23, 256, 1024},
                                    {"ffn_in", 17, 1024, 256},   {"vocabulary", 5, 8000, 256}};
  for (const Case& c : shapes) {
    at::Tensor x = torch::randn({c.m, c.k});
    if (c.m > 2) x[1].mul_(1e-3);  // a row far smaller than the others: per-row scales matter
    at::Tensor w = torch::randn({c.n, c.k}) * 0.05;
    at::Tensor b = torch::randn({c.n});
    Int8Weight q = Int8Weight::quantize(w);
    auto put = [&](const std::string& key, const at::Tensor& t) { cases.insert(c.name + "." + key, t.contiguous()); };
    put("x", x);
    put("w", w);
    put("b", b);
    put("values", q.values());
    put("scales", q.scales());
    put("y", int8_linear(x, q, b));
  }
  testing::TempDir dir;
  const std::string path = dir.path() + "/cases.pt";
  checkpoint::save_file(path, cases);
  auto r = testing::run(
      {testing::python_executable(), testing::source_dir() + "/tests/nn/quantized_linear_reference.py", path});
  ASSERT_EQ(r.exit_code, 0) << "Python reference failed (is torch installed for " << testing::python_executable()
                            << "?)\n"
                            << r.err;
  std::cout << "case, |y - y_ref| / max|y_ref|, weights != hand, weights != torch's, max step, scale diff, "
               "error against float:\n"
            << r.out;
  std::istringstream lines(r.out);
  std::string name;
  double diff, scale_diff, float_err, lib_max;
  int64_t hand, lib;
  int seen = 0;
  while (lines >> name >> diff >> hand >> lib >> lib_max >> scale_diff >> float_err) {
    ++seen;
    EXPECT_LT(diff, 1e-5) << name << ": result against the hand computation";
    EXPECT_EQ(hand, 0) << name << ": int8 weights differing from the hand computation";
    // torch's quantizer multiplies by the reciprocal of the scale: a value next to a rounding
    // boundary may land one step away, rarely.
    EXPECT_LE(lib_max, 1) << name;
    const auto shape = std::find_if(shapes.begin(), shapes.end(), [&](const Case& c) { return c.name == name; });
    ASSERT_NE(shape, shapes.end()) << name;
    EXPECT_LE(lib, std::max<int64_t>(1, shape->n * shape->k / 1000)) << name << ": weights differing from torch's";
    EXPECT_LT(scale_diff, 1e-12) << name;
    EXPECT_LT(float_err, 0.03) << name << ": the quantized product against the float one";
  }
  EXPECT_EQ(seen, static_cast<int>(shapes.size())) << r.out;
}

}  // namespace
}  // namespace fairseq_cpp::nn
