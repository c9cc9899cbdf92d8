#pragma once
// A trained model from a checkpoint file, for evaluation and generation: the stored config decides
// the architecture, the dictionaries' sizes the embeddings.
//
//   LoadedModel m = load_model("checkpoints/checkpoint_best.pt", {8000, 8000, 1, true}, torch::kCPU);
//   m.model->eval();

#include <memory>
#include <string>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/models/transformer.h"

namespace fairseq_cpp::checkpoint {

struct LoadedModel {
  config::Config config;                            // the config stored with the model
  std::shared_ptr<models::TransformerModel> model;  // on `device`, in eval mode
};

// Throws UserError/DataError naming `path` for a missing, foreign or mismatching file. With
// `use_ema`, the model takes the checkpoint's EMA weights (DataError when it has none).
LoadedModel load_model(const std::string& path, const models::Vocabularies& vocabularies, const c10::Device& device,
                       bool use_ema = false);
// The same from a checkpoint already read with load_file(path).
LoadedModel load_model(const c10::impl::GenericDict& checkpoint, const std::string& path,
                       const models::Vocabularies& vocabularies, const c10::Device& device, bool use_ema = false);

}  // namespace fairseq_cpp::checkpoint
