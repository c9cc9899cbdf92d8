// fairseq-cpp-eval average: fairseq's scripts/average_checkpoints.py over checkpoint/average.
#include <algorithm>
#include <filesystem>

#include "fairseq_cpp/checkpoint/average.h"
#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/tasks/programs.h"

namespace fairseq_cpp::tasks {

int average_main(const config::Config& cfg) {
  const config::AverageConfig& o = cfg.average;
  if (o.inputs.empty()) raise<UserError>("`average.inputs` is empty: give the checkpoints (or their directory) with --inputs");
  if (o.output.empty()) raise<UserError>("`average.output` is not set: give the file to write with --output");
  if (cfg.common_eval.use_ema)
    raise<UserError>("`common_eval.use_ema` (--use-ema) is for validate, generate and interactive: average reads the "
                     "checkpoints' model weights");
  std::vector<std::string> paths = o.inputs;
  std::error_code ec;
  for (const auto& p : paths) {
    if (std::filesystem::is_directory(p, ec) && o.num_epoch_checkpoints == 0 && o.num_update_checkpoints == 0 &&
        o.num_best_checkpoints == 0)
      raise<UserError>("{} is a directory: give --num-epoch-checkpoints N, --num-update-checkpoints N or "
                       "--num-best-checkpoints N, or the checkpoint files", p);
  }
  const int64_t n = std::max({o.num_epoch_checkpoints, o.num_update_checkpoints, o.num_best_checkpoints});
  if (n > 0 && o.inputs.size() != 1) {
    raise<UserError>("`average.inputs` must be one directory with --num-epoch-checkpoints, --num-update-checkpoints "
                     "or --num-best-checkpoints, but names {} paths instead",
                     o.inputs.size());
  }
  if (o.num_best_checkpoints > 0) {
    paths = checkpoint::best_n_checkpoints(o.inputs[0], n);
  } else if (n > 0) {
    paths = checkpoint::last_checkpoints(o.inputs[0],
                                         o.num_epoch_checkpoints > 0 ? checkpoint::Numbered::kEpoch
                                                                     : checkpoint::Numbered::kUpdate,
                                         n, o.checkpoint_upper_bound);
  }
  std::string names;
  for (const auto& p : paths) names += (names.empty() ? "" : ", ") + std::filesystem::path(p).filename().string();
  log::info("average", "averaging {} checkpoints: {}", paths.size(), names);
  checkpoint::save_file(o.output, checkpoint::average_checkpoints(paths));
  log::info("average", "wrote {}", o.output);
  return kExitOk;
}

}  // namespace fairseq_cpp::tasks
