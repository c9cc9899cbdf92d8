#include "fairseq_cpp/trainer/trainer.h"

#include <ATen/ATen.h>
#include "fairseq_cpp/core/torch.h"

#include <chrono>
#include <cmath>
#include <new>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/distributed/distributed_utils.h"

namespace fairseq_cpp::trainer {
namespace {

bool is_out_of_memory(const c10::Error& e) {
  std::string what = e.what_without_backtrace();
  return what.find("out of memory") != std::string::npos || what.find("can't allocate memory") != std::string::npos;
}

// fp16's dynamic loss scaler of `common`.
optim::LossScalerOptions loss_scaler_options(const config::Config& cfg, int64_t world_size, int64_t update_freq) {
  const auto& common = cfg.common;
  if (!common.fp16_scale_window && cfg.optimization.update_freq.size() > 1)
    raise<UserError>(
        "set `common.fp16_scale_window` (--fp16-scale-window): its default needs one "
        "`optimization.update_freq`, not a schedule of {}",
        cfg.optimization.update_freq.size());
  optim::LossScalerOptions scaler;
  scaler.init_scale = static_cast<double>(common.fp16_init_scale);
  scaler.scale_window = common.fp16_scale_window.value_or(std::max<int64_t>(1, (1 << 14) / world_size / update_freq));
  scaler.tolerance = common.fp16_scale_tolerance;
  scaler.threshold = common.threshold_loss_scale;
  scaler.min_loss_scale = common.min_loss_scale;
  return scaler;
}

// Where zero_sharding os (os_grad) leaves each worker: adam's two moments (and the reduced
// gradient) of its share (the first update's log line says what it holds in all).
void log_zero_sharding(int workers, int64_t parameters, bool gradients, bool ema) {
  const double n = static_cast<double>(parameters), world = static_cast<double>(workers);
  const char* kept = gradients ? (ema ? "adam's state, the gradient and the EMA" : "adam's state and the gradient")
                               : (ema ? "adam's state and the EMA" : "adam's state");
  log::info("trainer", "zero_sharding {}: each of {} workers keeps {} of {} of the {} parameters",
            gradients ? "os_grad" : "os", workers, kept, static_cast<int64_t>(std::ceil(n / world)), parameters);
}

// Once, after the first update of the process: what each worker holds for the model, and per parameter.
void log_model_state(const ModelStateBytes& b, int64_t parameters) {
  const auto gb = [](int64_t bytes) { return static_cast<double>(bytes) / 1e9; };
  log::info("trainer",
            "model state of this worker: {:.3f} GB ({:.2f} bytes per parameter): weights {:.3f}, gradients {:.3f}, "
            "float64 gradient sum {:.3f}, optimizer {:.3f}, EMA {:.3f}, low-precision copies {:.3f} GB",
            gb(b.total()), static_cast<double>(b.total()) / static_cast<double>(std::max<int64_t>(1, parameters)),
            gb(b.weights), gb(b.gradients), gb(b.gradient_sum), gb(b.optimizer), gb(b.ema), gb(b.low_precision));
}

}  // namespace

TrainerOptions trainer_options(const config::Config& cfg, int64_t world_size, int64_t update_freq) {
  const auto& optimization = cfg.optimization;
  TrainerOptions o;
  o.clip_norm = optimization.clip_norm;
  o.seed = cfg.common.seed;
  o.max_nonfinite = optimization.max_nonfinite;
  o.check_interval = cfg.distributed_training.check_interval;
  o.bucket_cap_mb = static_cast<double>(cfg.distributed_training.bucket_cap_mb);
  // fairseq's DDP backends: c10d / pytorch_ddp overlap the all-reduce with backward, the legacy one does not.
  const std::string& ddp = cfg.distributed_training.ddp_backend;
  o.overlap_all_reduce = ddp == "c10d" || ddp == "pytorch_ddp";
  const std::string& sharding = cfg.distributed_training.zero_sharding;
  o.shard_optimizer_state = sharding == "os" || sharding == "os_grad";
  o.shard_gradients = sharding == "os_grad";
  o.precision = optim::precision_of(cfg.common);
  if (cfg.common.fp16) {
    o.loss_scaler = loss_scaler_options(cfg, world_size, update_freq);
    const std::string& fallback = cfg.common.fp16_fallback;
    if (!fallback.empty()) {
      o.fp16_fallback = fallback == "bf16" ? optim::Precision::kBFloat16 : optim::Precision::kFloat32;
      o.fp16_fallback_updates = cfg.common.fp16_fallback_updates;
    }
  }
  if (cfg.ema.store_ema) o.ema = EmaOptions{cfg.ema.ema_decay, cfg.ema.ema_start_update, cfg.ema.ema_update_freq};
  return o;
}

Trainer::Trainer(const TrainerOptions& options, std::shared_ptr<models::EncoderDecoderModel> model,
                 criterions::Criterion criterion, std::unique_ptr<optim::Optimizer> optimizer,
                 std::unique_ptr<optim::LrScheduler> lr_scheduler, distributed::Gang& gang)
    : options_(options),
      model_(std::move(model)),
      criterion_(std::move(criterion)),
      optimizer_(std::move(optimizer)),
      lr_scheduler_(std::move(lr_scheduler)),
      gang_(gang),
      ema_(options.ema ? std::make_unique<Ema>(*options.ema, *model_) : nullptr),
      loss_scaler_(options.loss_scaler ? std::make_unique<optim::DynamicLossScaler>(*options.loss_scaler) : nullptr),
      params_(models::unique_parameters(*model_)),
      device_(gang.device()) {
  // One flat buffer for the weights and one for the gradients, when the optimizer holds the same
  // parameters in the same order: the optimizer's step, zeroing, clipping and the gradient sums
  // are then a few ops over all parameters.
  const auto& owned = optimizer_->params();
  bool same = owned.size() == params_.size();
  for (size_t i = 0; same && i < params_.size(); ++i) same = owned[i].is_same(params_[i]);
  if (same) optimizer_->flatten();
  for (auto& p : params_) {
    num_scalars_ += p.numel();
    // Allocated now, beside the parameters, rather than during the first backward among that
    // update's activations, where they would pin the heap's high end for the whole run.
    if (p.requires_grad() && !p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
  }
  if (options_.shard_optimizer_state && gang_.size() > 1 && !optimizer_->shard(gang_, options_.shard_gradients))
    raise<UserError>(
        "`distributed_training.zero_sharding: {}` shards adam's state over one flat float32 buffer of "
        "the parameters, but the optimizer is `{}`{}.",
        options_.shard_gradients ? "os_grad" : "os", optimizer_->name(),
        flat() ? "" : " and the parameters are not flat");
  if (ema_ && optimizer_->sharded()) ema_->shard(*optimizer_);
  if (optimizer_->sharded()) log_zero_sharding(gang_.size(), num_scalars_, sharded_gradients(), ema_ != nullptr);
  optimizer_->set_lr(lr_scheduler_->step_update(0));
  if (const auto dtype = optim::autocast_dtype(options_.precision, device_.type());
      dtype && options_.low_precision_copies && flat() && !sharded_gradients())
    copies_ = std::make_unique<nn::LowPrecisionCopies>(params_, optimizer_->flat_params(),
                                                       models::read_by_linear_layers(*model_, params_), *dtype);
  if (sharded_gradients())
    buckets_ =
        std::make_unique<GradBuckets>(params_, bucket_scalars(), optimizer_->shard_begin(), optimizer_->shard_end(),
                                      /*wait_in_hooks=*/device_.is_cpu());
  else if (options_.overlap_all_reduce && gang_.size() > 1 && flat())
    buckets_ = std::make_unique<GradBuckets>(params_, optimizer_->flat_grads(), bucket_scalars(), copies_.get());
}

ModelStateBytes Trainer::model_state_bytes() const {
  ModelStateBytes bytes;
  bytes.weights = optim::held_bytes(params_);
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : params_) grads.push_back(p.grad());
  grads.push_back(optimizer_->grad_shard());
  bytes.gradients = optim::held_bytes(grads);
  bytes.gradient_sum = optim::held_bytes({grad_sum_, grad_shard_sum_});
  bytes.optimizer = optim::held_bytes(optimizer_->state_tensors());
  if (ema_) bytes.ema = optim::held_bytes(ema_->shadow());
  if (copies_) bytes.low_precision = copies_->bytes();
  return bytes;
}

int64_t Trainer::bucket_scalars() const {
  return std::max<int64_t>(1, static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024 / 8));
}

