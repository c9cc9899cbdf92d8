#include "fairseq_cpp/tasks/translation_setup.h"

#include <filesystem>
#include <regex>

#include <torch/torch.h>

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/checkpoint/load_model.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"

namespace fairseq_cpp::tasks {
namespace fs = std::filesystem;
// "<split>.<src>-<tgt>.<src>.idx" in `dir` -> {src, tgt}; an error unless exactly one pair exists.
std::pair<std::string, std::string> infer_languages(const std::string& dir, const std::string& split) {
  std::regex pattern(split + R"(\.([^.\-]+)-([^.\-]+)\.([^.\-]+)\.idx)");
  std::vector<std::pair<std::string, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern) && m[3] == m[1]) found.emplace_back(m[1], m[2]);
  }
  if (found.size() != 1) {
    raise<UserError>(
        "cannot infer the languages from {} ({} candidates for split `{}`); set --source-lang and "
        "--target-lang",
        dir, found.size(), split);
  }
  return found.front();
}

data::LanguagePairOptions language_pair_options(const config::TaskConfig& trained, const config::TaskConfig& run,
                                                const data::Dictionary& dict) {
  data::LanguagePairOptions o;
  o.left_pad_source = trained.left_pad_source;
  o.left_pad_target = trained.left_pad_target;
  o.truncate_source = run.truncate_source ? run.max_source_positions : 0;
  o.pad = dict.pad();
  o.eos = dict.eos();
  return o;
}

Translation load_translation(const config::Config& cli, const std::string& split) {
  Translation t;
  t.data_dir = cli.task.data;
  const std::string& path = cli.common_eval.path;
  if (t.data_dir.empty()) raise<UserError>("no data directory given: the first argument is the data-bin DATA");
  if (path.empty()) raise<UserError>("no checkpoint given: use --path CHECKPOINT");
  std::error_code ec;
  if (!fs::is_directory(t.data_dir, ec)) raise<UserError>("data directory {} does not exist", t.data_dir);
  if (!fs::exists(path, ec)) raise<UserError>("checkpoint {} does not exist (--path)", path);

  const checkpoint::StateDict stored = checkpoint::load_file(path);
  const config::Config stored_config = checkpoint::config_entry(stored, path);
  t.src_lang = cli.task.source_lang;
  t.tgt_lang = cli.task.target_lang;
  if (t.src_lang.empty() || t.tgt_lang.empty()) {
    t.src_lang = stored_config.task.source_lang;
    t.tgt_lang = stored_config.task.target_lang;
  }
  if (t.src_lang.empty() || t.tgt_lang.empty()) std::tie(t.src_lang, t.tgt_lang) = infer_languages(t.data_dir, split);
  t.src_dict = data::Dictionary::load((fs::path(t.data_dir) / ("dict." + t.src_lang + ".txt")).string());
  t.tgt_dict = data::Dictionary::load((fs::path(t.data_dir) / ("dict." + t.tgt_lang + ".txt")).string());
  models::Vocabularies vocab{t.src_dict.size(), t.tgt_dict.size(), t.src_dict.pad(),
                             t.src_dict.to_text() == t.tgt_dict.to_text()};
  const bool cuda = torch::cuda::is_available() && !cli.common.cpu;
  t.device = cuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  checkpoint::LoadedModel loaded = checkpoint::load_model(stored, path, vocab, t.device);
  t.trained = loaded.config;
  t.model = loaded.model;
  t.model->eval();
  log::info("generate", "loaded {} ({} parameters, arch {}) on {}", path, models::count_parameters(*t.model),
            t.trained.model.arch, t.device.str());
  return t;
}

}  // namespace fairseq_cpp::tasks
