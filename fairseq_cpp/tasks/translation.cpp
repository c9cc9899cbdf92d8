#include "fairseq_cpp/tasks/translation.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fairseq_cpp/checkpoint/average.h"
#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/checkpoint/run_lock.h"
#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/core/meters.h"
#include "fairseq_cpp/core/progress.h"
#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/data/epoch_batch_iterator.h"
#include "fairseq_cpp/data/language_pair_dataset.h"
#include "fairseq_cpp/distributed/distributed_utils.h"
#include "fairseq_cpp/models/transformer.h"
#include "fairseq_cpp/tasks/bleu_validation.h"
#include "fairseq_cpp/tasks/translation_setup.h"
#include "fairseq_cpp/trainer/trainer.h"
#include "fairseq_cpp/trainer/training_state.h"

namespace fairseq_cpp::tasks {
namespace fs = std::filesystem;
namespace {

std::atomic<int> g_stop_signal{0};

void on_stop_signal(int signo) { g_stop_signal.store(signo); }

// The languages: the config's, else the file names in the data-bin `dir`.
std::pair<std::string, std::string> language_pair(const config::TaskConfig& task, const std::string& dir,
                                                  const std::string& split) {
  if (!task.source_lang.empty() && !task.target_lang.empty()) return {task.source_lang, task.target_lang};
  return infer_languages(dir, split);
}

// The running averages behind one progress line (fairseq's train_inner / train / valid meters).
struct Meters {
  criterions::LossStats loss;
  int64_t updates = 0;
  double gnorm_sum = 0;
  int64_t clipped = 0;
  int64_t ooms = 0;
  double loss_scale = 0;  // fp16: the scale after the last update; 0 = no scaler
  double train_seconds = 0;
  double start = core::monotonic_seconds();

  void add(const trainer::StepStats& s, double seconds) {
    loss.add(s.loss);
    updates += s.skipped ? 0 : 1;
    gnorm_sum += s.skipped ? 0 : s.gnorm;
    clipped += s.clipped ? 1 : 0;
    ooms += s.ooms;
    if (s.loss_scale > 0) loss_scale = s.loss_scale;
    train_seconds += seconds;
  }
  core::Stats train_stats(int64_t num_updates, double lr, double wall) const {
    double elapsed = std::max(1e-9, core::monotonic_seconds() - start);
    double n = std::max<int64_t>(1, updates);
    core::Stats stats{{"loss", loss.loss(), 3},
            {"nll_loss", loss.nll_loss(), 3},
            {"ppl", loss.perplexity(), 2},
            {"wps", loss.ntokens / elapsed, 0},
            {"ups", updates / elapsed, 2},
            {"wpb", loss.ntokens / n, 1},
            {"bsz", loss.nsentences / n, 1},
            {"num_updates", static_cast<double>(num_updates), 0},
            {"lr", lr, -1},
            {"gnorm", gnorm_sum / n, 3},
            {"clip", 100.0 * clipped / n, 0},
            {"oom", static_cast<double>(ooms), 0},
            {"train_wall", train_seconds, 0},
            {"wall", wall, 0}};
    // fairseq logs the loss scale after clip.
    if (loss_scale > 0) stats.insert(stats.begin() + 11, {"loss_scale", loss_scale, 4});
    return stats;
  }
};

// Checkpoint file names and their retention (fairseq's checkpoint_utils.save_checkpoint).
class CheckpointWriter {
 public:
  CheckpointWriter(const config::CheckpointConfig& options, distributed::Gang& gang) : o_(options), gang_(gang) {}

