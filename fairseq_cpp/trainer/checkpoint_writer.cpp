#include "fairseq_cpp/trainer/checkpoint_writer.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "fairseq_cpp/checkpoint/average.h"
#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/core/meters.h"
#include "fairseq_cpp/distributed/distributed_utils.h"

namespace fairseq_cpp::trainer {
namespace fs = std::filesystem;
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string escaped(const std::string& text) {
  return std::regex_replace(text, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
}

// Removes all but the `keep` newest files of `dir` whose names match `pattern` (group 1: a number).
void keep_newest(const std::string& dir, const std::regex& pattern, int64_t keep) {
  if (keep <= 0) return;  // fairseq: -1 (the default) and 0 keep all
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern)) found.emplace_back(std::stoll(m[1]), entry.path());
  }
  std::sort(found.rbegin(), found.rend());
  for (size_t i = static_cast<size_t>(keep); i < found.size(); ++i) fs::remove(found[i].second, ec);
}

}  // namespace

std::vector<std::string> CheckpointWriter::names(int64_t epoch, int64_t updates, bool end_of_epoch, bool is_best,
                                                 std::optional<double> metric) const {
  std::vector<std::string> names;
  if (end_of_epoch && !o_.no_epoch_checkpoints && epoch % std::max<int64_t>(1, o_.save_interval) == 0)
    names.push_back(fmt::format("checkpoint{}{}.pt", epoch, o_.checkpoint_suffix));
  if (!end_of_epoch && o_.save_interval_updates > 0 && updates % o_.save_interval_updates == 0)
    names.push_back(fmt::format("checkpoint_{}_{}{}.pt", epoch, updates, o_.checkpoint_suffix));
  if (is_best) names.push_back(fmt::format("checkpoint_best{}.pt", o_.checkpoint_suffix));
  if (!o_.no_last_checkpoints) names.push_back(fmt::format("checkpoint_last{}.pt", o_.checkpoint_suffix));
  if (gang_.rank() == 0 && metric && keeps_best(*metric)) {
    // fairseq's name: the metric to 3 decimals, then a digit below N that parts ties.
    names.push_back(fmt::format("checkpoint.best_{}_{:.3f}{}{}.pt", o_.best_checkpoint_metric, *metric,
                                updates % o_.keep_best_checkpoints, o_.checkpoint_suffix));
  }
  return names;
}

void CheckpointWriter::save(Trainer& trainer, const TrainingState& state, int64_t epoch, bool end_of_epoch,
                            bool is_best, std::optional<double> metric, const std::string& config_yaml) {
  if (o_.no_save) return;
  const int64_t updates = state.num_updates;
  const std::vector<std::string> files = names(epoch, updates, end_of_epoch, is_best, metric);
  // A sharded optimizer's state and EMA are gathered by every rank (rank 0 alone knows of a best file).
  const GatheredState gathered = gather_sharded_state(trainer, !o_.no_save_optimizer_state);
  distributed::rank0_acts<OperationalError>(
      gang_, "the checkpoint save's outcome",
      [&] {
        if (files.empty()) return;
        fs::create_directories(o_.save_dir);
        double start = core::monotonic_seconds();
        checkpoint::StateDict ckpt =
            make_checkpoint(trainer, state, config_yaml, !o_.no_save_optimizer_state, gathered);
        for (const auto& name : files) checkpoint::save_file((fs::path(o_.save_dir) / name).string(), ckpt);
        log::info("checkpoint", "saved {} (epoch {} @ {} updates) in {:.1f} s", join(files), epoch, updates,
                  core::monotonic_seconds() - start);
        prune();
      },
      "rank 0 stopped the run: ");
}

std::vector<std::pair<double, std::string>> CheckpointWriter::best_files() const {
  return checkpoint::best_checkpoints(o_.save_dir, o_.best_checkpoint_metric, o_.checkpoint_suffix,
                                      o_.maximize_best_checkpoint_metric);
}

// While fewer are kept, or when it is at least as good as the worst kept (fairseq's is_better).
bool CheckpointWriter::keeps_best(double metric) const {
  if (o_.keep_best_checkpoints <= 0) return false;
  auto kept = best_files();
  if (kept.size() < static_cast<size_t>(o_.keep_best_checkpoints)) return true;
  double worst = kept.back().first;
  return o_.maximize_best_checkpoint_metric ? metric >= worst : metric <= worst;
}

void CheckpointWriter::prune() {
  const std::string suffix = escaped(o_.checkpoint_suffix);
  keep_newest(o_.save_dir, std::regex(R"(checkpoint_\d+_(\d+))" + suffix + R"(\.pt)"), o_.keep_interval_updates);
  keep_newest(o_.save_dir, std::regex(R"(checkpoint(\d+))" + suffix + R"(\.pt)"), o_.keep_last_epochs);
  if (o_.keep_best_checkpoints > 0) {
    auto kept = best_files();
    std::error_code ec;
    for (size_t i = static_cast<size_t>(o_.keep_best_checkpoints); i < kept.size(); ++i) fs::remove(kept[i].second, ec);
  }
}

}  // namespace fairseq_cpp::trainer
