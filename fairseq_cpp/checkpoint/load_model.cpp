#include "fairseq_cpp/checkpoint/load_model.h"

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/nn/linear.h"

namespace fairseq_cpp::checkpoint {

LoadedModel load_model(const std::string& path, const models::Vocabularies& vocabularies, const c10::Device& device,
                       bool use_ema) {
  return load_model(load_file(path), path, vocabularies, device, use_ema);
}

LoadedModel load_model(const StateDict& state, const std::string& path, const models::Vocabularies& vocabularies,
                       const c10::Device& device, bool use_ema) {
  LoadedModel out;
  out.config = config_entry(state, path);
  models::TransformerOptions options;
  try {
    options = models::resolve_transformer_options(out.config.model, out.config.task);
  } catch (const UserError& e) {
    raise<DataError>("{}: stored model config: {}", path, e.what());
  }
  {
    // load_model_state below overwrites every parameter or throws: drawing initial values first
    // would only cost time (two passes of random numbers over every weight).
    nn::ParametersFromCheckpoint loading;
    out.model = std::make_shared<models::TransformerModel>(options, vocabularies);
  }
  TensorDict weights = use_ema ? ema_entry(state, path) : model_entry(state, path);
  // Embedding sizes name the dictionary when they disagree.
  auto it = weights.find("encoder.embed_tokens.weight");
  if (it != weights.end() && it->value().size(0) != vocabularies.source_size) {
    raise<DataError>("{} was trained with a source dictionary of {} entries, but the data's has {}", path,
                     it->value().size(0), vocabularies.source_size);
  }
  it = weights.find("decoder.embed_tokens.weight");
  if (it != weights.end() && it->value().size(0) != vocabularies.target_size) {
    raise<DataError>("{} was trained with a target dictionary of {} entries, but the data's has {}", path,
                     it->value().size(0), vocabularies.target_size);
  }
  load_model_state(*out.model, weights, path);
  out.model->to(device);
  out.model->eval();
  return out;
}

}  // namespace fairseq_cpp::checkpoint