void Trainer::set_num_updates(int64_t n) {
  num_updates_ = n;
  optimizer_->set_lr(lr_scheduler_->step_update(n));
}

double Trainer::lr_step(int64_t epoch, std::optional<double> val_loss) {
  lr_scheduler_->step(epoch, val_loss);
  // fairseq: the per-update schedule has the last word for the next update.
  double lr = lr_scheduler_->step_update(num_updates_);
  optimizer_->set_lr(lr);
  return lr;
}

StepStats Trainer::train_step(const std::vector<data::Batch>& samples) {
  model_->train();
  // Dropout of update n draws from seed + n on every rank: a resumed run repeats it exactly.
  torch::manual_seed(static_cast<uint64_t>(options_.seed + num_updates_));
  optimizer_->zero_grad();
  if (copies_) copies_->refresh();  // the weights as this update starts, rounded once
  // A sum of several float32 gradients (micro-batches, workers) is taken in float64; a single
  // one is its own sum, and 8 bytes per parameter are saved.
  const bool one_term = gang_.size() == 1 && samples.size() == 1;
  const auto sum_options = at::TensorOptions().dtype(at::kDouble).device(device_);
  if (sharded_gradients()) {
    grad_shard_sum_ = at::zeros({optimizer_->shard_end() - optimizer_->shard_begin()}, sum_options);
  } else if (!one_term && !grad_sum_.defined()) {
    grad_sum_ = at::zeros({num_scalars_}, sum_options);
  }
  if (grad_sum_.defined()) grad_sum_.zero_();
  // fp16 with its scaler, or, for a while after the scale reached its minimum, fp16_fallback's precision.
  const bool scaling = loss_scaler_ != nullptr && fallback_left_ == 0;
  criterions::LossStats local;
  double waited = 0.0;
  const bool oom = forward_backward(samples, scaling, one_term, local, waited);
  // Every bucket joins its all-reduce on every rank, also after a dummy batch or out of memory
  // (whose update every rank then skips): all ranks start the same collectives in the same order.
  if (buckets_ && !sharded_gradients()) {
    buckets_->arm(grad_sum_, gang_, num_updates_ + 1);  // no-op if armed: what backward did not start
    waited = buckets_->finish();
  }
  if (oom) {
    log::warning("trainer", "out of memory on rank {} at update {}; every rank skips this update", gang_.rank(),
                 num_updates_ + 1);
    local = criterions::LossStats{};
    if (grad_sum_.defined()) grad_sum_.zero_();
  }
  StepStats stats = reduce_logging_outputs(local, oom);
  if (stats.ooms > 0 || stats.loss.sample_size == 0) {
    optimizer_->zero_grad();
    grad_shard_sum_ = at::Tensor();
    stats.skipped = true;
    return stats;
  }
  const double scale = scaling ? loss_scaler_->loss_scale() : 1.0;
  stats.allreduce_wait_seconds =
      waited + all_reduce_gradients(static_cast<double>(stats.loss.sample_size) * scale, one_term);
  if (buckets_) stats.buckets_started_by_backward = static_cast<int64_t>(buckets_->started_by_backward());
  stats.gnorm = clip_gradients();
  stats.clipped = options_.clip_norm > 0 && stats.gnorm > options_.clip_norm;
  // The gradients, hence the norm, are the same on every rank: so are these decisions.
  if (scaling && !std::isfinite(stats.gnorm)) return on_overflow(samples, stats);
  if (!std::isfinite(stats.gnorm)) return skip_nonfinite(stats);
  nonfinite_in_a_row_ = 0;
  apply_update(stats, scaling);
  return stats;
}

