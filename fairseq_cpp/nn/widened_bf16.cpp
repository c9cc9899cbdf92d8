#include "fairseq_cpp/nn/widened_bf16.h"

#include <atomic>
#include <vector>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "fairseq_cpp/core/autocast_state.h"
#include "fairseq_cpp/core/runtime.h"

namespace fairseq_cpp::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<Bf16Widening> widening{Bf16Widening::kAuto};

at::Tensor widen(const at::Tensor& t) { return t.to(at::kFloat); }

// y = x w^T (+ b) over bf16 operands {x, w} or {x, w, b} (a list: LibTorch 1.13's apply takes
// no undefined tensor), through float32 products; saves the bf16 x and w only.
struct WidenedLinear : public torch::autograd::Function<WidenedLinear> {
  static at::Tensor forward(AutogradContext* ctx, at::TensorList operands) {
    CpuAutocastOff off;
    const at::Tensor &x = operands[0], &weight = operands[1];
    ctx->save_for_backward({x, weight});
    ctx->saved_data["bias"] = operands.size() > 2;
    return at::linear(widen(x), widen(weight), operands.size() > 2 ? widen(operands[2]) : at::Tensor())
        .to(at::kBFloat16);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    CpuAutocastOff off;
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor g = widen(grads[0]).reshape({-1, weight.size(0)});
    variable_list out(ctx->saved_data["bias"].toBool() ? 3 : 2);
    if (ctx->needs_input_grad(0)) out[0] = g.mm(widen(weight)).view(x.sizes()).to(at::kBFloat16);
    if (ctx->needs_input_grad(1)) out[1] = g.t().mm(widen(x).reshape({-1, weight.size(1)})).to(at::kBFloat16);
    if (out.size() > 2 && ctx->needs_input_grad(2)) out[2] = g.sum(0).to(at::kBFloat16);
    return out;
  }
};

}  // namespace

bool widens_bf16_products(const at::Tensor& x) {
  // Autocast rounds float32 operands (and bf16 ones are bf16 already); it leaves float64 alone.
  if (!x.defined() || !x.is_cpu() || (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16)) return false;
  const compat::AutocastState autocast = compat::autocast_state(c10::DeviceType::CPU);
  if (!autocast.enabled || autocast.dtype != at::kBFloat16) return false;
  switch (widening.load(std::memory_order_relaxed)) {
    case Bf16Widening::kAlways:
      return true;
    case Bf16Widening::kNever:
      return false;
    case Bf16Widening::kAuto:
      break;
  }
  return !core::cpu_has_bf16_products();
}

void set_bf16_widening(Bf16Widening when) { widening.store(when); }

at::Tensor widened_bf16_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  // The roundings autocast makes, outside the node (a cast, which autocast leaves alone): their
  // gradients take each operand's dtype.
  std::vector<at::Tensor> operands{x, weight};
  if (bias.defined()) operands.push_back(bias);
  for (at::Tensor& t : operands) t = t.to(at::kBFloat16);
  return WidenedLinear::apply(at::TensorList(operands));
}

}  // namespace fairseq_cpp::nn
