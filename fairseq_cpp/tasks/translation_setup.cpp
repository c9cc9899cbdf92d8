#include "fairseq_cpp/tasks/translation_setup.h"

#include <filesystem>
#include <optional>
#include <regex>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/checkpoint/load_model.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/core/meters.h"
#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/distributed/topology.h"
#include "fairseq_cpp/models/ensemble.h"
#include "fairseq_cpp/models/quantize.h"
#include "fairseq_cpp/nn/bf16_gemm.h"
#include "fairseq_cpp/nn/packed_linear.h"
#include "fairseq_cpp/nn/quantized_linear.h"
#include "fairseq_cpp/tasks/distributed_setup.h"

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

data::BatchingOptions batching_options(const config::DatasetConfig& dataset, BatchesFor use) {
  const bool valid = use == BatchesFor::validation;
  data::BatchingOptions o;
  o.max_tokens = valid && dataset.max_tokens_valid > 0 ? dataset.max_tokens_valid : dataset.max_tokens;
  o.max_sentences = valid && dataset.batch_size_valid > 0 ? dataset.batch_size_valid : dataset.batch_size;
  o.required_batch_size_multiple = dataset.required_batch_size_multiple;
  return o;
}

namespace {

// Whether generation runs in bf16 (--bf16); refuses what cannot run, before a checkpoint is read. On
// a GPU the weights, activations and caches are bf16; on the CPU the linear layers' weights and
// products (float32 sums), the rest float32. The search's log-probabilities and scores are float32.
bool check_generation_precision(const config::Config& cli, c10::Device device) {
  if (cli.common.fp16)
    raise<UserError>(
        "--fp16 applies to training and fairseq-cpp-eval validate; generation runs in float32, or bf16 "
        "with --bf16");
  const bool int8 = cli.generation.quantize == "int8";
  if (int8 && device.is_cuda())
    raise<UserError>("--quantize int8 runs on the CPU only, and this run is on the GPU; add --cpu");
  if (!cli.common.bf16) return false;
  if (int8) raise<UserError>("--bf16 and --quantize int8 exclude each other: choose one");
  if (device.is_cpu() && !nn::bf16_gemm_supported())
    raise<UserError>(
        "--bf16 on the CPU needs AVX512_BF16 (AMD Zen 4, Intel Cooper Lake or Sapphire Rapids and later), and "
        "this CPU has none (its bf16 products would run slower than float32's): leave --bf16 out, or use "
        "--quantize int8, or a GPU");
  return true;
}

// The linear weights as generation's CPU kernels read them: quantized to int8 (`int8`) or packed
// for the bf16 kernel (`bf16`) or the float32 one (`pack`), in place; the log says how many and how
// long it took.
void prepare_weights(torch::nn::Module& model, bool int8, bool bf16, bool pack) {
  const double started = core::monotonic_seconds();
  if (int8) {
    models::QuantizeOptions options;
    options.in_place = true;  // the float32 weights are freed: generation reads only the int8 ones
    const size_t quantized = models::quantize_int8(model, options);
    log::info("generate",
              "--quantize int8: {} linear weights quantized per output channel, in place ({} kernel) in {:.2f} s",
              quantized, nn::int8_linear_kernel(), core::monotonic_seconds() - started);
  } else if (bf16) {
    const size_t packed = models::pack_weights_in_place(model, torch::kBFloat16);
    log::info("generate",
              "--bf16: {} linear weights rounded to bf16 and packed in place for the AVX512_BF16 kernel in {:.2f} s",
              packed, core::monotonic_seconds() - started);
  } else if (pack) {
    const size_t packed = models::pack_weights_in_place(model);
    log::info("generate", "{} linear weights packed in place for the {} kernel in {:.2f} s", packed,
              core::cpu_has_avx512f() ? "AVX-512F" : "AVX2", core::monotonic_seconds() - started);
  }
}

}  // namespace

Translation load_translation(const config::Config& cli, const std::string& split) {
  Translation t;
  t.device = c10::Device(distributed::local_device(topology_inputs(cli)));
  const bool bf16 = check_generation_precision(cli, t.device);
  // Several data directories (bin1:bin2, sharded training data): generation reads the first, as fairseq's does.
  const std::vector<std::string> data_dirs = data::split_paths(cli.task.data);
  t.data_dir = data_dirs.empty() ? std::string() : data_dirs[0];
  const std::string& path = cli.common_eval.path;
  if (t.data_dir.empty()) raise<UserError>("no data directory given: the first argument is the data-bin DATA");
  if (path.empty()) raise<UserError>("no checkpoint given: use --path CHECKPOINT");
  std::error_code ec;
  if (!fs::is_directory(t.data_dir, ec)) raise<UserError>("data directory {} does not exist", t.data_dir);
  std::vector<std::string> paths;
  for (size_t start = 0; start <= path.size();) {
    size_t colon = std::min(path.find(':', start), path.size());
    if (colon > start) paths.push_back(path.substr(start, colon - start));
    start = colon + 1;
  }
  for (const auto& p : paths)
    if (!fs::exists(p, ec)) raise<UserError>("checkpoint {} does not exist (--path)", p);

  // Mapped, not read: only the model's records are touched (copied into the model), never the
  // optimizer's state a training checkpoint also holds (twice the model with adam).
  const double started = core::monotonic_seconds();
  std::optional<checkpoint::StateDict> stored = checkpoint::load_file(paths[0], checkpoint::Reading::kMapped);
  const config::Config stored_config = checkpoint::config_entry(*stored, paths[0]);
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
  const bool int8 = cli.generation.quantize == "int8";
  std::vector<std::shared_ptr<models::EncoderDecoderModel>> members;
  for (size_t i = 0; i < paths.size(); ++i) {
    checkpoint::LoadedModel loaded =
        checkpoint::load_model(i == 0 ? *stored : checkpoint::load_file(paths[i], checkpoint::Reading::kMapped),
                               paths[i], vocab, t.device, cli.common_eval.use_ema);
    if (i == 0) t.trained = loaded.config;
    log::info("generate", "loaded {} ({} parameters, arch {}{}) on {}{} after {:.2f} s", paths[i],
              models::count_parameters(*loaded.model), loaded.config.model.arch,
              cli.common_eval.use_ema ? ", its EMA weights" : "", t.device.str(), bf16 ? " in bf16" : "",
              core::monotonic_seconds() - started);
    if (bf16 && t.device.is_cuda()) loaded.model->to(torch::kBFloat16);
    members.push_back(loaded.model);
  }
  stored.reset();  // unmapped before packing: the pages the records were read from leave the resident set
  t.models = members.size();
  t.model = members.size() == 1 ? members[0] : std::make_shared<models::EnsembleModel>(members);
  t.model->eval();
  const bool cpu = t.device.is_cpu();
  prepare_weights(*t.model, int8, bf16 && cpu, !bf16 && cpu && nn::packed_linear_supported());
  // The clean pages of the program's files leave the resident set before the search (those of the
  // libraries' start for good; those in use come back as touched). No other thread maps memory yet.
  if (t.device.is_cpu()) core::release_file_pages();
  return t;
}

}  // namespace fairseq_cpp::tasks
