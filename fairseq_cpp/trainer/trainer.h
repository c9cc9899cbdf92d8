#pragma once
// One update of data-parallel training, as fairseq's Trainer.train_step defines it:
// forward/backward over this worker's `update_freq` micro-batches with no communication, one
// all-reduce of the logging outputs (which also tells every rank whether any rank ran out of
// memory), the gradients summed across workers in flat buckets and divided by the total
// sample_size of all workers and micro-batches, clipping on that global gradient, then the
// optimizer and LR scheduler step. The update is therefore independent of how a batch is split
// over workers and micro-batches. Every rank makes the same decisions from the same reduced
// numbers, so no rank waits for a collective that another skipped.
//
//   Trainer trainer(options, model, criterion, std::move(optimizer), std::move(scheduler), gang);
//   StepStats s = trainer.train_step(epoch_itr.next_group(update_freq));

#include <memory>
#include <optional>
#include <vector>

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/criterions/cross_entropy.h"
#include "fairseq_cpp/data/language_pair_dataset.h"
#include "fairseq_cpp/distributed/gang.h"
#include "fairseq_cpp/models/encoder_decoder.h"
#include "fairseq_cpp/nn/low_precision_copies.h"
#include "fairseq_cpp/optim/loss_scaler.h"
#include "fairseq_cpp/optim/lr_scheduler.h"
#include "fairseq_cpp/optim/mixed_precision.h"
#include "fairseq_cpp/optim/optimizer.h"
#include "fairseq_cpp/trainer/ema.h"
#include "fairseq_cpp/trainer/grad_buckets.h"

namespace fairseq_cpp::trainer {

struct TrainerOptions {
  double clip_norm = 0.0;        // clip the global gradient norm to this; 0 = off
  int64_t seed = 1;              // dropout of update n is seeded with seed + n (resumes bit-exact)
  int64_t max_nonfinite = 5;     // stop after this many non-finite gradient norms in a row
  int64_t check_interval = 100;  // compare a parameter checksum across ranks every N updates; 0 = off
  double bucket_cap_mb = 25.0;   // gradient bucket size for the all-reduce, in MiB (of float64 sums)
  // With several workers: each bucket's all-reduce starts during the last micro-batch's backward,
  // as soon as its gradients are ready (ddp_backend c10d / pytorch_ddp); false = after backward.
  bool overlap_all_reduce = true;
  std::optional<EmaOptions> ema;  // keep an EMA of the weights, stepped after each update; unset = none
  // The forward passes' precision (bf16: autocast; the weights, gradients and optimizer stay float32).
  optim::Precision precision = optim::Precision::kFloat32;
  // fp16's dynamic loss scaler (with precision kFloat16); unset = none.
  std::optional<optim::LossScalerOptions> loss_scaler;
  // With the loss scaler: where an overflow would bring the scale to its minimum, that update is
  // redone in this precision and so are the next ones, fp16_fallback_updates in all; then fp16
  // resumes with a fresh scale. Unset = the minimum stops training, as in fairseq.
  std::optional<optim::Precision> fp16_fallback;
  int64_t fp16_fallback_updates = 1000;
  // With several workers: ZeRO stage 1 (`zero_sharding: os`), Optimizer::shard().
  bool shard_optimizer_state = false;
  // bf16 (and fp16 on CUDA): the linear layers read copies of their weights in that precision made
  // once per update, and their gradients reach the float32 ones in one cast per bucket
  // (nn::LowPrecisionCopies), instead of autocast's cast of each weight in each forward pass and of
  // each gradient in backward: the same bits, fewer and larger kernels, 4 more bytes per parameter
  // of the linear layers. Not with sharded gradients. The updates fp16_fallback redoes in bf16
  // read no fp16 copy: they take autocast's casts, and their gradient buckets start after backward.
  bool low_precision_copies = true;
  // With shard_optimizer_state: ZeRO stage 2 (`zero_sharding: os_grad`), each worker keeps its
  // slice of the reduced gradient only (GradBuckets' sharded mode; every micro-batch's gradients
  // are reduced during or after its backward).
  bool shard_gradients = false;
};

// The trainer's options of `cfg` for `world_size` workers that start with update frequency
// `update_freq` (fp16's scale window defaults to 2^14 / (world_size * update_freq), as fairseq's
// FP16Optimizer). Throws UserError when that default has no single update frequency to use.
TrainerOptions trainer_options(const config::Config& cfg, int64_t world_size, int64_t update_freq);

// The model state this worker holds, in bytes of the tensors' storages: float32 weights and
// gradients, the float64 sum of several gradients (workers or micro-batches: 8 bytes per
// parameter, for sums that do not depend on their order), the optimizer's state (adam: 8 bytes per
// parameter, or per parameter of this worker's slice with zero_sharding os) and the EMA's shadow.
// With zero_sharding os_grad the gradients are this worker's slice (4 / N), and its float64 sum
// (8 / N) exists during the update only. In bf16 with low_precision_copies, the copies of the
// linear layers' weights and their gradients (2 + 2 bytes per parameter of their span).
struct ModelStateBytes {
  int64_t weights = 0, gradients = 0, gradient_sum = 0, optimizer = 0, ema = 0, low_precision = 0;
  int64_t total() const { return weights + gradients + gradient_sum + optimizer + ema + low_precision; }
};

// What one update did, summed over every worker and micro-batch.
struct StepStats {
  criterions::LossStats loss;  // sums over all workers (natural log); loss() etc. give base 2
  double gnorm = 0.0;          // global gradient norm before clipping
  bool clipped = false;        // gnorm was above clip_norm
  bool skipped = false;        // no update: out of memory on some rank, a non-finite norm, or no data
  int64_t ooms = 0;            // ranks that ran out of memory in this step
  double lr = 0.0;             // the learning rate this update used
  bool overflow = false;       // fp16: the gradient norm was not finite; the loss scale went down
  double loss_scale = 0.0;     // fp16: the loss scale after this update; 0 without a scaler or in fallback
  bool fallback = false;       // fp16_fallback: this update ran in the fallback precision
  // Several workers: seconds this rank spent in the gradient all-reduce after its backward (all of
  // it without overlap; what backward did not hide with it), and the buckets backward started.
  double allreduce_wait_seconds = 0.0;
  int64_t buckets_started_by_backward = 0;
};

class Trainer {
 public:
  Trainer(const TrainerOptions& options, std::shared_ptr<models::EncoderDecoderModel> model,
          criterions::Criterion criterion, std::unique_ptr<optim::Optimizer> optimizer,
          std::unique_ptr<optim::LrScheduler> lr_scheduler, distributed::Gang& gang);

