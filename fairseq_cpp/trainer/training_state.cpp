#include "fairseq_cpp/trainer/training_state.h"

#include <ATen/ATen.h>
#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <filesystem>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"

namespace fairseq_cpp::trainer {
namespace {

c10::IValue get(const checkpoint::StateDict& dict, const std::string& key, const std::string& path) {
  if (!dict.contains(key)) raise<DataError>("{}: the checkpoint has no `{}` entry", path, key);
  return dict.at(key);
}

int64_t get_int(const checkpoint::StateDict& dict, const std::string& key, const std::string& path) {
  c10::IValue v = get(dict, key, path);
  if (!v.isInt()) raise<DataError>("{}: `{}` must be an integer", path, key);
  return v.toInt();
}

checkpoint::StateDict get_dict(const checkpoint::StateDict& dict, const std::string& key, const std::string& path) {
  c10::IValue v = get(dict, key, path);
  if (!v.isGenericDict()) raise<DataError>("{}: `{}` must be a dict", path, key);
  return v.toGenericDict();
}

// A checkpoint that tools/fairseq-import wrote from fairseq's: its weights (loaded already), and as
// fairseq's own restore does, the update count and best metric unless reset_optimizer, the data
// position unless reset_dataloader. fairseq's optimizer state is not imported: the optimizer, the
// learning-rate schedule (at the restored update) and the loss scaler start afresh.
TrainingState restore_imported(const checkpoint::StateDict& ckpt, const std::string& path, Trainer& trainer,
                               const RestoreOptions& options) {
  const checkpoint::StateDict extra = get_dict(ckpt, "extra_state", path);
  TrainingState state;
  if (!options.reset_optimizer) {
    state.num_updates = get_int(extra, "num_updates", path);
    if (extra.contains("best")) state.best = get(extra, "best", path).toDouble();
  }
  if (!options.reset_dataloader && extra.contains("epoch")) {
    state.iterator.epoch = get_int(extra, "epoch", path);
    // fairseq counts one worker's batches; ours, all workers' (an epoch's end moves on to the next).
    const int64_t world = extra.contains("world_size") ? get_int(extra, "world_size", path) : 1;
    const int64_t done = extra.contains("iterations_in_epoch") ? get_int(extra, "iterations_in_epoch", path) : 0;
    state.iterator.global_batches = done * std::max<int64_t>(world, 1);
    state.iterator.data_shards = 0;  // not recorded: the epoch's rotation decides
  }
  const std::string& from = get(extra, "imported_from", path).toStringRef();
  log::info("checkpoint",
            "{} {}: its weights{} are restored; the optimizer, its learning-rate schedule and the loss scale start "
            "afresh",
            path, std::filesystem::absolute(path).lexically_normal() == from ? "is fairseq's" : "was imported from fairseq (" + from + ")",
            options.reset_optimizer ? "" : ", update count and best metric");
  if (Ema* ema = trainer.ema()) ema->restore(checkpoint::model_entry(ckpt, path), 0, path);
  trainer.set_num_updates(state.num_updates);
  return state;
}

}  // namespace

GatheredState gather_sharded_state(Trainer& trainer, bool with_optimizer_state) {
  GatheredState gathered;
  if (trainer.optimizer().sharded() && with_optimizer_state) gathered.optimizer = trainer.optimizer().state_dict();
  if (trainer.ema() && trainer.ema()->sharded()) gathered.ema = trainer.ema()->state();
  return gathered;
}

checkpoint::StateDict make_checkpoint(Trainer& trainer, const TrainingState& state, const std::string& config_yaml,
                                      bool with_optimizer_state, const GatheredState& gathered) {
  checkpoint::StateDict ckpt = checkpoint::new_state_dict();
  ckpt.insert(checkpoint::kModelKey, checkpoint::model_state(trainer.model()));
  ckpt.insert(checkpoint::kConfigKey, config_yaml);
  if (with_optimizer_state)
    ckpt.insert("optimizer", gathered.optimizer ? *gathered.optimizer : trainer.optimizer().state_dict());
  ckpt.insert("lr_scheduler", trainer.lr_scheduler().state_dict());
  checkpoint::StateDict iterator = checkpoint::new_state_dict();
  iterator.insert("epoch", state.iterator.epoch);
  iterator.insert("global_batches", state.iterator.global_batches);
  iterator.insert("shuffle", state.iterator.shuffle);
  iterator.insert("data_shard", state.iterator.data_shard);
  iterator.insert("data_shards", state.iterator.data_shards);
  checkpoint::StateDict extra = checkpoint::new_state_dict();
  extra.insert("train_iterator", iterator);
  extra.insert("num_updates", state.num_updates);
  extra.insert("has_best", state.best.has_value());
  extra.insert("best", state.best.value_or(0.0));
  extra.insert("bad_validations", state.bad_validations);
  extra.insert("wall_seconds", state.wall_seconds);
  if (state.batch_world_size > 0) extra.insert("batch_world_size", state.batch_world_size);
  if (state.update_batches > 0) extra.insert("update_batches", state.update_batches);
  if (optim::DynamicLossScaler* scaler = trainer.loss_scaler()) {
    const optim::LossScalerState& ls = scaler->state();
    checkpoint::StateDict d = checkpoint::new_state_dict();
    d.insert("loss_scale", ls.loss_scale);
    d.insert("iter", ls.iter);
    d.insert("last_overflow_iter", ls.last_overflow_iter);
    d.insert("last_rescale_iter", ls.last_rescale_iter);
    d.insert("overflows_since_rescale", ls.overflows_since_rescale);
    d.insert("fallback_updates_left", trainer.fallback_updates_left());  // fp16_fallback: updates left in it
    extra.insert("loss_scaler", d);
  }
  if (Ema* ema = trainer.ema()) {
    // fairseq's key: its load_ema_from_checkpoint reads it.
    extra.insert("ema", gathered.ema ? *gathered.ema : ema->state());
    extra.insert("ema_update_counter", ema->counter());
  }
  ckpt.insert("extra_state", extra);
  return ckpt;
}

TrainingState restore_checkpoint(const checkpoint::StateDict& ckpt, const std::string& path, Trainer& trainer,
                                 const RestoreOptions& options) {
  checkpoint::load_model_state(trainer.model(), checkpoint::model_entry(ckpt, path), path);
  TrainingState state;
  if (!ckpt.contains("extra_state")) {
    // A model-only checkpoint: start training from its weights.
    return state;
  }
  checkpoint::StateDict extra = get_dict(ckpt, "extra_state", path);
  if (extra.contains("imported_from")) return restore_imported(ckpt, path, trainer, options);
  state.num_updates = get_int(extra, "num_updates", path);
  if (get(extra, "has_best", path).toBool()) state.best = get(extra, "best", path).toDouble();
  state.bad_validations = get_int(extra, "bad_validations", path);
  if (!options.reset_meters) state.wall_seconds = get(extra, "wall_seconds", path).toDouble();
  if (!options.reset_dataloader) {
    checkpoint::StateDict iterator = get_dict(extra, "train_iterator", path);
    state.iterator.epoch = get_int(iterator, "epoch", path);
    state.iterator.global_batches = get_int(iterator, "global_batches", path);
    state.iterator.shuffle = get(iterator, "shuffle", path).toBool();
    // Checkpoints from before sharded data trained on one directory.
    state.iterator.data_shards = iterator.contains("data_shards") ? get_int(iterator, "data_shards", path) : 1;
    state.iterator.data_shard = iterator.contains("data_shard") ? get_int(iterator, "data_shard", path) : 0;
  }
  if (!options.reset_optimizer && ckpt.contains("optimizer"))
    trainer.optimizer().load_state_dict(get_dict(ckpt, "optimizer", path));
  else if (!options.reset_optimizer)
    log::info("checkpoint",
              "{} holds no optimizer state (saved with --no-save-optimizer-state): the optimizer starts "
              "afresh",
              path);
  if (!options.reset_lr_scheduler) trainer.lr_scheduler().load_state_dict(get_dict(ckpt, "lr_scheduler", path));
  if (optim::DynamicLossScaler* scaler = trainer.loss_scaler(); scaler != nullptr && extra.contains("loss_scaler")) {
    // A run saved without fp16 (no entry) starts the scaler afresh, as fairseq does.
    checkpoint::StateDict d = get_dict(extra, "loss_scaler", path);
    c10::IValue scale = get(d, "loss_scale", path);
    if (!scale.isDouble()) raise<DataError>("{}: `loss_scale` must be a number", path);
    scaler->load_state({scale.toDouble(), get_int(d, "iter", path), get_int(d, "last_overflow_iter", path),
                        get_int(d, "last_rescale_iter", path), get_int(d, "overflows_since_rescale", path)});
    // Saved in a spell of fp16_fallback: the run goes on in the fallback precision (none with
    // fp16_fallback unset now, or in checkpoints from before it).
    const int64_t left = d.contains("fallback_updates_left") ? get_int(d, "fallback_updates_left", path) : 0;
    if (left < 0) raise<DataError>("{}: `fallback_updates_left` must be 0 or more, not {}", path, left);
    trainer.set_fallback_updates_left(trainer.has_fp16_fallback() ? left : 0);
  }
  if (Ema* ema = trainer.ema()) {
    if (checkpoint::has_ema_entry(ckpt)) {
      const int64_t counter = extra.contains("ema_update_counter") ? get_int(extra, "ema_update_counter", path) : 0;
      ema->restore(checkpoint::ema_entry(ckpt, path), counter, path);
    } else {
      // fairseq: "EMA not found in checkpoint ... EMA is re-initialized from checkpoint."
      log::warning("checkpoint", "{} holds no EMA weights: the EMA starts from its model weights", path);
      ema->restore(checkpoint::model_entry(ckpt, path), 0, path);
    }
  }
  trainer.set_num_updates(state.num_updates);
  return state;
}

std::vector<int64_t> keep_global_batch(const std::vector<int64_t>& update_freq, int64_t batch_world_size,
                                       int64_t world_size) {
  std::vector<int64_t> scaled;
  for (int64_t u : update_freq) {
    if (u * batch_world_size % world_size != 0)
      raise<UserError>(
          "`distributed_training.keep_global_batch`: the run's global batch is {} workers x update_freq {} "
          "= {} batches per update, which {} workers cannot share evenly; run on a number of workers that "
          "divides {}, or turn keep_global_batch off and set `optimization.update_freq`.",
          batch_world_size, u, u * batch_world_size, world_size, u * batch_world_size);
    scaled.push_back(u * batch_world_size / world_size);
  }
  return scaled;
}

std::pair<int64_t, int64_t> saved_global_batch(const checkpoint::StateDict& ckpt, const std::string& path) {
  if (!ckpt.contains("extra_state")) return {0, 0};
  checkpoint::StateDict extra = get_dict(ckpt, "extra_state", path);
  auto positive = [&](const char* key) -> int64_t {
    if (!extra.contains(key)) return 0;
    int64_t v = get_int(extra, key, path);
    if (v < 1) raise<DataError>("{}: `{}` must be at least 1, not {}", path, key, v);
    return v;
  };
  return {positive("batch_world_size"), positive("update_batches")};
}

}  // namespace fairseq_cpp::trainer
