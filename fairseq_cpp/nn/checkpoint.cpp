#include "fairseq_cpp/nn/checkpoint.h"

#include <mutex>
#include <utility>

#include <ATen/autocast_mode.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/autocast_state.h"
#include "fairseq_cpp/nn/low_precision_copies.h"

namespace fairseq_cpp::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The default generators that a block's dropout draws from: the CPU's, and its CUDA device's.
std::vector<at::Generator> generators_of(const at::Device& device) {
  std::vector<at::Generator> generators{at::detail::getDefaultCPUGenerator()};
  if (device.is_cuda()) generators.push_back(at::globalContext().defaultGenerator(device));
  return generators;
}

std::vector<at::Tensor> states_of(const std::vector<at::Generator>& generators) {
  std::vector<at::Tensor> states;
  for (const at::Generator& generator : generators) {
    std::lock_guard<std::mutex> lock(const_cast<at::Generator&>(generator).mutex());
    states.push_back(generator.get_state());
  }
  return states;
}

void set_states(std::vector<at::Generator>& generators, const std::vector<at::Tensor>& states) {
  for (size_t i = 0; i < generators.size(); ++i) {
    std::lock_guard<std::mutex> lock(generators[i].mutex());
    generators[i].set_state(states[i]);
  }
}

// What the forward pass leaves for the replay: the block and the state it ran under.
struct Replay : torch::CustomClassHolder {
  CheckpointedBlock block;
  at::Device device = at::kCPU;
  std::vector<at::Tensor> rng_states;  // generators_of(device)'s states before the forward
  compat::AutocastState autocast;      // autocast of device's kind during the forward
  std::vector<at::Tensor> params;      // the parameters the block reads
};

// The block run on detached copies of `inputs` with gradients on: the same kernels in the forward
// pass and in its replay (some choose by grad mode), and a graph for the replay's backward. The
// block reads each copy through an alias, a view, as the plain block reads a tensor that is no
// leaf: autocast caches its casts of leaves that need gradients (of weights, once per forward),
// and one cached bf16 copy of an input read three times would sum its gradients in bf16.
std::pair<at::Tensor, std::vector<at::Tensor>> run_block(const Replay& replay, at::TensorList inputs) {
  std::vector<at::Tensor> leaves;
  std::vector<at::Tensor> views;
  at::AutoGradMode grad(true);
  for (const at::Tensor& x : inputs) {
    leaves.push_back(x.detach().requires_grad_(x.requires_grad()));
    views.push_back(leaves.back().alias());
  }
  at::Tensor out = replay.block(views);
  return {out, leaves};
}

// The forward's random and autocast state for the scope of the replay; the current state after.
class ReplayScope {
 public:
  explicit ReplayScope(const Replay& replay)
      : device_(replay.device.type()),
        generators_(generators_of(replay.device)),
        rng_(states_of(generators_)),
        autocast_(device_, replay.autocast) {
    set_states(generators_, replay.rng_states);
    if (replay.autocast.enabled) at::autocast::increment_nesting();
    nested_ = replay.autocast.enabled;
  }
  ~ReplayScope() {
    if (nested_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_states(generators_, rng_);
  }
  ReplayScope(const ReplayScope&) = delete;
  ReplayScope& operator=(const ReplayScope&) = delete;

 private:
  c10::DeviceType device_;
  std::vector<at::Generator> generators_;
  std::vector<at::Tensor> rng_;
  compat::AutocastStateScope autocast_;  // restored after the cache is cleared
  bool nested_ = false;
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  // `params` are read by the block; as arguments, their gradients flow through this node.
  static at::Tensor forward(AutogradContext* ctx, at::TensorList inputs, at::TensorList params,
                            c10::intrusive_ptr<Replay> replay) {
    replay->rng_states = states_of(generators_of(replay->device));
    replay->autocast = compat::autocast_state(replay->device.type());
    replay->params = params.vec();
    at::Tensor out = run_block(*replay, inputs).first.detach();
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["replay"] = c10::IValue::make_capsule(std::move(replay));
    return out;
  }

  // One gradient per argument of forward: each input, each parameter, none for the replay.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto replay = c10::static_intrusive_pointer_cast<Replay>(ctx->saved_data["replay"].toCapsule());
    std::pair<at::Tensor, std::vector<at::Tensor>> ran;
    {
      ReplayScope scope(*replay);
      ran = run_block(*replay, ctx->get_saved_variables());
    }
    std::vector<at::Tensor> sources = ran.second;
    sources.insert(sources.end(), replay->params.begin(), replay->params.end());
    variable_list wanted;
    for (const at::Tensor& source : sources) {
      if (source.requires_grad()) wanted.push_back(source);
    }
    variable_list found = torch::autograd::grad({ran.first}, wanted, {grads[0]}, /*retain_graph=*/false,
                                                /*create_graph=*/false, /*allow_unused=*/true);
    variable_list result;
    size_t next = 0;
    for (const at::Tensor& source : sources) result.push_back(source.requires_grad() ? found[next++] : at::Tensor());
    result.emplace_back();
    return result;
  }
};

}  // namespace

at::Tensor checkpoint(CheckpointedBlock block, const std::vector<at::Tensor>& inputs,
                      const std::vector<at::Tensor>& params) {
  auto replay = c10::make_intrusive<Replay>();
  replay->block = std::move(block);
  replay->device = inputs.at(0).device();
  // A parameter the block reads through its low-precision copy (training in bf16) takes its
  // gradient through that copy: the replay's gradient is taken with respect to it.
  std::vector<at::Tensor> sources;
  for (const at::Tensor& p : params) {
    at::Tensor copy = low_precision_copy(p);
    sources.push_back(copy.defined() ? copy : p);
  }
  return CheckpointFunction::apply(at::TensorList(inputs), at::TensorList(sources), std::move(replay));
}

}  // namespace fairseq_cpp::nn
