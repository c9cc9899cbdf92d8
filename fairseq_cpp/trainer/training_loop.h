#pragma once
// The training run, as fairseq_cli/train.py draws it: the epoch loop (`run`, its main), one epoch
// (`train_epoch`, its train), validation and checkpoints decided in one place for mid-epoch and
// end of epoch (`validate_and_save`) and early stopping (`should_stop_early`), over parts that
// tasks/ builds and hands in: the trainer, the batch iterator, the validator and the checkpoint
// writer. Where the run stands is one TrainingState, saved with every checkpoint.
//
//   TrainingLoop loop(loop_options(cfg, update_freqs, batch_world, gang.rank()), trainer, epoch_itr,
//                     validator, writer, restored_state, [] { return stop_signal != 0; });
//   if (loop.run() == RunEnd::stopped) return kExitStopped;

#include <functional>
#include <string>
#include <vector>

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/core/progress.h"
#include "fairseq_cpp/data/epoch_batch_iterator.h"
#include "fairseq_cpp/trainer/checkpoint_writer.h"
#include "fairseq_cpp/trainer/trainer.h"
#include "fairseq_cpp/trainer/training_state.h"
#include "fairseq_cpp/trainer/validation.h"

namespace fairseq_cpp::trainer {

struct LoopOptions {
  int64_t max_epoch = 0;                        // stop after this epoch; 0 = no limit
  int64_t max_update = 0;                       // stop after this update; 0 = no limit
  double stop_time_hours = 0.0;                 // stop after this much training time, in hours; 0 = no limit
  double stop_min_lr = -1.0;                    // stop when the lr falls to this value; < 0 = never
  int64_t curriculum = 0;                       // the first N epochs keep their batches in length order
  int64_t validate_interval = 1;                // validate at the end of every N-th epoch
  int64_t validate_interval_updates = 0;        // also validate (and save) every N updates; 0 = off
  int64_t save_interval_updates = 0;            // save every N updates; 0 = only at the ends of epochs
  int64_t patience = -1;                        // stop after N validations without a better metric; <= 0 = off
  std::string best_checkpoint_metric = "loss";  // named in the early stop's message
  // update_freq of each epoch (the last for the rest), for this run's world size.
  std::vector<int64_t> update_freqs{1};
  int64_t batch_world_size = 1;                          // the world size that optimization.update_freq is meant for
  core::LogFormat log_format = core::LogFormat::simple;  // the training progress (none on ranks but 0)
  int64_t log_interval = 100;                            // updates between progress lines
  std::string tensorboard_logdir;                        // rank 0's TensorBoard folder; empty = none
  std::string config_yaml;                               // the resolved config, saved in every checkpoint
};

// The loop options of `cfg` for rank `rank`, with the update frequencies of keep_global_batch.
LoopOptions loop_options(const config::Config& cfg, std::vector<int64_t> update_freqs, int64_t batch_world_size,
                         int rank);

// How a run ended: at a limit (max_epoch, max_update, stop_time_hours, stop_min_lr, early stop), or
// at a stop signal after every rank saved checkpoint_last.
enum class RunEnd { done, stopped };

class TrainingLoop {
 public:
  // `state` is where a resume left off (a default one for a new run); `stop_requested` is asked
  // on every rank before each update, and any rank's yes stops them all at the same update.
  TrainingLoop(LoopOptions options, Trainer& trainer, data::EpochBatchIterator& epoch_itr, Validator& validator,
               CheckpointWriter& writer, TrainingState state, std::function<bool()> stop_requested);

  RunEnd run();

 private:
  enum class EpochEnd { data_ended, run_ended, stopped };
  // Trains on `itr` until its data or the run ends.
  EpochEnd train_epoch(int64_t epoch, data::EpochIterator& itr);
  // Validates (when `validate`) and saves after an update or at the end of an epoch (then also
  // steps the epoch's LR schedule); returns whether early stopping ends the run.
  bool validate_and_save(int64_t epoch, bool end_of_epoch, bool validate);
  // Records a validation's metric as the best or one more without gain; returns whether it is the best.
  bool record(std::optional<double> metric);
  bool should_stop_early() const;
  // Whether any rank asked to stop; if so every rank has saved checkpoint_last.
  bool stop_voted(int64_t epoch);
  // Whether max_update, stop_time_hours or stop_min_lr ends the run after this update.
  bool limit_reached() const;
  // The state to save: this update's, or with `end_of_epoch` the next epoch's start.
  void sync_state(bool end_of_epoch);
  int64_t update_freq_of(int64_t epoch) const;
  double wall() const;  // training seconds, earlier runs included

  LoopOptions o_;
  Trainer& trainer_;
  data::EpochBatchIterator& epoch_itr_;
  Validator& validator_;
  CheckpointWriter& writer_;
  TrainingState state_;
  std::function<bool()> stop_requested_;
  double run_start_;
  double allreduce_wait_ = 0, step_seconds_ = 0;  // this run's, for the closing line
};

}  // namespace fairseq_cpp::trainer
