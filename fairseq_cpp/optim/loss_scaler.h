#pragma once
// fairseq's DynamicLossScaler (fairseq/optim/dynamic_loss_scaler.py) for --fp16: the loss is
// multiplied by the scale before backward and the gradients divided by it after; an update whose
// gradient norm is not finite is skipped and halves the scale (once the overflowing share of the
// updates since the last change reaches `tolerance`), and `scale_window` updates in a row without
// overflow double it. Every rank sees the same all-reduced norm, so every rank decides alike.
//
//   DynamicLossScaler scaler({128, 2.0, 2000});
//   (loss * scaler.loss_scale()).backward();  ...  gnorm = norm(grads / scale)
//   if (!std::isfinite(gnorm)) scaler.overflow();  // skip; throws below min_loss_scale
//   else { optimizer.step(); scaler.update(); }

#include <cstdint>
#include <optional>

namespace fairseq_cpp::optim {

struct LossScalerOptions {
  double init_scale = 128.0;          // the first scale (fairseq's fp16_init_scale, 2^7)
  double scale_factor = 2.0;          // the scale is multiplied or divided by this
  int64_t scale_window = 2000;        // updates without overflow before the scale grows
  double tolerance = 0.0;             // share of overflowing updates since the last change tolerated
  std::optional<double> threshold;    // never lower the scale below this; unset = no floor
  double min_loss_scale = 1e-4;       // stop training when an overflow brings the scale to this or below
};

// Where the scaler stands: saved in checkpoints so that a resume continues exactly.
struct LossScalerState {
  double loss_scale = 128.0;
  int64_t iter = 0;                     // updates seen (overflowing ones included)
  int64_t last_overflow_iter = -1;
  int64_t last_rescale_iter = -1;
  int64_t overflows_since_rescale = 0;
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(const LossScalerOptions& options);

  double loss_scale() const { return state_.loss_scale; }
  // After an update that was applied: grows the scale every scale_window updates since the last overflow.
  void update();
  // After an update whose gradient norm was not finite (the update is skipped). Throws
  // OperationalError ("Minimum loss scale reached ...") when the scale would reach min_loss_scale;
  // the scale then stays as it was.
  void overflow();
  // overflow() without the throw: false, and nothing changed, where the scale would reach
  // min_loss_scale (the caller then stops or falls back to another precision).
  bool try_overflow();
  // A fresh scaler: init_scale, no update seen (after a spell in another precision).
  void reset() { state_ = LossScalerState{options_.init_scale}; }
  double min_loss_scale() const { return options_.min_loss_scale; }

  const LossScalerState& state() const { return state_; }
  void load_state(const LossScalerState& state) { state_ = state; }

 private:
  LossScalerOptions options_;
  LossScalerState state_;
};

}  // namespace fairseq_cpp::optim
