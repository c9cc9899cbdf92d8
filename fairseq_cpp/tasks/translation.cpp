#include "fairseq_cpp/tasks/translation.h"

#include <signal.h>

#include <atomic>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/checkpoint/run_lock.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/data/epoch_batch_iterator.h"
#include "fairseq_cpp/data/language_pair_dataset.h"
#include "fairseq_cpp/distributed/distributed_utils.h"
#include "fairseq_cpp/models/transformer.h"
#include "fairseq_cpp/tasks/bleu_validation.h"
#include "fairseq_cpp/tasks/translation_setup.h"
#include "fairseq_cpp/trainer/checkpoint_writer.h"
#include "fairseq_cpp/trainer/trainer.h"
#include "fairseq_cpp/trainer/training_loop.h"
#include "fairseq_cpp/trainer/training_state.h"
#include "fairseq_cpp/trainer/validation.h"

namespace fairseq_cpp::tasks {
namespace fs = std::filesystem;
namespace {

std::atomic<int> g_stop_signal{0};

void on_stop_signal(int signo) { g_stop_signal.store(signo); }

// The task's data (fairseq's setup_task): the data-bins of `task.data` (one, or several separated
// by ':' that the epochs train on in turn), the languages and dictionaries of the first.
struct TaskData {
  std::vector<std::string> paths;
  std::string src, tgt;
  data::Dictionary src_dict, tgt_dict;
  data::LanguagePairOptions pair;
};

// Checks `task.data` and the batch size before any work: the data-bins' paths.
std::vector<std::string> check_task(const config::Config& cfg) {
  std::vector<std::string> paths = data::split_paths(cfg.task.data);
  if (paths.empty()) raise<UserError>("`task.data` is not set: give the data-bin directory.");
  std::error_code ec;
  for (const auto& path : paths)
    if (!fs::is_directory(path, ec)) raise<UserError>("`task.data` {} is not a directory.", path);
  if (cfg.dataset.max_tokens <= 0 && cfg.dataset.batch_size <= 0)
    raise<UserError>("set `dataset.max_tokens` or `dataset.batch_size`: batches need a size.");
  return paths;
}

// The languages and dictionaries of the checked data-bins `paths`.
TaskData setup_task(const config::Config& cfg, std::vector<std::string> paths) {
  const auto& task = cfg.task;
  // The languages: the config's, else the file names in the first directory (fairseq's rule).
  auto [src, tgt] = !task.source_lang.empty() && !task.target_lang.empty()
                        ? std::pair{task.source_lang, task.target_lang}
                        : infer_languages(paths[0], cfg.dataset.train_subset);
  auto src_dict = data::Dictionary::load((fs::path(paths[0]) / ("dict." + src + ".txt")).string());
  auto tgt_dict = data::Dictionary::load((fs::path(paths[0]) / ("dict." + tgt + ".txt")).string());
  if (paths.size() > 1) data::check_data_directories(paths, cfg.dataset.train_subset, src, tgt);
  data::LanguagePairOptions pair = language_pair_options(task, task, src_dict);
  return TaskData{std::move(paths), src, tgt, std::move(src_dict), std::move(tgt_dict), pair};
}

// One run per save_dir: rank 0 takes the lock (into `lock`), and every rank learns whether it got it.
void take_run_lock(const config::CheckpointConfig& ckpt_cfg, distributed::Gang& gang,
                   std::optional<checkpoint::RunLock>& lock) {
  if (ckpt_cfg.no_save) return;
  distributed::rank0_acts<UserError>(gang, "the run lock", [&] {
    lock.emplace(ckpt_cfg.save_dir);
    if (int removed = checkpoint::remove_unfinished_saves(ckpt_cfg.save_dir))
      log::info("checkpoint", "removed {} unfinished checkpoint file(s) of an interrupted save from {}", removed,
                ckpt_cfg.save_dir);
  });
}

// The checkpoint to resume from, read before the trainer is built: its global batch can change the
// update frequency.
struct Resume {
  std::string path;
  std::optional<checkpoint::StateDict> ckpt;  // unset: a new run
  int64_t saved_world = 0, saved_batches = 0;  // its global batch (trainer::saved_global_batch)
};

Resume read_resume(const config::CheckpointConfig& ckpt_cfg) {
  Resume r;
  r.path = ckpt_cfg.restore_file;
  if (r.path == "checkpoint_last.pt") r.path = (fs::path(ckpt_cfg.save_dir) / r.path).string();
  std::error_code ec;
  if (fs::exists(r.path, ec))
    r.ckpt = checkpoint::load_file(r.path);
  else if (ckpt_cfg.restore_file != "checkpoint_last.pt")
    raise<UserError>("`checkpoint.restore_file` {} does not exist.", r.path);
  if (r.ckpt) std::tie(r.saved_world, r.saved_batches) = trainer::saved_global_batch(*r.ckpt, r.path);
  return r;
}

// The world size that update_freq is meant for, and the update frequency of each epoch here.
struct GlobalBatch {
  int64_t world = 1;
  std::vector<int64_t> update_freqs;
};

GlobalBatch global_batch(const config::Config& cfg, const Resume& resume, const distributed::Gang& gang) {
  const auto& update_freq = cfg.optimization.update_freq;
  GlobalBatch g;
  g.world = cfg.distributed_training.keep_global_batch && resume.saved_world > 0 ? resume.saved_world : gang.size();
  g.update_freqs = trainer::keep_global_batch(update_freq, g.world, gang.size());
  if (g.world != gang.size())
    log::info("train", "keep_global_batch: {} was written by a run of {} workers; with {} workers, update_freq {} "
              "becomes {} (the same {} batches per update)", resume.path, g.world, gang.size(),
              fmt::join(update_freq, ","), fmt::join(g.update_freqs, ","), g.world * update_freq[0]);
  return g;
}

void log_trainer(const config::Config& cfg, trainer::Trainer& trainer) {
  const auto& common = cfg.common;
  log::info("train", "model {}: {} parameters; criterion {}; optimizer {}; {} workers; precision {}", cfg.model.arch,
            models::count_parameters(trainer.model()), cfg.criterion._name, cfg.optimizer._name, trainer.gang().size(),
            common.bf16   ? "bf16 (autocast; float32 weights, gradients and optimizer state)"
            : !common.fp16 ? "fp32"
            : trainer.gang().device().is_cuda()
                ? "fp16 (autocast, dynamic loss scaler; float32 weights, gradients and optimizer state)"
                : "fp16 (dynamic loss scaler; the CPU computes in float32)");
  if (trainer.loss_scaler())
    log::info("train", "loss scaler: scale {}, window {}, tolerance {}, minimum {}{}", common.fp16_init_scale,
              trainer.options().loss_scaler->scale_window, common.fp16_scale_tolerance, common.min_loss_scale,
              common.fp16_fallback.empty()
                  ? std::string()
                  : fmt::format("; at the minimum, {} updates in {} (common.fp16_fallback)",
                                common.fp16_fallback_updates, common.fp16_fallback));
}

// The model, criterion, optimizer, schedule and trainer of `cfg`, on the gang's device; the EMA
// seeded from ema_seed_model.
std::unique_ptr<trainer::Trainer> build_trainer(const config::Config& cfg, const TaskData& task_data,
                                                distributed::Gang& gang, int64_t update_freq) {
  const auto& optimization = cfg.optimization;
  models::Vocabularies vocab{task_data.src_dict.size(), task_data.tgt_dict.size(), task_data.src_dict.pad(),
                             task_data.src_dict.to_text() == task_data.tgt_dict.to_text()};
  auto model =
      std::make_shared<models::TransformerModel>(models::resolve_transformer_options(cfg.model, cfg.task), vocab);
  model->to(gang.device());
  criterions::Criterion criterion(criterions::criterion_options(cfg.criterion, optimization, task_data.tgt_dict.pad()));
  auto optimizer =
      optim::build_optimizer(optim::optimizer_options(cfg.optimizer, optimization), models::unique_parameters(*model));
  auto scheduler =
      optim::build_lr_scheduler(optim::lr_scheduler_options(cfg.lr_scheduler, optimization, cfg.checkpoint));
  auto trainer = std::make_unique<trainer::Trainer>(trainer::trainer_options(cfg, gang.size(), update_freq), model,
                                                    criterion, std::move(optimizer), std::move(scheduler), gang);
  if (trainer->ema()) {
    // fairseq's ema_seed_model: the EMA starts from another run's EMA weights (a resume's own win).
    const std::string& seed = cfg.ema.ema_seed_model;
    if (!seed.empty()) trainer->ema()->restore(checkpoint::ema_entry(checkpoint::load_file(seed), seed), 0, seed);
    log::info("train", "EMA of the weights: decay {}, from update {}, every {} update(s){}{}", cfg.ema.ema_decay,
              cfg.ema.ema_start_update, cfg.ema.ema_update_freq, seed.empty() ? "" : "; seeded from " + seed,
              cfg.ema.validate_with_ema ? "; validation uses it" : "");
  }
  log_trainer(cfg, *trainer);
  return trainer;
}

data::SizeFilterOptions train_filter(const config::Config& cfg) {
  data::SizeFilterOptions filter;
  filter.max_source_positions = cfg.task.max_source_positions;
  filter.max_target_positions = cfg.task.max_target_positions;
  filter.skip_invalid = true;
  filter.what = cfg.dataset.train_subset;
  return filter;
}

// The training batches: the same list on every rank, shards dealt by the iterator; each epoch's
// come from its directory's train, train1, ... (loaded when the epoch starts).
std::unique_ptr<data::EpochBatchIterator> train_iterator(const config::Config& cfg, const TaskData& task_data,
                                                         const distributed::Gang& gang) {
  data::EpochBatchIteratorOptions itr_options;
  itr_options.seed = cfg.common.seed;
  itr_options.num_shards = gang.size();
  itr_options.shard_id = gang.rank();
  itr_options.num_workers = cfg.dataset.num_workers;
  itr_options.buffer_size = std::max<int64_t>(1, cfg.dataset.data_buffer_size);
  auto load_train = [&cfg, &task_data, filter = train_filter(cfg),
                     batching = batching_options(cfg.dataset, BatchesFor::training)](int64_t shard) {
    auto set = std::make_shared<data::LanguagePairDataset>(data::LanguagePairDataset::load_combined(
        task_data.paths[static_cast<size_t>(shard)], cfg.dataset.train_subset, task_data.src, task_data.tgt, task_data.src_dict,
        task_data.tgt_dict, cfg.task.upsample_primary, task_data.pair));
    return data::EpochData{set->make_batches(static_cast<uint32_t>(cfg.common.seed), true, filter, batching),
                           [set](const std::vector<int64_t>& ids) { return set->collate(ids); }};
  };
  return std::make_unique<data::EpochBatchIterator>(static_cast<int64_t>(task_data.paths.size()), load_train,
                                                    itr_options);
}

// The validation subsets (fairseq's valid_subset, comma-separated), from the first directory; BLEU
// with task.eval_bleu.
trainer::Validator make_validator(const config::Config& cfg, const TaskData& task_data, const distributed::Gang& gang) {
  std::vector<trainer::ValidSubset> subsets;
  if (!cfg.dataset.disable_validation) {
    const std::string& names = cfg.dataset.valid_subset;
    for (size_t start = 0; start <= names.size();) {
      size_t comma = std::min(names.find(',', start), names.size());
      std::string name = names.substr(start, comma - start);
      if (!name.empty())
        subsets.emplace_back(name, std::make_shared<data::LanguagePairDataset>(data::LanguagePairDataset::load(
                                       task_data.paths[0], name, task_data.src, task_data.tgt, task_data.src_dict, task_data.tgt_dict, task_data.pair)));
      start = comma + 1;
    }
  }
  trainer::SearchMetricFactory bleu;
  if (cfg.task.eval_bleu)
    bleu = [&cfg, &task_data] {
      return std::make_unique<BleuValidation>(cfg.task, task_data.tgt_dict, static_cast<uint64_t>(cfg.common.seed));
    };
  return trainer::Validator(
      trainer::validation_options(cfg, train_filter(cfg), batching_options(cfg.dataset, BatchesFor::validation),
                                  gang.rank()),
      std::move(subsets), std::move(bleu));
}

// Restores `resume` into `trainer` and `epoch_itr`; the state to continue from (a new one without).
trainer::TrainingState restore(const config::Config& cfg, Resume& resume, trainer::Trainer& trainer,
                               data::EpochBatchIterator& epoch_itr, const GlobalBatch& global) {
  const auto& ckpt_cfg = cfg.checkpoint;
  if (!resume.ckpt) {
    log::info("checkpoint", "no checkpoint found in {}: starting from scratch", ckpt_cfg.save_dir);
    return {};
  }
  trainer::RestoreOptions ro{ckpt_cfg.reset_optimizer, ckpt_cfg.reset_lr_scheduler, ckpt_cfg.reset_dataloader,
                             ckpt_cfg.reset_meters};
  trainer::TrainingState state = trainer::restore_checkpoint(*resume.ckpt, resume.path, trainer, ro);
  resume.ckpt.reset();
  const data::IteratorState& cursor = state.iterator;
  if (cursor.epoch > 0 && cursor.data_shards > 0 && cursor.data_shards != epoch_itr.data_shards())
    raise<UserError>("{} continues epoch {} on data directory {} of {}, but `task.data` {} lists {}; resume with the "
                     "directories it was trained on, or start the data from epoch 1 with "
                     "`checkpoint.reset_dataloader`.",
                     resume.path, cursor.epoch, cursor.data_shard + 1, cursor.data_shards, cfg.task.data,
                     epoch_itr.data_shards());
  if (cursor.epoch > 0) epoch_itr.load_state(cursor);
  log::info("checkpoint", "loaded {} (epoch {} @ {} updates)", resume.path, std::max<int64_t>(1, cursor.epoch),
            state.num_updates);
  const int64_t epoch = std::max<int64_t>(1, cursor.epoch);
  const int64_t update_freq = global.update_freqs[std::min<size_t>(epoch - 1, global.update_freqs.size() - 1)];
  const int64_t now_batches = trainer.gang().size() * update_freq;
  if (resume.saved_batches > 0 && resume.saved_batches != now_batches)
    log::warning("train", "{} was written with {} batches per update; this run takes {} ({} workers x update_freq "
                 "{}): set distributed_training.keep_global_batch=true to keep the run's global batch",
                 resume.path, resume.saved_batches, now_batches, trainer.gang().size(), update_freq);
  return state;
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
  std::vector<std::string> paths = check_task(cfg);
  trainer::check_metric(cfg.checkpoint.best_checkpoint_metric, cfg.task.eval_bleu);
  std::optional<checkpoint::RunLock> run_lock;
  take_run_lock(cfg.checkpoint, gang, run_lock);
  torch::manual_seed(static_cast<uint64_t>(cfg.common.seed));
  const TaskData task_data = setup_task(cfg, std::move(paths));
  Resume resume = read_resume(cfg.checkpoint);
  const GlobalBatch global = global_batch(cfg, resume, gang);
  std::unique_ptr<trainer::Trainer> trainer = build_trainer(cfg, task_data, gang, global.update_freqs[0]);
  std::unique_ptr<data::EpochBatchIterator> epoch_itr = train_iterator(cfg, task_data, gang);
  trainer::Validator validator = make_validator(cfg, task_data, gang);
  trainer::TrainingState state = restore(cfg, resume, *trainer, *epoch_itr, global);
  trainer::CheckpointWriter writer(cfg.checkpoint, gang);
  trainer::TrainingLoop loop(trainer::loop_options(cfg, global.update_freqs, global.world, gang.rank()), *trainer,
                             *epoch_itr, validator, writer, std::move(state), [] { return g_stop_signal.load() != 0; });
  return loop.run() == trainer::RunEnd::stopped ? kExitStopped : kExitOk;
}

}  // namespace fairseq_cpp::tasks
