#pragma once
// fairseq's learning-rate schedulers. The trainer calls step_update(num_updates) after every
// update and step(epoch, val_loss) at the end of every epoch, and gives the returned rate to the
// optimizer. Peak rate = optimization.lr[0].
//   inverse_sqrt:         linear warm-up from warmup_init_lr, then lr * sqrt(warmup / n)
//   fixed:                lr[epoch] (last value after), warm-up factor (n + 1) / warmup, force_anneal shrink
//   polynomial_decay:     warm-up, then (lr - end) * (1 - (n - w) / (total - w))^power + end
//   cosine:               warm-up, then SGDR cosine periods between min_lr and lr, t_mult, lr_shrink
//   reduce_lr_on_plateau: warm-up, then lr *= lr_shrink after lr_patience epochs without improvement

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/optim/optimizer.h"

namespace fairseq_cpp::optim {

struct LrSchedulerOptions {
  std::string name = "fixed";      // fixed | inverse_sqrt | polynomial_decay | cosine | reduce_lr_on_plateau
  std::vector<double> lr{0.25};    // optimization.lr: the peak (fixed: one per epoch)
  int64_t warmup_updates = 0;      // linear warm-up updates; 0 = none
  double warmup_init_lr = -1.0;    // warm-up start; < 0 = 0 with warm-up, else lr (cosine: min_lr)
  double end_learning_rate = 0.0;  // polynomial_decay: final lr
  double power = 1.0;              // polynomial_decay: exponent
  int64_t total_num_update = 0;    // polynomial_decay: updates to decay over; 0 = max_update
  int64_t force_anneal = 0;        // fixed: shrink the lr every epoch from this epoch on; 0 = never
  double lr_shrink = 0.1;          // fixed/cosine/plateau shrink factor
  double lr_threshold = 1e-4;      // plateau: relative improvement that counts
  int64_t lr_patience = 0;         // plateau: epochs without improvement before shrinking
  double min_lr = 0.0;             // cosine: lowest lr
  double t_mult = 1.0;             // cosine: period growth factor
  int64_t lr_period_updates = -1;  // cosine: first period; <= 0 = max_update - warmup_updates
  int64_t max_update = 0;          // optimization.max_update
  bool maximize_metric = false;    // plateau: larger validation metric is better
};

LrSchedulerOptions lr_scheduler_options(const config::LrSchedulerConfig& scheduler,
                                        const config::OptimizationConfig& optimization,
                                        const config::CheckpointConfig& checkpoint);

class LrScheduler {
 public:
  virtual ~LrScheduler() = default;
  // After update `num_updates` (1-based; 0 before the first); returns the lr for the next update.
  virtual double step_update(int64_t num_updates) = 0;
  // At the end of epoch `epoch` (1-based) with its validation loss; returns the lr for the next epoch.
  virtual double step(int64_t epoch, std::optional<double> val_loss);
  double lr() const { return lr_; }
  // Best validation loss seen (fairseq's lr_scheduler_state {"best"}); unset before any.
  std::optional<double> best() const { return best_; }

  // Every number that defines where the schedule is; load restores lr() exactly.
  virtual StateDict state_dict() const;
  virtual void load_state_dict(const StateDict& state);

 protected:
  explicit LrScheduler(const LrSchedulerOptions& options) : options_(options) {}
  LrSchedulerOptions options_;
  double lr_ = 0.0;
  std::optional<double> best_;
  // Extra doubles a scheduler keeps; saved and restored by name.
  std::vector<std::pair<std::string, double*>> saved_;
};

// Throws UserError naming the key when options are inconsistent (e.g. inverse_sqrt without warm-up).
std::unique_ptr<LrScheduler> build_lr_scheduler(const LrSchedulerOptions& options);

}  // namespace fairseq_cpp::optim
