#pragma once
// Checkpoint file names and their retention, as fairseq's checkpoint_utils.save_checkpoint: after an
// update checkpoint_<epoch>_<updates>.pt (every save_interval_updates), at the end of an epoch
// checkpoint<epoch>.pt, checkpoint_best.pt on a new best, checkpoint_last.pt always, and
// checkpoint.best_<metric>_<value>.pt for the keep_best_checkpoints best; older files pruned by
// keep_interval_updates / keep_last_epochs / keep_best_checkpoints. Rank 0 writes; every rank
// learns the outcome.
//
//   CheckpointWriter writer(cfg.checkpoint, gang);
//   writer.save(trainer, state, epoch, /*end_of_epoch=*/true, is_best, metric, config_yaml);

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/distributed/gang.h"
#include "fairseq_cpp/trainer/trainer.h"
#include "fairseq_cpp/trainer/training_state.h"

namespace fairseq_cpp::trainer {

class CheckpointWriter {
 public:
  CheckpointWriter(const config::CheckpointConfig& options, distributed::Gang& gang) : o_(options), gang_(gang) {}

  // Saves after an update (`end_of_epoch` false) or at the end of an epoch; `is_best` when the
  // validation just improved, `metric` its value when one was just computed. Rank 0 writes; a
  // failed save (a full disk) stops every rank with rank 0's message (OperationalError).
  void save(Trainer& trainer, const TrainingState& state, int64_t epoch, bool end_of_epoch, bool is_best,
            std::optional<double> metric, const std::string& config_yaml);

 private:
  // The file names this save writes.
  std::vector<std::string> names(int64_t epoch, int64_t updates, bool end_of_epoch, bool is_best,
                                 std::optional<double> metric) const;
  // checkpoint.best_<metric>_<value>.pt files of save_dir, best first.
  std::vector<std::pair<double, std::string>> best_files() const;
  // Whether a validation of `metric` joins the keep_best_checkpoints best.
  bool keeps_best(double metric) const;
  // Keeps the newest keep_interval_updates update checkpoints, keep_last_epochs epoch ones and the
  // keep_best_checkpoints best ones.
  void prune();

  const config::CheckpointConfig& o_;
  distributed::Gang& gang_;
};

}  // namespace fairseq_cpp::trainer
