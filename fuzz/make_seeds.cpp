// Writes the checkpoint seeds with the project's own save_file (README.md):
//   fsq_fuzz_make_seeds fuzz/corpus
// corpus/fuzz_checkpoint/tiny.pt: a tiny checkpoint (a few tensors of several dtypes and
// shapes, a shared one, the default config, trainer-like extra state); and
// corpus/fuzz_checkpoint_records/tiny: its records in fuzz_checkpoint_records's input format.
#include <cstdio>
#include <filesystem>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/config/config.h"
#include "fuzz/records.h"

int main(int argc, char** argv) {
  using namespace fairseq_cpp;
  if (argc != 2) {
    std::fprintf(stderr, "usage: fsq_fuzz_make_seeds CORPUS_DIR\n");
    return 2;
  }
  const std::filesystem::path corpus = argv[1];
  std::filesystem::create_directories(corpus / "fuzz_checkpoint");
  std::filesystem::create_directories(corpus / "fuzz_checkpoint_records");

  torch::manual_seed(1);
  at::Tensor embed = torch::randn({6, 4});
  checkpoint::TensorDict model;
  model.insert("encoder.embed_tokens.weight", embed);
  model.insert("decoder.embed_tokens.weight", embed);  // shared, as fairseq's state dicts repeat it
  model.insert("decoder.layers.0.fc1.bias", torch::arange(3, torch::kFloat64));
  model.insert("encoder.version", torch::tensor({3}, torch::kInt64));
  model.insert("decoder.output_projection.weight", embed.t());  // a strided view
  model.insert("encoder.layer_norm.weight", torch::ones({4}, torch::kHalf));
  checkpoint::StateDict extra = checkpoint::new_state_dict();
  extra.insert("epoch", int64_t{2});
  extra.insert("best", 4.25);
  extra.insert("name", std::string("tiny"));
  extra.insert("flags", c10::List<bool>({true, false}));
  checkpoint::StateDict state = checkpoint::new_state_dict();
  state.insert(checkpoint::kModelKey, model);
  state.insert(checkpoint::kConfigKey, config::dump_config(config::load_config("")));
  state.insert("extra_state", extra);
  const std::string path = (corpus / "fuzz_checkpoint" / "tiny.pt").string();
  checkpoint::save_file(path, state);

  caffe2::serialize::PyTorchStreamReader reader(path);
  std::string records;
  for (size_t i = 0; reader.hasRecord(fuzz::record_name(i)); ++i) {
    auto [bytes, size] = reader.getRecord(fuzz::record_name(i));
    if (i > 0) records += fuzz::kRecordEnd;
    records.append(static_cast<const char*>(bytes.get()), size);
  }
  fuzz::write_file((corpus / "fuzz_checkpoint_records" / "tiny").string(), records);
  return 0;
}
