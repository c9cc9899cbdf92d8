#pragma once
// What the programs that run a trained translation model share: the languages (command line, else
// the checkpoint's config, else the data file names), the data-bin's dictionaries and the model
// loaded from `common_eval.path` onto the CPU or the first GPU.
//
//   Translation t = load_translation(cfg, "test");
//   t.model->encode(...); t.tgt_dict.symbol(id);

#include <memory>
#include <string>
#include <utility>

#include <c10/core/Device.h>

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/data/batching.h"
#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/data/language_pair_dataset.h"
#include "fairseq_cpp/models/transformer.h"

namespace fairseq_cpp::tasks {

struct Translation {
  std::string data_dir;
  std::string src_lang;
  std::string tgt_lang;
  data::Dictionary src_dict;
  data::Dictionary tgt_dict;
  config::Config trained;                              // the config stored with the (first) model
  std::shared_ptr<models::EncoderDecoderModel> model;  // in eval mode on `device`; with --path a.pt:b.pt
                                                       // an EnsembleModel of them
  size_t models = 1;                                   // how many `common_eval.path` names
  c10::Device device = c10::Device(c10::kCPU);
};

// "<split>.<src>-<tgt>.<src>.idx" in `dir` -> {src, tgt}; a UserError unless exactly one pair exists.
std::pair<std::string, std::string> infer_languages(const std::string& dir, const std::string& split);

// How sentences are padded (as the model was trained: `trained`'s left_pad_*) and truncated (as this
// run asks: `run`'s truncate_source to its max_source_positions), with the dictionary's pad and eos.
data::LanguagePairOptions language_pair_options(const config::TaskConfig& trained, const config::TaskConfig& run,
                                                const data::Dictionary& dict);

// fairseq's batch sizes: --max-tokens and --batch-size; for validation --max-tokens-valid and
// --batch-size-valid where set (fairseq defaults them to the former); --required-batch-size-multiple.
enum class BatchesFor { training, validation };
data::BatchingOptions batching_options(const config::DatasetConfig& dataset, BatchesFor use);

// Checks `task.data` and `common_eval.path` (UserError naming what is missing), then loads; a path
// of several files separated by ':' (fairseq's --path a.pt:b.pt) loads each into one ensemble. `split`
// names the data files that reveal the languages when neither the flags nor the checkpoint do.
Translation load_translation(const config::Config& cli, const std::string& split);

}  // namespace fairseq_cpp::tasks
