#include "fairseq_cpp/checkpoint/average.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>
#include <utility>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::checkpoint {
namespace fs = std::filesystem;

namespace {

std::string shape(const at::Tensor& t) { return c10::str(t.sizes()); }

}  // namespace

std::vector<std::string> last_checkpoints(const std::string& dir, Numbered kind, int64_t n,
                                          std::optional<int64_t> upper_bound) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) raise<UserError>("checkpoint directory {}: no such directory", dir);
  const std::regex pattern(kind == Numbered::kEpoch ? R"(checkpoint(\d+)\.pt)" : R"(checkpoint_\d+_(\d+)\.pt)");
  std::vector<std::pair<int64_t, std::string>> found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, pattern) || m[1].length() > 18) continue;
    const int64_t number = std::stoll(m[1]);
    if (!upper_bound || number <= *upper_bound) found.emplace_back(number, entry.path().string());
  }
  const char* what = kind == Numbered::kEpoch ? "epoch checkpoints (checkpointEPOCH.pt)"
                                              : "update checkpoints (checkpoint_EPOCH_UPDATES.pt)";
  if (static_cast<int64_t>(found.size()) < n) {
    raise<UserError>("{} holds {} {}{}, but {} are to be averaged", dir, found.size(), what,
                     upper_bound ? fmt::format(" numbered at most {}", *upper_bound) : "", n);
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> paths;
  for (int64_t i = 0; i < n; ++i) paths.push_back(found[static_cast<size_t>(i)].second);
  return paths;
}

std::vector<std::pair<double, std::string>> best_checkpoints(const std::string& dir, const std::string& metric,
                                                             const std::string& suffix, bool maximize) {
  auto escaped = [](const std::string& text) {
    return std::regex_replace(text, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
  };
  const std::regex pattern(R"(checkpoint\.best_)" + escaped(metric) + R"(_(\d+\.?\d*))" + escaped(suffix) + R"(\.pt)");
  std::vector<std::pair<double, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern)) found.emplace_back(std::stod(m[1]), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  if (maximize) std::reverse(found.begin(), found.end());
  return found;
}

std::vector<std::string> best_n_checkpoints(const std::string& dir, int64_t n) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) raise<UserError>("checkpoint directory {}: no such directory", dir);
  const std::regex pattern(R"(checkpoint\.best_([A-Za-z_]+)_\d+\.?\d*\.pt)");
  std::set<std::string> metrics;
  std::string example;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern)) {
      metrics.insert(m[1]);
      example = entry.path().string();
    }
  }
  if (metrics.size() > 1) {
    std::string names;
    for (const auto& m : metrics) names += (names.empty() ? "" : ", ") + m;
    raise<UserError>("{} holds the best checkpoints of several metrics ({}): give the files with --inputs", dir, names);
  }
  if (metrics.empty())
    raise<UserError>("{} holds no checkpoint.best_<metric>_<value>.pt files (saved with "
                     "checkpoint.keep_best_checkpoints), but {} are to be averaged", dir, n);
  const bool maximize = config_entry(load_file(example, Reading::kMapped), example).checkpoint.maximize_best_checkpoint_metric;
  auto found = best_checkpoints(dir, *metrics.begin(), "", maximize);
  if (static_cast<int64_t>(found.size()) < n)
    raise<UserError>("{} holds {} best checkpoints (checkpoint.best_{}_VALUE.pt), but {} are to be averaged", dir,
                     found.size(), *metrics.begin(), n);
  std::vector<std::string> paths;
  for (int64_t i = 0; i < n; ++i) paths.push_back(found[static_cast<size_t>(i)].second);
  return paths;
}

StateDict average_checkpoints(const std::vector<std::string>& paths) {
  if (paths.empty()) raise<UserError>("no checkpoints to average");
  StateDict first = load_file(paths[0], Reading::kMapped);
  TensorDict first_model = model_entry(first, paths[0]);
  // The sums, in the first checkpoint's order: float64, or int64 for integer entries.
  std::vector<std::pair<std::string, at::Tensor>> sums;
  for (const auto& item : first_model) {
    const at::Tensor& p = item.value();
    sums.emplace_back(item.key(), p.to(p.is_floating_point() ? at::kDouble : at::kLong, /*non_blocking=*/false,
                                       /*copy=*/true));
    release_mapped_pages(p);
  }
  for (size_t i = 1; i < paths.size(); ++i) {
    TensorDict model = model_entry(load_file(paths[i], Reading::kMapped), paths[i]);
    if (model.size() != first_model.size()) {
      raise<DataError>("{} has {} parameters, but {} has {}: only checkpoints of one model can be averaged", paths[i],
                       model.size(), paths[0], first_model.size());
    }
    for (auto& [name, sum] : sums) {
      if (!model.contains(name)) {
        raise<DataError>("{} has no parameter `{}`, which {} has: only checkpoints of one model can be averaged",
                         paths[i], name, paths[0]);
      }
      const at::Tensor p = model.at(name);
      if (p.sizes() != sum.sizes()) {
        raise<DataError>("{}: parameter `{}` has shape {}, but {} in {}", paths[i], name, shape(p), shape(sum),
                         paths[0]);
      }
      sum.add_(p.to(sum.scalar_type()));
      release_mapped_pages(p);
    }
  }
  TensorDict averaged;
  const auto n = static_cast<int64_t>(paths.size());
  for (auto& [name, sum] : sums) {
    const at::ScalarType type = first_model.at(name).scalar_type();
    at::Tensor mean = sum.is_floating_point() ? sum.div_(static_cast<double>(n)) : sum.div_(n, "floor");
    averaged.insert(name, mean.to(type));
    sum = at::Tensor();  // frees the float64 sum as its average is made
  }
  StateDict out = new_state_dict();
  for (const auto& item : first) out.insert(item.key(), item.value());
  out.insert_or_assign(kModelKey, averaged);
  return out;
}

}  // namespace fairseq_cpp::checkpoint