bool Trainer::forward_backward(const std::vector<data::Batch>& samples, bool scaling, bool one_term,
                               criterions::LossStats& local, double& waited) {
  const optim::Precision precision = fallback_left_ > 0 ? *options_.fp16_fallback : options_.precision;
  const bool sharded = sharded_gradients();
  bool oom = false;
  for (size_t i = 0; i < samples.size(); ++i) {
    const data::Batch& batch = samples[i];
    const bool last = i + 1 == samples.size();
    // The last micro-batch's gradients go to the other workers during its backward (with sharded
    // gradients every micro-batch's do, unless overlap is off); the others' are summed here.
    const bool arm = buckets_ && (sharded ? options_.overlap_all_reduce : last);
    const bool accumulate = !one_term && !sharded && !(buckets_ && last);
    // A dummy from a short shard joins the collectives with weight 0.
    if (!oom && !batch.empty()) oom = !backward_micro_batch(batch, precision, scaling, arm, accumulate, local);
    if (sharded) {  // every rank reduces each micro-batch, also a dummy one or after out of memory
      buckets_->arm(grad_shard_sum_, gang_, num_updates_ + 1);  // no-op if armed
      waited += buckets_->finish();
    } else if (oom) {
      return true;
    }
  }
  return oom;
}

bool Trainer::backward_micro_batch(const data::Batch& batch, optim::Precision precision, bool scaling, bool arm,
                                   bool accumulate, criterions::LossStats& local) {
  try {
    if (arm) buckets_->arm(sharded_gradients() ? grad_shard_sum_ : grad_sum_, gang_, num_updates_ + 1);
    // The (B, T, V) logits never exist at once: the loss projects the decoder's features a
    // chunk of rows at a time.
    models::DecoderFeatures decoded;
    {
      optim::AutocastScope autocast(precision, device_.type());
      decoded = model_->forward_features(to_device(batch.src_tokens), to_device(batch.src_lengths),
                                         to_device(batch.prev_output_tokens));
    }
    // The loss: the output projection in the forward's precision on CUDA and on CPUs with bf16
    // products (float32 on other CPUs: optim::loss_matmul_dtype),
    // the log-softmax in float32, as fairseq's .float() before it. Its sums are read after
    // backward, so that the host never waits for the device between forward and backward.
    criterions::LossOutput out = criterion_.pending(decoded.features, decoded.output_weight, batch.target,
                                                    optim::loss_matmul_dtype(precision, device_.type()));
    decoded = {};
    // fp16: the gradients are those of the scaled loss, divided by the scale after the all-reduce.
    if (scaling) out.loss = out.loss * loss_scaler_->loss_scale();
    out.loss.backward();
    // The copies' gradients join the float32 ones: here, or bucket by bucket where armed.
    if (copies_ && !arm) copies_->fold_gradients(optimizer_->flat_grads(), 0, num_scalars_);
    if (accumulate) accumulate_gradients();
    out.settle();
    local.add(out.stats);
  } catch (const std::bad_alloc&) {
    return false;
  } catch (const c10::Error& e) {
    if (!is_out_of_memory(e)) throw;
    return false;
  }
  return true;
}

