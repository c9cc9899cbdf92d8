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
  if (!try_overflow())
    raise<OperationalError>(
        "Minimum loss scale reached ({}). Your loss is probably exploding. Try lowering the learning rate, using "
        "gradient clipping or increasing the batch size.",
        options_.min_loss_scale);
}

bool DynamicLossScaler::try_overflow() {
  LossScalerState next = state_;
  const int64_t since_rescale = next.iter - next.last_rescale_iter;
  next.last_overflow_iter = next.iter;
  ++next.overflows_since_rescale;
  const double share = static_cast<double>(next.overflows_since_rescale) / static_cast<double>(since_rescale);
  if (share >= options_.tolerance) {
    next.loss_scale /= options_.scale_factor;
    if (options_.threshold) next.loss_scale = std::max(next.loss_scale, *options_.threshold);
    next.last_rescale_iter = next.iter;
    next.overflows_since_rescale = 0;
  }
  if (next.loss_scale <= options_.min_loss_scale) return false;
  ++next.iter;
  state_ = next;
  return true;
}

}  // namespace fairseq_cpp::optim
