#include "fairseq_cpp/nn/linear.h"

#include <cmath>

#include <torch/nn/init.h>

#include "fairseq_cpp/core/torch.h"

namespace fairseq_cpp::nn {

namespace {
thread_local bool t_initialise = true;
}  // namespace

ParametersFromCheckpoint::ParametersFromCheckpoint() : previous_(t_initialise) { t_initialise = false; }
ParametersFromCheckpoint::~ParametersFromCheckpoint() { t_initialise = previous_; }

bool initialise_parameters() { return t_initialise; }

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias)
    : in_features(in), out_features(out), with_bias(with_bias) {
  reset();
}

void LinearImpl::reset() {
  weight = register_parameter("weight", torch::empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", torch::empty({out_features}));
  if (!initialise_parameters()) return;
  // torch::nn::Linear's reset_parameters, call for call.
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) {
    const int64_t fan_in = std::get<0>(torch::nn::init::_calculate_fan_in_and_fan_out(weight));
    const double bound = 1 / std::sqrt(fan_in);
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

void LinearImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "fairseq_cpp::nn::Linear(in_features=" << in_features << ", out_features=" << out_features
         << ", bias=" << with_bias << ")";
}

}  // namespace fairseq_cpp::nn