StepStats Trainer::reduce_logging_outputs(const criterions::LossStats& local, bool oom) {
  // One collective for the logging outputs; it also tells every rank about out-of-memory.
  std::map<std::string, distributed::DictValue> logs{
      {"loss", local.loss_sum},           {"nll_loss", local.nll_loss_sum}, {"sample_size", local.sample_size},
      {"ntokens", local.ntokens},         {"nsentences", local.nsentences}, {"n_correct", local.n_correct},
      {"ooms", static_cast<int64_t>(oom)}};
  auto sums = [&] {
    distributed::CollectiveScope vote("the logging outputs and out-of-memory vote");
    return distributed::all_reduce_dict(gang_, logs);
  }();
  StepStats stats;
  stats.loss.loss_sum = std::get<double>(sums.at("loss"));
  stats.loss.nll_loss_sum = std::get<double>(sums.at("nll_loss"));
  stats.loss.sample_size = std::get<int64_t>(sums.at("sample_size"));
  stats.loss.ntokens = std::get<int64_t>(sums.at("ntokens"));
  stats.loss.nsentences = std::get<int64_t>(sums.at("nsentences"));
  stats.loss.n_correct = std::get<int64_t>(sums.at("n_correct"));
  stats.ooms = std::get<int64_t>(sums.at("ooms"));
  stats.lr = optimizer_->lr();
  return stats;
}