  // One update from this worker's micro-batches (empty batches pad a short shard and weigh 0).
  StepStats train_step(const std::vector<data::Batch>& samples);
  // Loss sums of one validation batch on this worker (no communication; the caller reduces).
  criterions::LossStats valid_step(const data::Batch& batch);

  const TrainerOptions& options() const { return options_; }
  int64_t num_updates() const { return num_updates_; }
  // After a resume: sets the update count and the learning rate that goes with it.
  void set_num_updates(int64_t n);
  double lr() const { return optimizer_->lr(); }
  models::EncoderDecoderModel& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  optim::LrScheduler& lr_scheduler() { return *lr_scheduler_; }
  distributed::Gang& gang() { return gang_; }
  // The EMA of the weights (options.ema), or nullptr.
  Ema* ema() { return ema_.get(); }
  // fp16's loss scaler (options.loss_scaler), or nullptr.
  optim::DynamicLossScaler* loss_scaler() { return loss_scaler_.get(); }
  // fp16_fallback: updates still to run in the fallback precision (0 = fp16 with the scaler), and
  // its restore from a checkpoint.
  int64_t fallback_updates_left() const { return fallback_left_; }
  void set_fallback_updates_left(int64_t n) { fallback_left_ = n; }
  bool has_fp16_fallback() const { return options_.fp16_fallback.has_value(); }
  // At the end of an epoch: the scheduler's epoch step; returns the new learning rate.
  double lr_step(int64_t epoch, std::optional<double> val_loss);
  // What this worker holds for the model now (after the first update, all of it exists).
  ModelStateBytes model_state_bytes() const;