  // Saves after an update (`end_of_epoch` false) or at the end of an epoch; `is_best` when the
  // validation just improved, `metric` its value when one was just computed. Rank 0 writes; every
  // rank waits for its outcome.
  void save(trainer::Trainer& trainer, const trainer::TrainingState& state, int64_t epoch, bool end_of_epoch,
            bool is_best, std::optional<double> metric, const std::string& config_yaml) {
    if (o_.no_save) return;
    std::vector<std::string> names;
    int64_t updates = state.num_updates;
    if (end_of_epoch && !o_.no_epoch_checkpoints && epoch % std::max<int64_t>(1, o_.save_interval) == 0)
      names.push_back(fmt::format("checkpoint{}{}.pt", epoch, o_.checkpoint_suffix));
    if (!end_of_epoch && o_.save_interval_updates > 0 && updates % o_.save_interval_updates == 0)
      names.push_back(fmt::format("checkpoint_{}_{}{}.pt", epoch, updates, o_.checkpoint_suffix));
    if (is_best) names.push_back(fmt::format("checkpoint_best{}.pt", o_.checkpoint_suffix));
    if (!o_.no_last_checkpoints) names.push_back(fmt::format("checkpoint_last{}.pt", o_.checkpoint_suffix));
    // Rank 0 writes; a failed save (a full disk) stops every rank with rank 0's message.
    std::string failed;
    if (gang_.rank() == 0 && metric && keeps_best(*metric)) {
      // fairseq's name: the metric to 3 decimals, then a digit below N that parts ties.
      names.push_back(fmt::format("checkpoint.best_{}_{:.3f}{}{}.pt", o_.best_checkpoint_metric, *metric,
                                  updates % o_.keep_best_checkpoints, o_.checkpoint_suffix));
    }
    if (gang_.rank() == 0 && !names.empty()) {
      try {
        fs::create_directories(o_.save_dir);
        double start = core::monotonic_seconds();
        checkpoint::StateDict ckpt =
            trainer::make_checkpoint(trainer, state, config_yaml, !o_.no_save_optimizer_state);
        for (const auto& name : names) checkpoint::save_file((fs::path(o_.save_dir) / name).string(), ckpt);
        log::info("checkpoint", "saved {} (epoch {} @ {} updates) in {:.1f} s", join(names), epoch, updates,
                  core::monotonic_seconds() - start);
        prune();
      } catch (const OperationalError& e) {
        failed = e.what();
      }
    }
    {
      distributed::CollectiveScope outcome("the checkpoint save's outcome");
      failed = distributed::broadcast_object(gang_, nlohmann::json(failed)).get<std::string>();
    }
    if (!failed.empty()) throw OperationalError(gang_.rank() == 0 ? failed : "rank 0 stopped the run: " + failed);
  }

 private:
  static std::string join(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  }

  // checkpoint.best_<metric>_<value>.pt files of save_dir, best first.
  std::vector<std::pair<double, std::string>> best_files() const {
    return checkpoint::best_checkpoints(o_.save_dir, o_.best_checkpoint_metric, o_.checkpoint_suffix,
                                        o_.maximize_best_checkpoint_metric);
  }

  // Whether a validation of `metric` joins the keep_best_checkpoints best: while fewer are kept,
  // or when it is at least as good as the worst kept (fairseq's is_better).
  bool keeps_best(double metric) const {
    if (o_.keep_best_checkpoints <= 0) return false;
    auto kept = best_files();
    if (kept.size() < static_cast<size_t>(o_.keep_best_checkpoints)) return true;
    double worst = kept.back().first;
    return o_.maximize_best_checkpoint_metric ? metric >= worst : metric <= worst;
  }

  static std::string escaped(const std::string& text) {
    return std::regex_replace(text, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
  }

  // Keeps the newest keep_interval_updates update checkpoints, keep_last_epochs epoch ones and the
  // keep_best_checkpoints best ones.
  void prune() {
    auto keep_newest = [&](const std::regex& pattern, int64_t keep) {
      if (keep <= 0) return;  // fairseq: -1 (the default) and 0 keep all
      std::vector<std::pair<int64_t, fs::path>> found;
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(o_.save_dir, ec)) {
        std::smatch m;
        std::string name = entry.path().filename().string();
        if (std::regex_match(name, m, pattern)) found.emplace_back(std::stoll(m[1]), entry.path());
      }
      std::sort(found.rbegin(), found.rend());
      for (size_t i = static_cast<size_t>(keep); i < found.size(); ++i) fs::remove(found[i].second, ec);
    };
    const std::string suffix = escaped(o_.checkpoint_suffix);
    keep_newest(std::regex(R"(checkpoint_\d+_(\d+))" + suffix + R"(\.pt)"), o_.keep_interval_updates);
    keep_newest(std::regex(R"(checkpoint(\d+))" + suffix + R"(\.pt)"), o_.keep_last_epochs);
    if (o_.keep_best_checkpoints > 0) {
      auto kept = best_files();
      std::error_code ec;
      for (size_t i = static_cast<size_t>(o_.keep_best_checkpoints); i < kept.size(); ++i) fs::remove(kept[i].second, ec);
    }
  }

