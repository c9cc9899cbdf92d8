#include "fairseq_cpp/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::optim {
namespace {

void require_single_lr(const LrSchedulerOptions& o) {
  if (o.lr.size() != 1) {
    raise<UserError>("`optimization.lr` must have one value for `lr_scheduler._name` {}, but has {}; use fixed.",
                     o.name, o.lr.size());
  }
}

class InverseSqrt : public LrScheduler {
 public:
  explicit InverseSqrt(const LrSchedulerOptions& o) : LrScheduler(o) {
    require_single_lr(o);
    if (o.warmup_updates <= 0) {
      raise<UserError>("`lr_scheduler.warmup_updates` must be greater than 0 for inverse_sqrt, but is {} instead.",
                       o.warmup_updates);
    }
    const double end = o.lr[0];
    init_ = o.warmup_init_lr < 0 ? 0.0 : o.warmup_init_lr;
    lr_step_ = (end - init_) / static_cast<double>(o.warmup_updates);
    decay_factor_ = end * std::sqrt(static_cast<double>(o.warmup_updates));
    lr_ = init_;
  }
  double step_update(int64_t n) override {
    if (n < options_.warmup_updates) {
      lr_ = init_ + static_cast<double>(n) * lr_step_;
    } else {
      lr_ = decay_factor_ / std::sqrt(static_cast<double>(n));
    }
    return lr_;
  }

 private:
  double init_, lr_step_, decay_factor_;
};

// fixed and polynomial_decay share the per-epoch lr list and the warm-up factor.
class Fixed : public LrScheduler {
 public:
  explicit Fixed(const LrSchedulerOptions& o) : LrScheduler(o) {
    base_ = o.lr.at(0);
    warmup_factor_ = o.warmup_updates > 0 ? 1.0 / static_cast<double>(o.warmup_updates) : 1.0;
    lr_ = warmup_factor_ * base_;
    saved_ = {{"base_lr", &base_}, {"warmup_factor", &warmup_factor_}};
  }
  double step(int64_t epoch, std::optional<double> val_loss) override {
    LrScheduler::step(epoch, val_loss);
    base_ = next_lr(epoch);
    lr_ = warmup_factor_ * base_;
    return lr_;
  }
  double step_update(int64_t n) override {
    if (options_.warmup_updates > 0 && n < options_.warmup_updates) {
      warmup_factor_ = static_cast<double>(n + 1) / static_cast<double>(options_.warmup_updates);
    } else {
      warmup_factor_ = 1.0;
    }
    lr_ = warmup_factor_ * base_;
    return lr_;
  }

 protected:
  // The lr for the epoch after `epoch`.
  double next_lr(int64_t epoch) const {
    const auto& lrs = options_.lr;
    if (options_.force_anneal <= 0 || epoch < options_.force_anneal) {
      return lrs[std::min<size_t>(static_cast<size_t>(epoch), lrs.size() - 1)];
    }
    return lrs.back() * std::pow(options_.lr_shrink, static_cast<double>(epoch + 1 - options_.force_anneal));
  }
  double base_ = 0.0;
  double warmup_factor_ = 1.0;
};

class PolynomialDecay : public Fixed {
 public:
  explicit PolynomialDecay(const LrSchedulerOptions& o) : Fixed(o) {
    total_ = o.total_num_update > 0 ? o.total_num_update : o.max_update;
    if (total_ <= 0) {
      raise<UserError>(
          "polynomial_decay needs `lr_scheduler.total_num_update` or `optimization.max_update` greater than 0.");
    }
  }
  double step(int64_t epoch, std::optional<double> val_loss) override {
    LrScheduler::step(epoch, val_loss);
    if (options_.force_anneal <= 0 || epoch < options_.force_anneal) base_ = next_lr(epoch);
    lr_ = warmup_factor_ * base_;
    return lr_;
  }
  double step_update(int64_t n) override {
    const int64_t warmup = options_.warmup_updates;
    if (warmup > 0 && n <= warmup) {
      warmup_factor_ = static_cast<double>(n) / static_cast<double>(warmup);
      lr_ = warmup_factor_ * base_;
    } else if (n >= total_) {
      lr_ = options_.end_learning_rate;
    } else {
      const double remaining = 1.0 - static_cast<double>(n - warmup) / static_cast<double>(total_ - warmup);
      lr_ = (base_ - options_.end_learning_rate) * std::pow(remaining, options_.power) + options_.end_learning_rate;
    }
    return lr_;
  }

