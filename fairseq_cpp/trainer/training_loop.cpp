#include "fairseq_cpp/trainer/training_loop.h"

#include <unistd.h>

#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/core/meters.h"
#include "fairseq_cpp/distributed/gang.h"

namespace fairseq_cpp::trainer {
namespace {

// The running averages behind one progress line (fairseq's train_inner / train meters).
struct Meters {
  criterions::LossStats loss;
  int64_t updates = 0;
  double gnorm_sum = 0;
  int64_t clipped = 0;
  int64_t ooms = 0;
  double loss_scale = 0;  // fp16: the scale after the last update; 0 = no scaler
  double train_seconds = 0;
  double start = core::monotonic_seconds();

  void add(const StepStats& s, double seconds) {
    loss.add(s.loss);
    updates += s.skipped ? 0 : 1;
    gnorm_sum += s.skipped ? 0 : s.gnorm;
    clipped += s.clipped ? 1 : 0;
    ooms += s.ooms;
    if (s.loss_scale > 0) loss_scale = s.loss_scale;
    train_seconds += seconds;
  }
  core::Stats train_stats(int64_t num_updates, double lr, double wall) const {
    double elapsed = std::max(1e-9, core::monotonic_seconds() - start);
    double n = std::max<int64_t>(1, updates);
    core::Stats stats{{"loss", loss.loss(), 3},
                      {"nll_loss", loss.nll_loss(), 3},
                      {"ppl", loss.perplexity(), 2},
                      {"wps", loss.ntokens / elapsed, 0},
                      {"ups", updates / elapsed, 2},
                      {"wpb", loss.ntokens / n, 1},
                      {"bsz", loss.nsentences / n, 1},
                      {"num_updates", static_cast<double>(num_updates), 0},
                      {"lr", lr, -1},
                      {"gnorm", gnorm_sum / n, 3},
                      {"clip", 100.0 * clipped / n, 0},
                      {"oom", static_cast<double>(ooms), 0},
                      {"train_wall", train_seconds, 0},
                      {"wall", wall, 0}};
    // fairseq logs the loss scale after clip.
    if (loss_scale > 0) stats.insert(stats.begin() + 11, {"loss_scale", loss_scale, 4});
    return stats;
  }
};

}  // namespace

LoopOptions loop_options(const config::Config& cfg, std::vector<int64_t> update_freqs, int64_t batch_world_size,
                         int rank) {
  LoopOptions o;
  const auto& optimization = cfg.optimization;
  o.max_epoch = optimization.max_epoch;
  o.max_update = optimization.max_update;
  o.stop_time_hours = optimization.stop_time_hours;
  o.stop_min_lr = optimization.stop_min_lr;
  o.curriculum = cfg.dataset.curriculum;
  o.validate_interval = cfg.dataset.validate_interval;
  o.validate_interval_updates = cfg.dataset.validate_interval_updates;
  o.save_interval_updates = cfg.checkpoint.save_interval_updates;
  o.patience = cfg.checkpoint.patience;
  o.best_checkpoint_metric = cfg.checkpoint.best_checkpoint_metric;
  o.update_freqs = std::move(update_freqs);
  o.batch_world_size = batch_world_size;
  o.log_format = rank == 0 ? core::parse_log_format(cfg.common.no_progress_bar ? "none" : cfg.common.log_format,
                                                    isatty(STDERR_FILENO) != 0)
                           : core::LogFormat::none;
  o.log_interval = cfg.common.log_interval;
  o.tensorboard_logdir = rank == 0 ? cfg.common.tensorboard_logdir : "";
  o.config_yaml = config::dump_config(cfg);
  return o;
}

TrainingLoop::TrainingLoop(LoopOptions options, Trainer& trainer, data::EpochBatchIterator& epoch_itr,
                           Validator& validator, CheckpointWriter& writer, TrainingState state,
                           std::function<bool()> stop_requested)
    : o_(std::move(options)),
      trainer_(trainer),
      epoch_itr_(epoch_itr),
      validator_(validator),
      writer_(writer),
      state_(std::move(state)),
      stop_requested_(std::move(stop_requested)),
      run_start_(core::monotonic_seconds()) {}

RunEnd TrainingLoop::run() {
  const int64_t max_epoch = o_.max_epoch > 0 ? o_.max_epoch : INT64_MAX;
  bool done = o_.max_update > 0 && trainer_.num_updates() >= o_.max_update;
  while (!done) {
    // Checked first: with sharded data, starting an epoch loads its directory.
    if (epoch_itr_.next_epoch_idx() > max_epoch) break;
    // fairseq's curriculum: the first `curriculum` epochs keep the batches in length order.
    data::EpochIterator& itr = epoch_itr_.next_epoch_itr(epoch_itr_.next_epoch_idx() > o_.curriculum);
    const int64_t epoch = epoch_itr_.epoch();
    const EpochEnd end = train_epoch(epoch, itr);
    if (end == EpochEnd::stopped) return RunEnd::stopped;
    done = end == EpochEnd::run_ended;
    if (!itr.has_next()) {
      // End of the epoch: validate, step the epoch schedule, save.
      distributed::CollectiveScope at(fmt::format("the end of epoch {} at update {}", epoch, trainer_.num_updates()));
      if (validate_and_save(epoch, true, epoch % std::max<int64_t>(1, o_.validate_interval) == 0)) done = true;
      if (o_.stop_min_lr >= 0 && trainer_.lr() <= o_.stop_min_lr) done = true;
    }
  }
  log::info("train", "done training in {:.1f} seconds ({} updates)", wall(), trainer_.num_updates());
  distributed::Gang& gang = trainer_.gang();
  if (gang.size() > 1)
    log::info("train",
              "gradient all-reduce: {:.2f} s of this run's {:.1f} s of updates waited for it after backward "
              "(rank {}; {})",
              allreduce_wait_, step_seconds_, gang.rank(),
              trainer_.options().overlap_all_reduce ? "buckets started during backward" : "started after backward");
  return RunEnd::done;
}

TrainingLoop::EpochEnd TrainingLoop::train_epoch(int64_t epoch, data::EpochIterator& itr) {
  const int64_t update_freq = update_freq_of(epoch);
  core::ProgressOptions po;
  po.format = o_.log_format;
  po.log_interval = o_.log_interval;
  po.epoch = epoch;
  po.tensorboard_logdir = o_.tensorboard_logdir;
  po.total = (itr.size() + update_freq - 1) / update_freq;
  auto progress = core::make_progress_bar(po);
  Meters epoch_meters, interval_meters;
  int64_t step = itr.count() / update_freq;
  EpochEnd end = EpochEnd::data_ended;
  while (end == EpochEnd::data_ended) {
    // Every collective of this update names it when it fails.
    distributed::CollectiveScope at(fmt::format("update {} of epoch {}", trainer_.num_updates() + 1, epoch));
    if (stop_voted(epoch)) return EpochEnd::stopped;
    std::vector<data::Batch> group = itr.next_group(update_freq);
    if (group.empty()) break;
    const double t0 = core::monotonic_seconds();
    const StepStats stats = trainer_.train_step(group);
    const double seconds = core::monotonic_seconds() - t0;
    allreduce_wait_ += stats.allreduce_wait_seconds;
    step_seconds_ += seconds;
    epoch_meters.add(stats, seconds);
    interval_meters.add(stats, seconds);
    ++step;
    const int64_t updates = trainer_.num_updates();
    // The bar decides what to show (simple/json: every log_interval steps); fairseq's
    // train_inner meters restart after each printed interval.
    progress->log(interval_meters.train_stats(updates, trainer_.lr(), wall()), step, "train_inner");
    if (step % std::max<int64_t>(1, o_.log_interval) == 0) interval_meters = Meters{};
    bool done = limit_reached();
    const auto due = [&](int64_t interval) { return interval > 0 && updates % interval == 0 && !stats.skipped; };
    const bool valid_due = due(o_.validate_interval_updates);
    if ((valid_due || due(o_.save_interval_updates) || done) && itr.has_next())
      done = validate_and_save(epoch, false, valid_due || done) || done;
    if (done) end = EpochEnd::run_ended;
  }
  progress->print(epoch_meters.train_stats(trainer_.num_updates(), trainer_.lr(), wall()), "train");
  return end;
}

bool TrainingLoop::validate_and_save(int64_t epoch, bool end_of_epoch, bool validate) {
  std::optional<double> metric;
  if (validate)
    if (auto v = validator_.validate(trainer_, epoch, state_.best)) metric = validator_.metric(*v);
  const bool best = record(metric);
  if (end_of_epoch) trainer_.lr_step(epoch, metric);  // fairseq steps the schedule on the checkpoint metric
  sync_state(end_of_epoch);
  writer_.save(trainer_, state_, epoch, end_of_epoch, best, metric, o_.config_yaml);
  return should_stop_early();
}

bool TrainingLoop::record(std::optional<double> metric) {
  if (!metric) return false;
  const bool better = validator_.better(*metric, state_.best);
  if (better) {
    state_.best = metric;
    state_.bad_validations = 0;
  } else {
    ++state_.bad_validations;
  }
  return better;
}

bool TrainingLoop::should_stop_early() const {
  if (o_.patience <= 0 || state_.bad_validations < o_.patience) return false;
  log::info("train", "early stop: no better validation {} for {} validations", o_.best_checkpoint_metric,
            state_.bad_validations);
  return true;
}

bool TrainingLoop::stop_voted(int64_t epoch) {
  bool stop = false;
  {
    distributed::CollectiveScope vote("the stop vote");
    stop = distributed::any_flag(trainer_.gang(), stop_requested_());
  }
  if (!stop) return false;
  log::warning("train", "stop signal received: saving checkpoint_last and stopping at update {}",
               trainer_.num_updates());
  sync_state(false);
  writer_.save(trainer_, state_, epoch, false, false, std::nullopt, o_.config_yaml);
  return true;
}

bool TrainingLoop::limit_reached() const {
  return (o_.max_update > 0 && trainer_.num_updates() >= o_.max_update) ||
         (o_.stop_time_hours > 0 && wall() > o_.stop_time_hours * 3600) ||
         (o_.stop_min_lr >= 0 && trainer_.lr() <= o_.stop_min_lr);
}

void TrainingLoop::sync_state(bool end_of_epoch) {
  state_.num_updates = trainer_.num_updates();
  state_.batch_world_size = o_.batch_world_size;
  state_.update_batches = trainer_.gang().size() * update_freq_of(epoch_itr_.epoch());
  state_.iterator = end_of_epoch ? epoch_itr_.next_epoch_state() : epoch_itr_.state();
}

int64_t TrainingLoop::update_freq_of(int64_t epoch) const {
  const size_t i = static_cast<size_t>(std::max<int64_t>(1, epoch) - 1);
  return o_.update_freqs[std::min(i, o_.update_freqs.size() - 1)];
}

double TrainingLoop::wall() const { return state_.wall_seconds + core::monotonic_seconds() - run_start_; }

}  // namespace fairseq_cpp::trainer