  const config::CheckpointConfig& o_;
  distributed::Gang& gang_;
};

// One validation's results on one subset: the losses, and BLEU with task.eval_bleu.
struct Validation {
  criterions::LossStats loss;
  std::optional<double> bleu;
};

// Checks before any work that validation computes `name` (fairseq's best_checkpoint_metric).
void check_metric(const std::string& name, bool eval_bleu) {
  if (name == "loss" || name == "nll_loss" || name == "ppl" || (name == "bleu" && eval_bleu)) return;
  if (name == "bleu")
    raise<UserError>("`checkpoint.best_checkpoint_metric` is bleu, but validation computes BLEU only with "
                     "`task.eval_bleu` true (--eval-bleu).");
  raise<UserError>("`checkpoint.best_checkpoint_metric` {} is not computed during validation; use loss, nll_loss, "
                   "ppl, or bleu with --eval-bleu.",
                   name);
}

// The validation metric that picks checkpoint_best.
double metric_of(const Validation& v, const std::string& name) {
  if (name == "nll_loss") return v.loss.nll_loss();
  if (name == "ppl") return v.loss.perplexity();
  if (name == "bleu") return v.bleu.value_or(0.0);
  return v.loss.loss();
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGUSR1}) sigaction(s, &sa, nullptr);
}

