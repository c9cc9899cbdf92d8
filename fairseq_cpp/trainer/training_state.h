#pragma once
// Where training stands, as one plain struct (Marian's TrainingState), and its round trip through
// a checkpoint file together with the model, optimizer and LR scheduler:
//   "model", "cfg", "optimizer", "lr_scheduler", "extra_state" {train_iterator {epoch,
//   global_batches, shuffle, data_shard, data_shards}, num_updates, best, bad_validations,
//   wall_seconds, batch_world_size, update_batches, with an EMA: ema {name -> tensor}, ema_update_counter, with fp16:
//   loss_scaler {loss_scale, iter, last_overflow_iter, last_rescale_iter, overflows_since_rescale,
//   fallback_updates_left}}

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/data/epoch_batch_iterator.h"
#include "fairseq_cpp/trainer/trainer.h"

namespace fairseq_cpp::trainer {

struct TrainingState {
  data::IteratorState iterator;  // where the next batch comes from
  int64_t num_updates = 0;       // updates done
  std::optional<double> best;    // best validation metric so far; unset before the first
  int64_t bad_validations = 0;   // validations since the best one (early stopping)
  double wall_seconds = 0;       // training time of earlier runs, in seconds
  // The global batch: the world size that `optimization.update_freq` is meant for (the run's first
  // with distributed_training.keep_global_batch, else the writer's), and the batches per update of
  // the writer (its world size x update_freq); 0 = not known (checkpoints from before them). The
  // training loop sets both before each save; restore_checkpoint leaves them 0 (a resume reads them
  // with saved_global_batch before it builds the trainer).
  int64_t batch_world_size = 0;
  int64_t update_batches = 0;
};

// What a checkpoint restores; fairseq's --reset-* flags leave parts out.
struct RestoreOptions {
  bool reset_optimizer = false;     // keep the fresh optimizer state
  bool reset_lr_scheduler = false;  // keep the fresh LR schedule
  bool reset_dataloader = false;    // start the data from the first epoch
  bool reset_meters = false;        // start the wall clock from zero
};

// What zero_sharding spreads over the ranks, gathered whole by every rank before rank 0 writes a
// checkpoint: the optimizer's state_dict() and the EMA's state() (each only where it is sharded).
struct GatheredState {
  std::optional<checkpoint::StateDict> optimizer;
  std::optional<checkpoint::TensorDict> ema;
};
// Every rank calls it (the gathers are collectives); nothing is gathered without sharding.
GatheredState gather_sharded_state(Trainer& trainer, bool with_optimizer_state);

// The whole checkpoint of `trainer` at `state`, with `config_yaml` (config::dump_config); without
// the optimizer's state when `with_optimizer_state` is false (fairseq's --no-save-optimizer-state).
// The parts in `gathered` are taken from there instead of from the trainer.
checkpoint::StateDict make_checkpoint(Trainer& trainer, const TrainingState& state, const std::string& config_yaml,
                                      bool with_optimizer_state, const GatheredState& gathered = {});

// Loads `ckpt` (read from `path`) into `trainer`; returns the training state to continue from. A
// checkpoint saved without its optimizer state resumes with a fresh optimizer, as fairseq's does.
// Throws DataError naming `path` when a part does not fit.
TrainingState restore_checkpoint(const checkpoint::StateDict& ckpt, const std::string& path, Trainer& trainer,
                                 const RestoreOptions& options);

// distributed_training.keep_global_batch: `update_freq` (one value per epoch, the last for the rest)
// is meant for `batch_world_size` workers; with `world_size` workers each value is scaled by
// batch_world_size / world_size, so every update still sees the same batches. Throws UserError when
// a value does not divide evenly.
std::vector<int64_t> keep_global_batch(const std::vector<int64_t>& update_freq, int64_t batch_world_size,
                                       int64_t world_size);

// What `ckpt` (read from `path`) says about the global batch: its batch_world_size and
// update_batches, 0 where it does not say.
std::pair<int64_t, int64_t> saved_global_batch(const checkpoint::StateDict& ckpt, const std::string& path);

}  // namespace fairseq_cpp::trainer