 private:
  // Forward and backward over this worker's micro-batches in the update's precision, the loss
  // scaled with `scaling`, their gradients summed (unless `one_term`) and their losses added to
  // `local`; returns whether it ran out of memory (then it stopped there).
  // With sharded gradients every micro-batch's buckets are reduced (`waited` adds the seconds spent
  // waiting), also after running out of memory, so that every rank joins the same collectives.
  bool forward_backward(const std::vector<data::Batch>& samples, bool scaling, bool one_term,
                        criterions::LossStats& local, double& waited);
  // Forward and backward of one micro-batch (the buckets armed first with `arm`, the gradients added
  // to grad_sum_ after with `accumulate`); false when it ran out of memory.
  // A batch's tensor on the training device, without waiting for it (a pageable source is staged at once).
  at::Tensor to_device(const at::Tensor& host) const { return host.to(device_, /*non_blocking=*/true); }
  bool backward_micro_batch(const data::Batch& batch, optim::Precision precision, bool scaling, bool arm,
                            bool accumulate, criterions::LossStats& local);
  // Sums every rank's losses and out-of-memory flags (one collective).
  StepStats reduce_logging_outputs(const criterions::LossStats& local, bool oom);
  // fp16: an overflow lowers the scale and skips the update, or at the minimum scale with
  // fp16_fallback redoes it in the fallback precision.
  StepStats on_overflow(const std::vector<data::Batch>& samples, StepStats stats);
  // A non-finite gradient norm without the scaler: skipped, up to max_nonfinite in a row.
  StepStats skip_nonfinite(StepStats stats);
  // The optimizer step, the loss scaler, the LR schedule, the EMA and the parameter check.
  void apply_update(StepStats& stats, bool scaling);
  // Adds the gradients of the micro-batch just run to grad_sum_ and clears them.
  void accumulate_gradients();
  // Sums grad_sum_ of every rank in flat buckets (unless buckets_ did during backward), scales it by
  // 1 / `denominator` and writes it to the parameters' gradients. With `one_term` (one worker, one
  // micro-batch) the gradients are the sum already: they are only scaled, and grad_sum_ is never
  // allocated. Returns the seconds spent in the all-reduce.
  double all_reduce_gradients(double denominator, bool one_term);
  // Compares a checksum of the parameters across ranks; throws OperationalError with a table.
  void check_parameters_agree();
  // bucket_cap_mb in float64 scalars.
  int64_t bucket_scalars() const;
  // Whether the weights and gradients are the optimizer's flat buffers, in params_'s order.
  bool flat() const { return optimizer_->flat(); }
  // zero_sharding os_grad: this worker keeps its slice of the reduced gradient only.
  bool sharded_gradients() const { return optimizer_->gradients_sharded(); }
  // The global gradient norm before clipping, after clipping the gradients to clip_norm.
  double clip_gradients();

  TrainerOptions options_;
  std::shared_ptr<models::EncoderDecoderModel> model_;
  criterions::Criterion criterion_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::LrScheduler> lr_scheduler_;
  distributed::Gang& gang_;
  std::unique_ptr<Ema> ema_;
  std::unique_ptr<optim::DynamicLossScaler> loss_scaler_;
  std::unique_ptr<nn::LowPrecisionCopies> copies_;  // low_precision_copies, where they apply; before buckets_
  // overlap_all_reduce with several workers and flat gradients, or sharded gradients
  std::unique_ptr<GradBuckets> buckets_;
  std::vector<at::Tensor> params_;        // unique parameters, in a fixed order on every rank
  at::Tensor grad_sum_;                   // (all parameters,) float64: this update's gradient sum, once needed
  at::Tensor grad_shard_sum_;             // sharded gradients: (this worker's slice,) float64, during an update
  int64_t num_scalars_ = 0;               // scalars in params_
  c10::Device device_;
  int64_t num_updates_ = 0;
  int64_t nonfinite_in_a_row_ = 0;
  int64_t fallback_left_ = 0;  // fp16_fallback: updates left in the fallback precision
  bool model_state_logged_ = false;
};

}  // namespace fairseq_cpp::trainer