int train_translation(const config::Config& cfg, distributed::Gang& gang) {
  const auto& task = cfg.task;
  const auto& ckpt_cfg = cfg.checkpoint;
  const auto& optimization = cfg.optimization;
  // fairseq's `data`: one data-bin, or several separated by ':' that the epochs train on in turn.
  const std::vector<std::string> paths = data::split_paths(task.data);
  if (paths.empty()) raise<UserError>("`task.data` is not set: give the data-bin directory.");
  std::error_code ec;
  for (const auto& path : paths)
    if (!fs::is_directory(path, ec)) raise<UserError>("`task.data` {} is not a directory.", path);
  if (cfg.dataset.max_tokens <= 0 && cfg.dataset.batch_size <= 0)
    raise<UserError>("set `dataset.max_tokens` or `dataset.batch_size`: batches need a size.");
  check_metric(ckpt_cfg.best_checkpoint_metric, task.eval_bleu);
  // One run per save_dir: rank 0 takes the lock, and every rank learns whether it got it.
  std::optional<checkpoint::RunLock> run_lock;
  if (!ckpt_cfg.no_save) {
    std::string refused;
    if (gang.rank() == 0) {
      try {
        run_lock.emplace(ckpt_cfg.save_dir);
        if (int removed = checkpoint::remove_unfinished_saves(ckpt_cfg.save_dir))
          log::info("checkpoint", "removed {} unfinished checkpoint file(s) of an interrupted save from {}", removed,
                    ckpt_cfg.save_dir);
      } catch (const UserError& e) {
        refused = e.what();
      }
    }
    refused = distributed::broadcast_object(gang, nlohmann::json(refused)).get<std::string>();
    if (!refused.empty()) throw UserError(refused);
  }
  torch::manual_seed(static_cast<uint64_t>(cfg.common.seed));

  // Data: languages, dictionaries and validation from the first directory (fairseq's rule).
  auto [src, tgt] = language_pair(task, paths[0], cfg.dataset.train_subset);
  data::Dictionary src_dict = data::Dictionary::load((fs::path(paths[0]) / ("dict." + src + ".txt")).string());
  data::Dictionary tgt_dict = data::Dictionary::load((fs::path(paths[0]) / ("dict." + tgt + ".txt")).string());
  if (paths.size() > 1) data::check_data_directories(paths, cfg.dataset.train_subset, src, tgt);
  data::LanguagePairOptions pair = language_pair_options(task, task, src_dict);

  // The checkpoint to resume from, read first: its global batch can change the update frequency.
  std::string restore = ckpt_cfg.restore_file;
  if (restore == "checkpoint_last.pt") restore = (fs::path(ckpt_cfg.save_dir) / restore).string();
  std::optional<checkpoint::StateDict> resume;
  if (fs::exists(restore, ec))
    resume = checkpoint::load_file(restore);
  else if (ckpt_cfg.restore_file != "checkpoint_last.pt")
    raise<UserError>("`checkpoint.restore_file` {} does not exist.", restore);
  const auto [saved_world, saved_batches] =
      resume ? trainer::saved_global_batch(*resume, restore) : std::pair<int64_t, int64_t>{0, 0};
  // The world size that update_freq is meant for, and the update frequency of each epoch here.
  const int64_t batch_world =
      cfg.distributed_training.keep_global_batch && saved_world > 0 ? saved_world : gang.size();
  const std::vector<int64_t> update_freqs =
      trainer::keep_global_batch(optimization.update_freq, batch_world, gang.size());
  auto update_freq_of = [&](int64_t epoch) {
    return update_freqs[std::min<size_t>(static_cast<size_t>(std::max<int64_t>(1, epoch) - 1), update_freqs.size() - 1)];
  };
  if (batch_world != gang.size())
    log::info("train", "keep_global_batch: {} was written by a run of {} workers; with {} workers, update_freq {} "
              "becomes {} (the same {} batches per update)", restore, batch_world, gang.size(),
              fmt::join(optimization.update_freq, ","), fmt::join(update_freqs, ","),
              batch_world * optimization.update_freq[0]);

  // Model and numerics.
  models::Vocabularies vocab{src_dict.size(), tgt_dict.size(), src_dict.pad(),
                             src_dict.to_text() == tgt_dict.to_text()};
  auto model = std::make_shared<models::TransformerModel>(models::resolve_transformer_options(cfg.model, task), vocab);
  model->to(gang.device());
  criterions::Criterion criterion(criterions::criterion_options(cfg.criterion, optimization, tgt_dict.pad()));
  auto optimizer =
      optim::build_optimizer(optim::optimizer_options(cfg.optimizer, optimization), models::unique_parameters(*model));
  auto scheduler = optim::build_lr_scheduler(optim::lr_scheduler_options(cfg.lr_scheduler, optimization, ckpt_cfg));
  trainer::TrainerOptions trainer_options;
  trainer_options.clip_norm = optimization.clip_norm;
  trainer_options.seed = cfg.common.seed;
  trainer_options.max_nonfinite = optimization.max_nonfinite;
  trainer_options.check_interval = cfg.distributed_training.check_interval;
  trainer_options.bucket_cap_mb = static_cast<double>(cfg.distributed_training.bucket_cap_mb);
  // fairseq's DDP backends: c10d / pytorch_ddp overlap the all-reduce with backward, the legacy one does not.
  const std::string& ddp = cfg.distributed_training.ddp_backend;
  trainer_options.overlap_all_reduce = ddp == "c10d" || ddp == "pytorch_ddp";
  trainer_options.precision = optim::precision_of(cfg.common);
  if (cfg.common.fp16) {
    // fairseq's FP16Optimizer: the window defaults to 2^14 / (data-parallel size * update_freq).
    const auto& common = cfg.common;
    if (!common.fp16_scale_window && optimization.update_freq.size() > 1)
      raise<UserError>("set `common.fp16_scale_window` (--fp16-scale-window): its default needs one "
                       "`optimization.update_freq`, not a schedule of {}", optimization.update_freq.size());
    optim::LossScalerOptions scaler;
    scaler.init_scale = static_cast<double>(common.fp16_init_scale);
    scaler.scale_window = common.fp16_scale_window.value_or(
        std::max<int64_t>(1, (1 << 14) / gang.size() / update_freqs[0]));
    scaler.tolerance = common.fp16_scale_tolerance;
    scaler.threshold = common.threshold_loss_scale;
    scaler.min_loss_scale = common.min_loss_scale;
    trainer_options.loss_scaler = scaler;
    if (!common.fp16_fallback.empty()) {
      trainer_options.fp16_fallback =
          common.fp16_fallback == "bf16" ? optim::Precision::kBFloat16 : optim::Precision::kFloat32;
      trainer_options.fp16_fallback_updates = common.fp16_fallback_updates;
    }
  }
  if (cfg.ema.store_ema)
    trainer_options.ema = trainer::EmaOptions{cfg.ema.ema_decay, cfg.ema.ema_start_update, cfg.ema.ema_update_freq};
  trainer::Trainer trainer(trainer_options, model, criterion, std::move(optimizer), std::move(scheduler), gang);
  if (trainer.ema()) {
    // fairseq's ema_seed_model: the EMA starts from another run's EMA weights (a resume's own win).
    const std::string& seed = cfg.ema.ema_seed_model;
    if (!seed.empty()) trainer.ema()->restore(checkpoint::ema_entry(checkpoint::load_file(seed), seed), 0, seed);
    log::info("train", "EMA of the weights: decay {}, from update {}, every {} update(s){}{}", cfg.ema.ema_decay,
              cfg.ema.ema_start_update, cfg.ema.ema_update_freq, seed.empty() ? "" : "; seeded from " + seed,
              cfg.ema.validate_with_ema ? "; validation uses it" : "");
  }
  log::info("train", "model {}: {} parameters; criterion {}; optimizer {}; {} workers; precision {}", cfg.model.arch,
            models::count_parameters(*model), cfg.criterion._name, cfg.optimizer._name, gang.size(),
            cfg.common.bf16   ? "bf16 (autocast; float32 weights, gradients and optimizer state)"
            : !cfg.common.fp16 ? "fp32"
            : gang.device().is_cuda()
                ? "fp16 (autocast, dynamic loss scaler; float32 weights, gradients and optimizer state)"
                : "fp16 (dynamic loss scaler; the CPU computes in float32)");
  if (trainer.loss_scaler())
    log::info("train", "loss scaler: scale {}, window {}, tolerance {}, minimum {}{}", cfg.common.fp16_init_scale,
              trainer_options.loss_scaler->scale_window, cfg.common.fp16_scale_tolerance, cfg.common.min_loss_scale,
              cfg.common.fp16_fallback.empty()
                  ? std::string()
                  : fmt::format("; at the minimum, {} updates in {} (common.fp16_fallback)",
                                cfg.common.fp16_fallback_updates, cfg.common.fp16_fallback));

  // Batches: the same list on every rank, shards dealt by the iterator.
  data::SizeFilterOptions filter;
  filter.max_source_positions = task.max_source_positions;
  filter.max_target_positions = task.max_target_positions;
  filter.skip_invalid = true;
  filter.what = cfg.dataset.train_subset;
  data::BatchingOptions batching;
  batching.max_tokens = cfg.dataset.max_tokens;
  batching.max_sentences = cfg.dataset.batch_size;
  batching.required_batch_size_multiple = cfg.dataset.required_batch_size_multiple;
  data::EpochBatchIteratorOptions itr_options;
  itr_options.seed = cfg.common.seed;
  itr_options.num_shards = gang.size();
  itr_options.shard_id = gang.rank();
  itr_options.num_workers = cfg.dataset.num_workers;
  itr_options.buffer_size = std::max<int64_t>(1, cfg.dataset.data_buffer_size);
  // Each epoch's batches come from its directory's train, train1, ... (loaded when the epoch starts).
  auto load_train = [&, src = src, tgt = tgt](int64_t shard) {
    auto set = std::make_shared<data::LanguagePairDataset>(data::LanguagePairDataset::load_combined(
        paths[static_cast<size_t>(shard)], cfg.dataset.train_subset, src, tgt, src_dict, tgt_dict,
        task.upsample_primary, pair));
    return data::EpochData{set->make_batches(static_cast<uint32_t>(cfg.common.seed), true, filter, batching),
                           [set](const std::vector<int64_t>& ids) { return set->collate(ids); }};
  };
  data::EpochBatchIterator epoch_itr(static_cast<int64_t>(paths.size()), load_train, itr_options);

  // Validation batches of this shard.
  std::vector<std::pair<std::string, std::shared_ptr<data::LanguagePairDataset>>> valid_sets;
  if (!cfg.dataset.disable_validation) {
    std::string subsets = cfg.dataset.valid_subset;
    for (size_t start = 0; start <= subsets.size();) {
      size_t comma = std::min(subsets.find(',', start), subsets.size());
      std::string name = subsets.substr(start, comma - start);
      if (!name.empty())
        valid_sets.emplace_back(name, std::make_shared<data::LanguagePairDataset>(data::LanguagePairDataset::load(
                                          paths[0], name, src, tgt, src_dict, tgt_dict, pair)));
      start = comma + 1;
    }
  }
  data::BatchingOptions valid_batching = batching;
  if (cfg.dataset.max_tokens_valid > 0) valid_batching.max_tokens = cfg.dataset.max_tokens_valid;
  if (cfg.dataset.batch_size_valid > 0) valid_batching.max_sentences = cfg.dataset.batch_size_valid;

  // Resume.
  trainer::TrainingState state;
  if (resume) {
    trainer::RestoreOptions ro{ckpt_cfg.reset_optimizer, ckpt_cfg.reset_lr_scheduler, ckpt_cfg.reset_dataloader,
                               ckpt_cfg.reset_meters};
    state = trainer::restore_checkpoint(*resume, restore, trainer, ro);
    resume.reset();
    const data::IteratorState& cursor = state.iterator;
    if (cursor.epoch > 0 && cursor.data_shards != epoch_itr.data_shards())
      raise<UserError>("{} continues epoch {} on data directory {} of {}, but `task.data` {} lists {}; resume with the "
                       "directories it was trained on, or start the data from epoch 1 with "
                       "`checkpoint.reset_dataloader`.",
                       restore, cursor.epoch, cursor.data_shard + 1, cursor.data_shards, task.data, paths.size());
    if (cursor.epoch > 0) epoch_itr.load_state(cursor);
    log::info("checkpoint", "loaded {} (epoch {} @ {} updates)", restore, std::max<int64_t>(1, state.iterator.epoch),
              state.num_updates);
    const int64_t now_batches = gang.size() * update_freq_of(state.iterator.epoch);
    if (saved_batches > 0 && saved_batches != now_batches)
      log::warning("train", "{} was written with {} batches per update; this run takes {} ({} workers x update_freq "
                   "{}): set distributed_training.keep_global_batch=true to keep the run's global batch",
                   restore, saved_batches, now_batches, gang.size(), update_freq_of(state.iterator.epoch));
  } else {
    log::info("checkpoint", "no checkpoint found in {}: starting from scratch", ckpt_cfg.save_dir);
  }
  const std::string config_yaml = config::dump_config(cfg);
  CheckpointWriter writer(ckpt_cfg, gang);
  const double run_start = core::monotonic_seconds();
  auto wall = [&] { return state.wall_seconds + core::monotonic_seconds() - run_start; };
  const bool maximize = ckpt_cfg.maximize_best_checkpoint_metric;

  // Validates on every valid subset (sharded across ranks, summed); returns the first's results.
  auto validate = [&](int64_t epoch) -> std::optional<Validation> {
    if (valid_sets.empty() || trainer.num_updates() < cfg.dataset.validate_after_updates) return std::nullopt;
    std::optional<trainer::EmaWeights> ema_weights;  // the model holds the EMA until validation ends
    if (cfg.ema.validate_with_ema) ema_weights.emplace(*trainer.ema());
    std::optional<Validation> first;
    for (const auto& [name, set] : valid_sets) {
      data::SizeFilterOptions vf = filter;
      vf.what = name;
      vf.skip_invalid = cfg.dataset.skip_invalid_size_inputs_valid_test;
      auto batches = set->make_batches(static_cast<uint32_t>(cfg.common.seed), false, vf, valid_batching);
      criterions::LossStats local;
      std::optional<BleuValidation> bleu;
      if (task.eval_bleu) bleu.emplace(task, tgt_dict, static_cast<uint64_t>(cfg.common.seed));
      for (size_t i = static_cast<size_t>(gang.rank()); i < batches.size(); i += static_cast<size_t>(gang.size())) {
        data::Batch batch = set->collate(batches[i]);
        local.add(trainer.valid_step(batch));
        if (bleu) bleu->add(trainer.model(), batch, gang.device());
      }
      std::map<std::string, distributed::DictValue> values{{"loss", local.loss_sum},
                                                           {"nll_loss", local.nll_loss_sum},
                                                           {"sample_size", local.sample_size},
                                                           {"ntokens", local.ntokens},
                                                           {"nsentences", local.nsentences}};
      // BLEU's statistics are summed, then scored: the BLEU of the whole subset.
      const std::vector<double> bleu_local = bleu ? bleu->statistics() : std::vector<double>{};
      for (size_t k = 0; k < bleu_local.size(); ++k) values.emplace(fmt::format("bleu_{:02d}", k), bleu_local[k]);
      distributed::CollectiveScope sums_scope("the validation sums of '" + name + "'");
      auto sums = distributed::all_reduce_dict(gang, values);
      Validation result;
      if (bleu) {
        std::vector<double> bleu_sums(bleu_local.size());
        for (size_t k = 0; k < bleu_sums.size(); ++k) bleu_sums[k] = std::get<double>(sums.at(fmt::format("bleu_{:02d}", k)));
        result.bleu = bleu->score(bleu_sums);
        if (task.eval_bleu_print_samples && gang.rank() == 0) {
          log::info("valid", "example hypothesis: {}", bleu->sample_hypothesis());
          log::info("valid", "example reference: {}", bleu->sample_reference());
        }
      }
      criterions::LossStats& total = result.loss;
      total.loss_sum = std::get<double>(sums.at("loss"));
      total.nll_loss_sum = std::get<double>(sums.at("nll_loss"));
      total.sample_size = std::get<int64_t>(sums.at("sample_size"));
      total.ntokens = std::get<int64_t>(sums.at("ntokens"));
      total.nsentences = std::get<int64_t>(sums.at("nsentences"));
      double metric = metric_of(result, ckpt_cfg.best_checkpoint_metric);
      double best = state.best ? (maximize ? std::max(*state.best, metric) : std::min(*state.best, metric)) : metric;
      core::ProgressOptions po;
      po.format = gang.rank() == 0
                      ? core::parse_log_format(cfg.common.no_progress_bar ? "none" : cfg.common.log_format, false)
                      : core::LogFormat::none;
      po.epoch = epoch;
      po.prefix = fmt::format("epoch {:03d} | valid on '{}' subset", epoch, name);
      po.tensorboard_logdir = gang.rank() == 0 ? cfg.common.tensorboard_logdir : "";
      core::Stats shown{{"loss", total.loss(), 3}, {"nll_loss", total.nll_loss(), 3}, {"ppl", total.perplexity(), 2}};
      if (result.bleu) shown.push_back({"bleu", *result.bleu, 2});
      shown.push_back({"wpb", static_cast<double>(total.ntokens) / std::max<size_t>(1, batches.size()), 1});
      shown.push_back({"bsz", static_cast<double>(total.nsentences) / std::max<size_t>(1, batches.size()), 1});
      shown.push_back({"num_updates", static_cast<double>(trainer.num_updates()), 0});
      shown.push_back({"best_" + ckpt_cfg.best_checkpoint_metric, best, 3});
      core::make_progress_bar(po)->print(shown, name);
      if (!first) first = result;
    }
    return first;
  };
  // Validation result -> best and early-stopping counter; returns whether it is a new best.
  auto record = [&](const std::optional<Validation>& stats) {
    if (!stats) return false;
    double metric = metric_of(*stats, ckpt_cfg.best_checkpoint_metric);
    bool better = !state.best || (maximize ? metric > *state.best : metric < *state.best);
    if (better) {
      state.best = metric;
      state.bad_validations = 0;
    } else {
      ++state.bad_validations;
    }
    return better;
  };
  auto metric = [&](const std::optional<Validation>& stats) -> std::optional<double> {
    if (!stats) return std::nullopt;
    return metric_of(*stats, ckpt_cfg.best_checkpoint_metric);
  };
  auto sync_state = [&](bool end_of_epoch) {
    state.num_updates = trainer.num_updates();
    state.batch_world_size = batch_world;
    state.update_batches = gang.size() * update_freq_of(epoch_itr.epoch());
    state.iterator = epoch_itr.state();
    if (end_of_epoch) state.iterator = epoch_itr.next_epoch_state();
  };

  const int64_t max_epoch = optimization.max_epoch > 0 ? optimization.max_epoch : INT64_MAX;
  const int64_t max_update = optimization.max_update > 0 ? optimization.max_update : INT64_MAX;
  bool done = trainer.num_updates() >= max_update;
  double allreduce_wait = 0, step_seconds = 0;  // this run's, for the closing line
  while (!done) {
    // Checked first: with sharded data, starting an epoch loads its directory.
    if (epoch_itr.next_epoch_idx() > max_epoch) break;
    // fairseq's curriculum: the first `curriculum` epochs keep the batches in length order.
    data::EpochIterator& itr = epoch_itr.next_epoch_itr(epoch_itr.next_epoch_idx() > cfg.dataset.curriculum);
    const int64_t epoch = epoch_itr.epoch();
    const int64_t update_freq = update_freq_of(epoch);
    core::ProgressOptions po;
    po.format = gang.rank() == 0 ? core::parse_log_format(cfg.common.no_progress_bar ? "none" : cfg.common.log_format,
                                                          isatty(STDERR_FILENO) != 0)
                                 : core::LogFormat::none;
    po.log_interval = cfg.common.log_interval;
    po.epoch = epoch;
    po.tensorboard_logdir = gang.rank() == 0 ? cfg.common.tensorboard_logdir : "";
    po.total = (itr.size() + update_freq - 1) / update_freq;
    auto progress = core::make_progress_bar(po);
    Meters epoch_meters, interval_meters;
    int64_t step = itr.count() / update_freq;
    while (true) {
      // Every collective of this update names it when it fails.
      distributed::CollectiveScope at(fmt::format("update {} of epoch {}", trainer.num_updates() + 1, epoch));
      // A stop signal on any rank: every rank saves at this same update and leaves.
      bool stop = false;
      {
        distributed::CollectiveScope vote("the stop vote");
        stop = distributed::any_flag(gang, g_stop_signal.load() != 0);
      }
      if (stop) {
        log::warning("train", "stop signal received: saving checkpoint_last and stopping at update {}",
                     trainer.num_updates());
        sync_state(false);
        writer.save(trainer, state, epoch, false, false, std::nullopt, config_yaml);
        return kExitStopped;
      }
      std::vector<data::Batch> group = itr.next_group(update_freq);
      if (group.empty()) break;
      double t0 = core::monotonic_seconds();
      trainer::StepStats stats = trainer.train_step(group);
      double seconds = core::monotonic_seconds() - t0;
      allreduce_wait += stats.allreduce_wait_seconds;
      step_seconds += seconds;
      epoch_meters.add(stats, seconds);
      interval_meters.add(stats, seconds);
      ++step;
      int64_t updates = trainer.num_updates();
      // The bar decides what to show (simple/json: every log_interval steps); fairseq's
      // train_inner meters restart after each printed interval.
      progress->log(interval_meters.train_stats(updates, trainer.lr(), wall()), step, "train_inner");
      if (step % std::max<int64_t>(1, po.log_interval) == 0) interval_meters = Meters{};
      done = updates >= max_update ||
             (optimization.stop_time_hours > 0 && wall() > optimization.stop_time_hours * 3600) ||
             (optimization.stop_min_lr >= 0 && trainer.lr() <= optimization.stop_min_lr);
      bool valid_due = cfg.dataset.validate_interval_updates > 0 &&
                       updates % cfg.dataset.validate_interval_updates == 0 && !stats.skipped;
      bool save_due =
          ckpt_cfg.save_interval_updates > 0 && updates % ckpt_cfg.save_interval_updates == 0 && !stats.skipped;
      if ((valid_due || save_due || done) && itr.has_next()) {
        auto stats = valid_due || done ? validate(epoch) : std::nullopt;
        bool best = record(stats);
        sync_state(false);
        writer.save(trainer, state, epoch, false, best, metric(stats), config_yaml);
        if (ckpt_cfg.patience > 0 && state.bad_validations >= ckpt_cfg.patience) {
          log::info("train", "early stop: no better validation {} for {} validations", ckpt_cfg.best_checkpoint_metric,
                    state.bad_validations);
          done = true;
        }
      }
      if (done) break;
    }
    progress->print(epoch_meters.train_stats(trainer.num_updates(), trainer.lr(), wall()), "train");
    if (!itr.has_next()) {
      // End of the epoch: validate, step the epoch schedule, save.
      distributed::CollectiveScope at(fmt::format("the end of epoch {} at update {}", epoch, trainer.num_updates()));
      bool valid_due = epoch % std::max<int64_t>(1, cfg.dataset.validate_interval) == 0;
      auto stats = valid_due ? validate(epoch) : std::nullopt;
      bool best = record(stats);
      trainer.lr_step(epoch, metric(stats));  // fairseq steps the schedule on the checkpoint metric
      sync_state(true);
      writer.save(trainer, state, epoch, true, best, metric(stats), config_yaml);
      if (ckpt_cfg.patience > 0 && state.bad_validations >= ckpt_cfg.patience) {
        log::info("train", "early stop: no better validation {} for {} validations", ckpt_cfg.best_checkpoint_metric,
                  state.bad_validations);
        done = true;
      }
      if (optimization.stop_min_lr >= 0 && trainer.lr() <= optimization.stop_min_lr) done = true;
    }
  }
  log::info("train", "done training in {:.1f} seconds ({} updates)", wall(), trainer.num_updates());
  if (gang.size() > 1)
    log::info("train", "gradient all-reduce: {:.2f} s of this run's {:.1f} s of updates waited for it after backward "
              "(rank {}; {})", allreduce_wait, step_seconds, gang.rank(),
              trainer_options.overlap_all_reduce ? "buckets started during backward" : "started after backward");
  return kExitOk;
}

}  // namespace fairseq_cpp::tasks
