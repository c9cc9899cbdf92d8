// Training's low-precision copies of the linear layers' weights (nn/low_precision_copies.h): a copy
// is read only under autocast in its dtype and only until its weight changes; the product and the
// gradient it gives equal autocast's own cast to the bit, on each device.
#include <gtest/gtest.h>

#include "tests/support/torch.h"

#include "fairseq_cpp/nn/low_precision_copies.h"
#include "fairseq_cpp/nn/packed_linear.h"
#include "fairseq_cpp/nn/widened_bf16.h"
#include "fairseq_cpp/optim/mixed_precision.h"
#include "tests/support/devices.h"

namespace fairseq_cpp::nn {
namespace {

using optim::AutocastScope;
using optim::Precision;

class LowPrecision : public ::testing::TestWithParam<std::string> {
 protected:
  torch::Device device() const { return torch::Device(GetParam()); }
};

// A flat float32 buffer of a (6, 4) weight, its bias (6) and a layer norm's scale (4), as the
// optimizer flattens parameters: each keeps its own version counter over the shared storage.
struct FlatLayer {
  explicit FlatLayer(const torch::Device& device) {
    torch::manual_seed(5);
    flat = torch::randn({34}, torch::TensorOptions().device(device));
    const std::vector<std::pair<int64_t, std::vector<int64_t>>> layout{{0, {6, 4}}, {24, {6}}, {30, {4}}};
    for (const auto& [offset, shape] : layout) {
      at::Tensor p = torch::empty(shape, flat.options());
      p.set_data(flat.narrow(0, offset, p.numel()).view(shape));
      params.push_back(p);
    }
  }
  at::Tensor flat;
  std::vector<at::Tensor> params;
};

TEST_P(LowPrecision, ACopyIsReadUnderItsAutocastUntilItsWeightChanges) {
  FlatLayer layer(device());
  const at::Tensor& weight = layer.params[0];
  {
    LowPrecisionCopies copies(layer.params, layer.flat, {true, true, false}, at::kBFloat16);
    EXPECT_EQ(copies.bytes(), 2 * 2 * 30) << "values and gradients of the span [0, 30) in bf16";
    {
      AutocastScope autocast(Precision::kBFloat16, device().type());
      EXPECT_FALSE(low_precision_copy(weight).defined()) << "not filled yet";
    }
    copies.refresh();
    EXPECT_FALSE(low_precision_copy(weight).defined()) << "outside autocast";
    {
      AutocastScope autocast(Precision::kBFloat16, device().type());
      const at::Tensor copy = low_precision_copy(weight);
      ASSERT_TRUE(copy.defined());
      EXPECT_EQ(copy.scalar_type(), at::kBFloat16);
      EXPECT_TRUE(torch::equal(copy.cpu(), weight.to(at::kBFloat16).cpu()));
      EXPECT_TRUE(low_precision_copy(layer.params[1]).defined());
      EXPECT_FALSE(low_precision_copy(layer.params[2].detach()).defined()) << "no copy registered";
      EXPECT_FALSE(low_precision_copy(layer.params[2]).defined()) << "no copy registered";
      {
        at::NoGradGuard no_grad;
        layer.params[0].add_(1.0);
      }
      EXPECT_FALSE(low_precision_copy(weight).defined()) << "the weight changed since refresh()";
      EXPECT_TRUE(low_precision_copy(layer.params[1]).defined()) << "the bias did not";
      // Another storage swapped in without a version bump (EmaWeights' set_data), then back.
      const at::Tensor own = layer.params[1].variable_data();
      layer.params[1].set_data(own.clone());
      EXPECT_FALSE(low_precision_copy(layer.params[1]).defined()) << "other storage, the same values";
      layer.params[1].set_data(own);
      EXPECT_TRUE(low_precision_copy(layer.params[1]).defined()) << "its own storage again";
    }
    copies.refresh();
    AutocastScope autocast(Precision::kBFloat16, device().type());
    const at::Tensor copy = low_precision_copy(weight);
    ASSERT_TRUE(copy.defined());
    EXPECT_TRUE(torch::equal(copy.cpu(), weight.to(at::kBFloat16).cpu())) << "refilled";
  }
  AutocastScope autocast(Precision::kBFloat16, device().type());
  EXPECT_FALSE(low_precision_copy(weight).defined()) << "unregistered with its LowPrecisionCopies";
  // Two at once (another trainer of the same weights): the one constructed last owns them. The
  // other's refresh() registers nothing and makes the owner's copies unread until the owner
  // refreshes (the other's forward pass must not send gradients to the owner's copies); the end
  // of the other leaves the owner's copies alone; after the owner's end, the other takes its
  // weights back at its next refresh.
  auto first = std::make_unique<LowPrecisionCopies>(layer.params, layer.flat, std::vector<bool>{true, true, false},
                                                    at::kBFloat16);
  auto second = std::make_unique<LowPrecisionCopies>(layer.params, layer.flat, std::vector<bool>{true, true, false},
                                                     at::kBFloat16);
  first->refresh();
  EXPECT_FALSE(low_precision_copy(weight).defined()) << "the first's refresh fills no copy that is read";
  second->refresh();
  EXPECT_TRUE(low_precision_copy(weight).is_same(second->gradient_source(0)));
  first->refresh();
  EXPECT_FALSE(low_precision_copy(weight).defined()) << "the first trains: the owner's copies unread";
  second->refresh();
  EXPECT_TRUE(low_precision_copy(weight).is_same(second->gradient_source(0)));
  first.reset();
  EXPECT_TRUE(low_precision_copy(weight).is_same(second->gradient_source(0))) << "the owner outlives the first";
  first = std::make_unique<LowPrecisionCopies>(layer.params, layer.flat, std::vector<bool>{true, true, false},
                                               at::kBFloat16);
  second.reset();
  first->refresh();
  EXPECT_TRUE(low_precision_copy(weight).is_same(first->gradient_source(0))) << "the newer one owns them";
  auto third = std::make_unique<LowPrecisionCopies>(layer.params, layer.flat, std::vector<bool>{true, true, false},
                                                    at::kBFloat16);
  third.reset();
  EXPECT_FALSE(low_precision_copy(weight).defined()) << "taken by a newer one, which ended";
  first->refresh();
  EXPECT_TRUE(low_precision_copy(weight).is_same(first->gradient_source(0))) << "taken back at its refresh";
  // A weight moved off the flat buffer (another optimizer's flatten) with its version kept.
  const at::Tensor own = layer.params[0].variable_data();
  layer.params[0].set_data(own.clone());
  first->refresh();
  EXPECT_FALSE(low_precision_copy(weight).defined()) << "filled from the flat buffer, which the weight left";
  layer.params[0].set_data(own);
}

// scoped_linear through the copies against scoped_linear of separate float32 leaves holding the
// same values (autocast's casts; on a CPU without bf16 products, their widened products): the same
// output, and the weight's and bias's gradients, folded into the flat float32 gradients, are the
// leaves' to the bit (added twice: two backward passes accumulate).
TEST_P(LowPrecision, ProductsAndFoldedGradientsAreAutocasts) {
  // On the CPU both ways on any CPU: LibTorch's bf16 products and the widened ones (widened_bf16.h).
  for (Bf16Widening widening : {Bf16Widening::kNever, Bf16Widening::kAlways}) {
    SCOPED_TRACE(widening == Bf16Widening::kNever ? "LibTorch's products" : "widened");
    set_bf16_widening(widening);
    FlatLayer layer(device());
    const auto options = torch::TensorOptions().device(device());
    const at::Tensor x = torch::randn({3, 5, 4}, options), upstream = torch::randn({3, 5, 6}, options);
    at::Tensor w = layer.params[0].detach().clone().requires_grad_(true);
    at::Tensor b = layer.params[1].detach().clone().requires_grad_(true);
    at::Tensor flat_grads = torch::zeros({34}, options);
    LowPrecisionCopies copies(layer.params, layer.flat, {true, true, false}, at::kBFloat16);
    copies.refresh();
    const int64_t reads = low_precision_copy_reads();
    for (int pass = 0; pass < 2; ++pass) {
      at::Tensor plain, copied;
      {
        AutocastScope autocast(Precision::kBFloat16, device().type());
        plain = scoped_linear(x, w, b);
        copied = scoped_linear(x, layer.params[0], layer.params[1]);
      }
      EXPECT_TRUE(torch::equal(plain.cpu(), copied.cpu())) << "pass " << pass;
      if (device().is_cpu()) {
        EXPECT_EQ(copied.grad_fn()->name().find("WidenedLinear") != std::string::npos,
                  widening == Bf16Widening::kAlways);
      }
      (plain.to(at::kFloat) * upstream).sum().backward();
      (copied.to(at::kFloat) * upstream).sum().backward();
      EXPECT_TRUE(copies.gradient_source(0).grad().ne(0).any().item<bool>());
      copies.fold_gradients(flat_grads, 0, 34);
      EXPECT_TRUE(copies.gradient_source(0).grad().eq(0).all().item<bool>()) << "zeroed once folded";
      EXPECT_TRUE(torch::equal(flat_grads.narrow(0, 0, 24).view({6, 4}).cpu(), w.grad().cpu())) << "pass " << pass;
      EXPECT_TRUE(torch::equal(flat_grads.narrow(0, 24, 6).cpu(), b.grad().cpu())) << "pass " << pass;
      EXPECT_TRUE(flat_grads.narrow(0, 30, 4).eq(0).all().item<bool>());
    }
    EXPECT_EQ(low_precision_copy_reads() - reads, 4) << "weight and bias, twice";
    EXPECT_TRUE(copies.gradient_source(2).is_same(layer.params[2])) << "no copy: the parameter itself";
    EXPECT_FALSE(copies.gradient_source(0).is_same(layer.params[0]));
  }
  set_bf16_widening(Bf16Widening::kAuto);
}

INSTANTIATE_TEST_SUITE_P(Devices, LowPrecision, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

}  // namespace
}  // namespace fairseq_cpp::nn