 private:
  int64_t total_ = 0;
};

class Cosine : public LrScheduler {
 public:
  explicit Cosine(const LrSchedulerOptions& o) : LrScheduler(o) {
    require_single_lr(o);
    max_lr_ = o.lr[0];
    min_lr_ = std::min(o.min_lr, max_lr_);
    init_ = o.warmup_init_lr < 0 ? min_lr_ : o.warmup_init_lr;
    period_ = static_cast<double>(o.lr_period_updates > 0 ? o.lr_period_updates : o.max_update - o.warmup_updates);
    if (period_ <= 0) {
      raise<UserError>("cosine needs `lr_scheduler.lr_period_updates` or `optimization.max_update` > warmup_updates.");
    }
    lr_step_ = o.warmup_updates > 0 ? (max_lr_ - init_) / static_cast<double>(o.warmup_updates) : 1.0;
    lr_ = init_;
  }
  double step_update(int64_t n) override {
    if (n < options_.warmup_updates) {
      lr_ = init_ + static_cast<double>(n) * lr_step_;
      return lr_;
    }
    const double curr = static_cast<double>(n - options_.warmup_updates);
    const double t_mult = options_.t_mult;
    double i, t_i, t_curr;
    if (t_mult != 1.0) {
      i = std::floor(std::log(1 - curr / period_ * (1 - t_mult)) / std::log(t_mult));
      t_i = std::pow(t_mult, i) * period_;
      t_curr = curr - (1 - std::pow(t_mult, i)) / (1 - t_mult) * period_;
    } else {
      i = std::floor(curr / period_);
      t_i = period_;
      t_curr = curr - period_ * i;
    }
    const double shrink = std::pow(options_.lr_shrink, i);
    const double lo = min_lr_ * shrink;
    const double hi = max_lr_ * shrink;
    lr_ = lo + 0.5 * (hi - lo) * (1 + std::cos(M_PI * t_curr / t_i));
    return lr_;
  }

 private:
  double max_lr_, min_lr_, init_, period_, lr_step_;
};

// torch.optim.lr_scheduler.ReduceLROnPlateau (mode min/max, threshold_mode rel, cooldown 0) after
// fairseq's linear warm-up.
class ReduceLrOnPlateau : public LrScheduler {
 public:
  explicit ReduceLrOnPlateau(const LrSchedulerOptions& o) : LrScheduler(o) {
    require_single_lr(o);
    init_ = o.warmup_init_lr >= 0 ? o.warmup_init_lr : (o.warmup_updates > 0 ? 0.0 : o.lr[0]);
    lr_step_ = o.warmup_updates > 0 ? (o.lr[0] - init_) / static_cast<double>(o.warmup_updates) : 0.0;
    warmup_end_ = o.warmup_updates <= 0 ? 1.0 : 0.0;
    lr_ = init_;
    plateau_best_ =
        o.maximize_metric ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    saved_ = {{"plateau_best", &plateau_best_}, {"bad_epochs", &bad_epochs_}, {"warmup_end", &warmup_end_}};
  }
  double step(int64_t epoch, std::optional<double> val_loss) override {
    LrScheduler::step(epoch, val_loss);
    if (!val_loss || warmup_end_ == 0.0) return lr_;
    const double v = *val_loss;
    const double rel = options_.lr_threshold;
    const bool better = options_.maximize_metric ? v > plateau_best_ * (1 + rel) : v < plateau_best_ * (1 - rel);
    if (better) {
      plateau_best_ = v;
      bad_epochs_ = 0;
    } else {
      bad_epochs_ += 1;
    }
    if (bad_epochs_ > static_cast<double>(options_.lr_patience)) {
      const double reduced = lr_ * options_.lr_shrink;
      if (lr_ - reduced > 1e-8) lr_ = reduced;
      bad_epochs_ = 0;
    }
    return lr_;
  }
  double step_update(int64_t n) override {
    if (options_.warmup_updates > 0) {
      if (n <= options_.warmup_updates) {
        lr_ = init_ + static_cast<double>(n) * lr_step_;
      } else {
        warmup_end_ = 1.0;
      }
    }
    return lr_;
  }