StepStats Trainer::on_overflow(const std::vector<data::Batch>& samples, StepStats stats) {
  const bool lowered = options_.fp16_fallback ? loss_scaler_->try_overflow()
                                              : (loss_scaler_->overflow(), true);  // throws at the minimum
  if (!lowered) {
    // Nothing was applied since the last good update: the weights, the optimizer's state and the
    // learning rate are that update's. This update is redone from them in the fallback precision.
    fallback_left_ = options_.fp16_fallback_updates;
    log::warning("trainer",
                 "fp16: the loss scale would reach its minimum ({}) at update {}: this update and the next {} run in "
                 "{} from the weights of update {} (common.fp16_fallback), then fp16 resumes with a fresh scale",
                 loss_scaler_->min_loss_scale(), num_updates_ + 1, fallback_left_ - 1,
                 optim::precision_name(*options_.fp16_fallback), num_updates_);
    return train_step(samples);
  }
  log::info("trainer", "gradient overflow detected at update {}, ignoring gradient; setting loss scale to: {}",
            num_updates_ + 1, loss_scaler_->loss_scale());
  optimizer_->zero_grad();
  stats.skipped = stats.overflow = true;
  stats.loss_scale = loss_scaler_->loss_scale();
  return stats;
}

StepStats Trainer::skip_nonfinite(StepStats stats) {
  ++nonfinite_in_a_row_;
  log::warning("trainer", "non-finite gradient norm at update {} ({} in a row); skipping the update", num_updates_ + 1,
               nonfinite_in_a_row_);
  if (nonfinite_in_a_row_ >= options_.max_nonfinite)
    raise<OperationalError>(
        "{} updates in a row had a non-finite gradient norm (`optimization.max_nonfinite` is {}); lower the "
        "learning rate or check the data.",
        nonfinite_in_a_row_, options_.max_nonfinite);
  optimizer_->zero_grad();
  stats.skipped = true;
  return stats;
}

void Trainer::apply_update(StepStats& stats, bool scaling) {
  optimizer_->step();
  if (scaling) {
    loss_scaler_->update();
    stats.loss_scale = loss_scaler_->loss_scale();
  }
  ++num_updates_;
  if (loss_scaler_ && !scaling) {
    stats.fallback = true;
    if (--fallback_left_ == 0) {
      loss_scaler_->reset();
      log::info("trainer", "fp16: back from {} after update {}, with a fresh loss scale of {}",
                optim::precision_name(*options_.fp16_fallback), num_updates_, loss_scaler_->loss_scale());
    }
  }
  optimizer_->set_lr(lr_scheduler_->step_update(num_updates_));
  if (ema_) ema_->step(num_updates_);  // the same weights on every rank: the same shadow
  if (!model_state_logged_) log_model_state(model_state_bytes(), num_scalars_);  // the first update here
  model_state_logged_ = true;
  if (options_.check_interval > 0 && num_updates_ % options_.check_interval == 0 && gang_.size() > 1)
    check_parameters_agree();
}

