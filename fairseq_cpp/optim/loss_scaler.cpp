#include "fairseq_cpp/optim/loss_scaler.h"

#include <algorithm>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::optim {

DynamicLossScaler::DynamicLossScaler(const LossScalerOptions& options) : options_(options) {
  state_.loss_scale = options.init_scale;
}

void DynamicLossScaler::update() {
  if ((state_.iter - state_.last_overflow_iter) % options_.scale_window == 0) {
    state_.loss_scale *= options_.scale_factor;
    state_.last_rescale_iter = state_.iter;
  }
  ++state_.iter;
}

void DynamicLossScaler::overflow() {
  const double previous = state_.loss_scale;
  const int64_t since_rescale = state_.iter - state_.last_rescale_iter;
  state_.last_overflow_iter = state_.iter;
  ++state_.overflows_since_rescale;
  const double share = static_cast<double>(state_.overflows_since_rescale) / static_cast<double>(since_rescale);
  if (share >= options_.tolerance) {
    state_.loss_scale /= options_.scale_factor;
    if (options_.threshold) state_.loss_scale = std::max(state_.loss_scale, *options_.threshold);
    state_.last_rescale_iter = state_.iter;
    state_.overflows_since_rescale = 0;
  }
  if (state_.loss_scale <= options_.min_loss_scale) {
    state_.loss_scale = previous;
    raise<OperationalError>(
        "Minimum loss scale reached ({}). Your loss is probably exploding. Try lowering the learning rate, using "
        "gradient clipping or increasing the batch size.",
        options_.min_loss_scale);
  }
  ++state_.iter;
}

}  // namespace fairseq_cpp::optim
