#pragma once
// Checkpoint averaging, as fairseq's scripts/average_checkpoints.py does it: the parameters of
// several checkpoints averaged key by key, everything else taken from the first one.
//
//   auto paths = checkpoint::last_checkpoints("ckpt", checkpoint::Numbered::kEpoch, 5, std::nullopt);
//   checkpoint::save_file("avg.pt", checkpoint::average_checkpoints(paths));
//
// Beyond fairseq: the sums are kept in float64 (fairseq sums in the parameters' own type), and the
// checkpoints are read mapped into memory, so that only the "model" entries' pages are touched and
// dropped after use: peak memory is the float64 sums, about two models, whatever the count.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fairseq_cpp/checkpoint/checkpoint.h"

namespace fairseq_cpp::checkpoint {

enum class Numbered {
  kEpoch,   // checkpointEPOCH.pt (SUFFIX before .pt is not matched: fairseq's pattern)
  kUpdate,  // checkpoint_EPOCH_UPDATES.pt
};

// The newest `n` checkpoints of `dir` by epoch (or update) number, newest first, none numbered
// above `upper_bound` (fairseq's last_n_checkpoints). Throws UserError naming the directory when
// it holds fewer than `n`.
std::vector<std::string> last_checkpoints(const std::string& dir, Numbered kind, int64_t n,
                                          std::optional<int64_t> upper_bound);

// fairseq's keep_best_checkpoints files of `dir`, checkpoint.best_<metric>_<value><suffix>.pt, with
// their values, best first (the largest value first when `maximize`).
std::vector<std::pair<double, std::string>> best_checkpoints(const std::string& dir, const std::string& metric,
                                                             const std::string& suffix, bool maximize);

// The `n` best of the checkpoint.best_<metric>_<value>.pt files of `dir` (one metric; better as
// the files' stored config says, checkpoint.maximize_best_checkpoint_metric). Throws UserError
// naming the directory when it holds fewer than `n`, or files of several metrics.
std::vector<std::string> best_n_checkpoints(const std::string& dir, int64_t n);

// The first checkpoint with its "model" replaced by the element-wise mean over `paths`
// (floating-point entries in float64 then cast back, integer ones floor-divided). Throws DataError
// naming the file when a checkpoint's parameter names or shapes differ from the first's.
StateDict average_checkpoints(const std::vector<std::string>& paths);

}  // namespace fairseq_cpp::checkpoint