void Trainer::accumulate_gradients() {
  // float32 micro-batch gradients summed in float64: the sum no longer depends on the order in
  // which micro-batches and workers are added (a few float32 terms add exactly in float64).
  if (flat()) {
    grad_sum_.add_(optimizer_->flat_grads().to(at::kDouble));
    optimizer_->flat_grads().zero_();
    return;
  }
  int64_t offset = 0;
  for (at::Tensor& p : params_) {
    int64_t n = p.numel();
    if (p.grad().defined()) {
      grad_sum_.slice(0, offset, offset + n).add_(p.grad().reshape({-1}).to(at::kDouble));
      p.mutable_grad().zero_();
    }
    offset += n;
  }
}

double Trainer::all_reduce_gradients(double denominator, bool one_term) {
  if (sharded_gradients()) {  // reduced already, bucket by bucket: this worker's slice only
    grad_shard_sum_.div_(denominator);
    optimizer_->grad_shard().copy_(grad_shard_sum_);
    grad_shard_sum_ = at::Tensor();  // 8 / N bytes per parameter during the update only
    return 0.0;
  }
  if (one_term && flat()) {
    optimizer_->flat_grads().div_(denominator);
    return 0.0;
  }
  if (one_term) {
    for (at::Tensor& p : params_) {
      if (p.grad().defined()) p.mutable_grad().div_(denominator);
    }
    return 0.0;
  }
  // The float64 sums of every rank added in buckets of about bucket_cap_mb (already, during
  // backward, with buckets_), scaled, and written back as the parameters' gradients. A rank whose
  // micro-batches were all dummies adds zeros.
  const auto t0 = std::chrono::steady_clock::now();
  if (!buckets_ && gang_.size() > 1) {
    distributed::CollectiveScope after("the gradient buckets' all-reduce after backward");
    const int64_t cap = bucket_scalars();
    const int64_t total = grad_sum_.numel();
    for (int64_t start = 0; start < total; start += cap) {
      at::Tensor bucket = grad_sum_.slice(0, start, std::min(total, start + cap));
      distributed::all_sum(gang_, bucket);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  grad_sum_.div_(denominator);
  if (flat()) {
    optimizer_->flat_grads().copy_(grad_sum_);
    return seconds;
  }
  int64_t offset = 0;
  for (at::Tensor& p : params_) {
    int64_t n = p.numel();
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    p.mutable_grad().copy_(grad_sum_.slice(0, offset, offset + n).view_as(p));
    offset += n;
  }
  return seconds;
}

double Trainer::clip_gradients() {
  if (sharded_gradients()) return optim::clip_grad_norm(optimizer_->grad_shard(), options_.clip_norm, gang_);
  if (flat()) return optim::clip_grad_norm(optimizer_->flat_grads(), options_.clip_norm);
  return optim::clip_grad_norm(params_, options_.clip_norm);
}

void Trainer::check_parameters_agree() {
  torch::NoGradGuard no_grad;
  at::Tensor sum = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device_));
  for (const auto& p : params_) sum += p.to(at::kDouble).sum();
  distributed::CollectiveScope checksums("the parameter checksums");
  at::Tensor all = gang_.all_gather(sum).to(at::kCPU).view({-1});  // (world,)
  double first = all[0].item<double>();
  bool agree = true;
  for (int r = 1; r < gang_.size(); ++r) agree = agree && all[r].item<double>() == first;
  if (agree) return;
  std::string table;
  for (int r = 0; r < gang_.size(); ++r)
    table += fmt::format("\n  rank {:>3}  parameter checksum {:.17g}", r, all[r].item<double>());
  raise<OperationalError>("the workers' parameters diverged at update {}:{}", num_updates_, table);
}

criterions::LossStats Trainer::valid_step(const data::Batch& batch) {
  if (batch.empty()) return {};
  model_->eval();
  torch::NoGradGuard no_grad;
  models::DecoderFeatures decoded;
  {
    optim::AutocastScope autocast(options_.precision, device_.type());
    decoded = model_->forward_features(to_device(batch.src_tokens), to_device(batch.src_lengths),
                                       to_device(batch.prev_output_tokens));
  }
  return criterion_(decoded.features, decoded.output_weight, batch.target,
                    optim::loss_matmul_dtype(options_.precision, device_.type()))
      .stats;
}

}  // namespace fairseq_cpp::trainer
