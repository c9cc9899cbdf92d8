#include "fairseq_cpp/tasks/validate.h"

#include <filesystem>
#include <memory>
#include <regex>

#include <fmt/core.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/checkpoint/load_model.h"
#include "fairseq_cpp/optim/mixed_precision.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/data/language_pair_dataset.h"
#include "fairseq_cpp/tasks/distributed_setup.h"
#include "fairseq_cpp/tasks/translation_setup.h"

namespace fairseq_cpp::tasks {
namespace fs = std::filesystem;
namespace {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

std::vector<SubsetLoss> validate(const config::Config& cli) {
  // Several data directories (bin1:bin2): validation reads the first, as in training.
  const std::vector<std::string> data_dirs = data::split_paths(cli.task.data);
  const std::string data_dir = data_dirs.empty() ? std::string() : data_dirs[0];
  const std::string& path = cli.common_eval.path;
  if (data_dir.empty()) raise<UserError>("no data directory given: fairseq-cpp-eval validate DATA --path CKPT");
  if (path.empty()) raise<UserError>("no checkpoint given: use --path CHECKPOINT");
  std::error_code ec;
  if (!fs::is_directory(data_dir, ec)) raise<UserError>("data directory {} does not exist", data_dir);
  std::vector<std::string> subsets = split_commas(cli.dataset.valid_subset);
  if (subsets.empty()) raise<UserError>("`dataset.valid_subset` names no subset");

  // Languages: the command line, else the checkpoint's, else the data file names.
  const checkpoint::StateDict stored =
      checkpoint::load_file(path, checkpoint::Reading::kMapped);  // the model's records only
  const config::Config stored_config = checkpoint::config_entry(stored, path);
  std::string src_lang = cli.task.source_lang;
  std::string tgt_lang = cli.task.target_lang;
  if (src_lang.empty() || tgt_lang.empty()) {
    src_lang = stored_config.task.source_lang;
    tgt_lang = stored_config.task.target_lang;
  }
  if (src_lang.empty() || tgt_lang.empty()) std::tie(src_lang, tgt_lang) = infer_languages(data_dir, subsets[0]);
  const std::string src_dict_path = (fs::path(data_dir) / ("dict." + src_lang + ".txt")).string();
  const std::string tgt_dict_path = (fs::path(data_dir) / ("dict." + tgt_lang + ".txt")).string();
  data::Dictionary src_dict = data::Dictionary::load(src_dict_path);
  data::Dictionary tgt_dict = data::Dictionary::load(tgt_dict_path);
  models::Vocabularies vocab{src_dict.size(), tgt_dict.size(), src_dict.pad(),
                             src_dict.to_text() == tgt_dict.to_text()};

  const c10::Device device(distributed::local_device(topology_inputs(cli)));
  checkpoint::LoadedModel loaded = checkpoint::load_model(stored, path, vocab, device, cli.common_eval.use_ema);
  const config::Config& trained = loaded.config;
  log::info("eval", "loaded {} ({} parameters, arch {}{}) on {}", path, models::count_parameters(*loaded.model),
            trained.model.arch, cli.common_eval.use_ema ? ", its EMA weights" : "", device.str());
  criterions::Criterion criterion(
      criterions::criterion_options(trained.criterion, trained.optimization, tgt_dict.pad()));

  data::LanguagePairOptions pair_options = language_pair_options(trained.task, cli.task, src_dict);
  data::SizeFilterOptions filter;
  filter.max_source_positions = loaded.model->max_source_positions();
  filter.max_target_positions = loaded.model->max_target_positions();
  filter.skip_invalid = cli.dataset.skip_invalid_size_inputs_valid_test;
  data::BatchingOptions batching = batching_options(cli.dataset, BatchesFor::validation);
  if (batching.max_tokens <= 0 && batching.max_sentences <= 0) {
    raise<UserError>("set --max-tokens or --batch-size (fairseq-validate needs one of them)");
  }

  std::vector<SubsetLoss> results;
  torch::NoGradGuard no_grad;
  for (const std::string& subset : subsets) {
    auto dataset =
        data::LanguagePairDataset::load(data_dir, subset, src_lang, tgt_lang, src_dict, tgt_dict, pair_options);
    filter.what = subset;
    SubsetLoss result;
    result.subset = subset;
    for (const auto& indices : dataset.make_batches(static_cast<uint32_t>(cli.common.seed), false, filter, batching)) {
      data::Batch batch = dataset.collate(indices);
      if (batch.empty()) continue;
      models::DecoderFeatures decoded;
      {
        // --bf16/--fp16: the forward pass and the loss as the trainer's valid_step runs them.
        optim::AutocastScope autocast(optim::precision_of(cli.common), device.type());
        decoded = loaded.model->forward_features(batch.src_tokens.to(device), batch.src_lengths.to(device),
                                                 batch.prev_output_tokens.to(device));
      }
      const c10::ScalarType matmul = optim::loss_matmul_dtype(optim::precision_of(cli.common), device.type());
      result.stats.add(criterion(decoded.features, decoded.output_weight, batch.target, matmul).stats);
      ++result.batches;
    }
    results.push_back(result);
  }
  return results;
}

std::string format_subset_loss(const SubsetLoss& r) {
  return fmt::format(
      "valid on '{}' subset | loss {:.6f} | nll_loss {:.6f} | ppl {:.4f} | ntokens {} | nsentences {} | "
      "batches {}",
      r.subset, r.stats.loss(), r.stats.nll_loss(), r.stats.perplexity(), r.stats.ntokens, r.stats.nsentences,
      r.batches);
}

int validate_main(const Invocation& inv) {
  for (const SubsetLoss& result : validate(inv.config)) fmt::print("{}\n", format_subset_loss(result));
  return kExitOk;
}

}  // namespace fairseq_cpp::tasks
