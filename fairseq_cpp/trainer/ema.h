#pragma once
// fairseq's EMA (fairseq/models/ema/ema.py): a float32 shadow of the model's parameters and
// buffers, moved towards the model after every `update_freq`-th update:
//   shadow = decay * shadow + (1 - decay) * parameter      (decay 0 before `start_update`)
// As in fairseq, the shadow is taken from the model at the first update (so after update 1 it
// equals the model whatever the decay), unless it was restored from a checkpoint or seed first.
//
//   Ema ema({0.999, 0, 1}, model);
//   ema.step(trainer.num_updates());  // after each update
//   { EmaWeights swap(ema); validate(model); }  // the model holds the shadow in this scope

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include "fairseq_cpp/checkpoint/checkpoint.h"

namespace fairseq_cpp::optim {
class Optimizer;
}

namespace fairseq_cpp::trainer {

struct EmaOptions {
  double decay = 0.9999;     // weight of the old shadow at each EMA step, in [0, 1]
  int64_t start_update = 0;  // before this many updates the shadow copies the model (decay 0)
  int64_t update_freq = 1;   // one EMA step every this many updates (>= 1)
};

class Ema {
 public:
  // Binds to `model`'s parameters and buffers by name (the tensors themselves: rebinding their
  // storage, as Optimizer::flatten does, keeps them); a tensor shared by several names has one
  // shadow. Nothing is copied until the first step() or restore().
  Ema(const EmaOptions& options, const torch::nn::Module& model);

  // zero_sharding (`optimizer` flat and sharded, before the first step or restore): this rank keeps
  // the shadow of its slice of the flat parameter buffer only (buffers keep a whole shadow), as
  // Marian shards its EMA: 4/N bytes per parameter. state(), restore() and EmaWeights then gather
  // or split it: collectives, which every rank calls (as it calls the optimizer's state_dict()).
  void shard(const optim::Optimizer& optimizer);
  bool sharded() const { return optimizer_ != nullptr; }

  // After update `num_updates` (counted from 1) of the model.
  void step(int64_t num_updates);
  // The decay of the last step (0 before start_update, as fairseq logs `ema_decay`).
  double decay() const { return decay_; }
  // Updates since the last EMA step (fairseq's update_freq_counter; saved for an exact resume).
  int64_t counter() const { return counter_; }

  // The shadow by fairseq's state-dict names, on the CPU (a checkpoint's extra_state["ema"]);
  // before the first step, the model's own values.
  checkpoint::TensorDict state() const;
  // Sets the shadow from `state` (every name, same shapes) and the counter. Throws DataError
  // naming `origin` when a name is missing or has another shape.
  void restore(const checkpoint::TensorDict& state, int64_t counter, const std::string& origin);
  // Whether the shadow exists yet (a first step or a restore happened).
  bool initialized() const { return initialized_; }
  // The shadow's tensors held on this rank (none before the first step): what the EMA adds to the
  // model state.
  std::vector<at::Tensor> shadow() const;

 private:
  friend class EmaWeights;
  // Copies the model's current values into a new float32 shadow.
  void initialize();
  // Sharded: the whole shadow of the flat parameter buffer, gathered from every rank.
  at::Tensor gather_flat(const std::string& what) const;
  // shadow_[j] as a tensor of sources_[j]'s shape: a view of `flat` for a sharded one.
  at::Tensor shadow_of(size_t j, const at::Tensor& flat) const;

  EmaOptions options_;
  std::vector<std::string> names_;   // every parameter and buffer name, in the model's order
  std::vector<size_t> slot_;         // names_[i]'s index into shadow_ (shared tensors share one)
  std::vector<std::string> owners_;  // shadow_[j]'s first name
  std::vector<at::Tensor> sources_;  // shadow_[j]'s tensor of the model
  std::vector<at::Tensor> shadow_;   // float32, on the model's device; sharded: undefined where flat_offset_ >= 0
  double decay_ = 0.0;
  int64_t counter_ = 0;
  bool initialized_ = false;
  const optim::Optimizer* optimizer_ = nullptr;  // set by shard()
  std::vector<int64_t> flat_offset_;             // sharded: sources_[j]'s offset in the flat buffer, or -1
  at::Tensor shadow_shard_;                      // sharded: float32, this rank's slice of the flat buffer
};

// In its scope the EMA's model holds the shadow instead of its own weights (no copy: the tensors'
// storages are exchanged, and exchanged back at the end of the scope).
class EmaWeights {
 public:
  explicit EmaWeights(Ema& ema);
  ~EmaWeights();
  EmaWeights(const EmaWeights&) = delete;
  EmaWeights& operator=(const EmaWeights&) = delete;

 private:
  Ema& ema_;
  std::vector<at::Tensor> own_;  // the model's tensors' data while they hold the shadow
  bool exchanged_ = false;
};

}  // namespace fairseq_cpp::trainer