 private:
  double init_, lr_step_;
  double warmup_end_ = 0.0;
  double plateau_best_;
  double bad_epochs_ = 0;
};

}  // namespace

LrSchedulerOptions lr_scheduler_options(const config::LrSchedulerConfig& s, const config::OptimizationConfig& opt,
                                        const config::CheckpointConfig& checkpoint) {
  LrSchedulerOptions o;
  o.name = s._name;
  o.lr = opt.lr;
  o.warmup_updates = s.warmup_updates.value_or(config::default_warmup_updates(s._name));
  o.warmup_init_lr = s.warmup_init_lr;
  o.end_learning_rate = s.end_learning_rate;
  o.power = s.power;
  o.total_num_update = s.total_num_update;
  o.force_anneal = s.force_anneal;
  o.lr_shrink = s.lr_shrink;
  o.lr_threshold = s.lr_threshold;
  o.lr_patience = s.lr_patience;
  o.min_lr = s.min_lr;
  o.t_mult = s.t_mult;
  o.lr_period_updates = s.lr_period_updates;
  o.max_update = opt.max_update;
  o.maximize_metric = checkpoint.maximize_best_checkpoint_metric;
  return o;
}

double LrScheduler::step(int64_t, std::optional<double> val_loss) {
  if (val_loss) {
    if (!best_ || (options_.maximize_metric ? *val_loss > *best_ : *val_loss < *best_)) best_ = val_loss;
  }
  return lr_;
}

StateDict LrScheduler::state_dict() const {
  StateDict s = new_state_dict();
  s.insert("name", options_.name);
  s.insert("lr", lr_);
  if (best_) s.insert("best", *best_);
  for (const auto& [key, value] : saved_) s.insert(key, *value);
  return s;
}

void LrScheduler::load_state_dict(const StateDict& s) {
  if (!s.contains("name") || !s.contains("lr")) raise<DataError>("lr_scheduler state: no `name`/`lr` entries");
  const std::string stored = s.at("name").toStringRef();
  if (stored != options_.name) {
    raise<DataError>(
        "lr_scheduler state is for `{}`, but the scheduler is `{}` (use checkpoint.reset_lr_scheduler=true)", stored,
        options_.name);
  }
  lr_ = s.at("lr").toDouble();
  best_ = s.contains("best") ? std::optional<double>(s.at("best").toDouble()) : std::nullopt;
  for (const auto& [key, value] : saved_) {
    if (!s.contains(key)) raise<DataError>("lr_scheduler state: no `{}` entry", key);
    *value = s.at(key).toDouble();
  }
}

std::unique_ptr<LrScheduler> build_lr_scheduler(const LrSchedulerOptions& o) {
  if (o.lr.empty()) raise<UserError>("`optimization.lr` must have at least one value.");
  if (o.name == "inverse_sqrt") return std::make_unique<InverseSqrt>(o);
  if (o.name == "fixed") return std::make_unique<Fixed>(o);
  if (o.name == "polynomial_decay") return std::make_unique<PolynomialDecay>(o);
  if (o.name == "cosine") return std::make_unique<Cosine>(o);
  if (o.name == "reduce_lr_on_plateau") return std::make_unique<ReduceLrOnPlateau>(o);
  raise<UserError>(
      "`lr_scheduler._name` must be fixed, inverse_sqrt, polynomial_decay, cosine or reduce_lr_on_plateau, but is "
      "`{}` instead.",
      o.name);
}

}  // namespace fairseq_cpp::optim
