#include "fairseq_cpp/criterions/cross_entropy.h"

#include <cmath>

#include <torch/torch.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::criterions {

CriterionOptions criterion_options(const config::CriterionConfig& criterion,
                                   const config::OptimizationConfig& optimization, int64_t padding_idx) {
  CriterionOptions o;
  o.name = criterion._name;
  o.label_smoothing = criterion.label_smoothing;
  o.sentence_avg = optimization.sentence_avg;
  o.padding_idx = padding_idx;
  o.ignore_prefix_size = criterion.ignore_prefix_size;
  o.report_accuracy = criterion.report_accuracy;
  return o;
}

void LossStats::add(const LossStats& other) {
  loss_sum += other.loss_sum;
  nll_loss_sum += other.nll_loss_sum;
  sample_size += other.sample_size;
  ntokens += other.ntokens;
  nsentences += other.nsentences;
  n_correct += other.n_correct;
}

double LossStats::loss() const { return sample_size > 0 ? loss_sum / sample_size / std::log(2.0) : 0.0; }
double LossStats::nll_loss() const { return ntokens > 0 ? nll_loss_sum / ntokens / std::log(2.0) : 0.0; }
double LossStats::perplexity() const { return std::pow(2.0, nll_loss()); }

std::pair<at::Tensor, at::Tensor> label_smoothed_nll_loss(const at::Tensor& lprobs, const at::Tensor& target,
                                                          double epsilon, int64_t ignore_index) {
  at::Tensor keep = target.ne(ignore_index);                           // (N)
  at::Tensor safe_target = target.masked_fill(keep.logical_not(), 0);  // gather needs valid ids
  at::Tensor nll = -lprobs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1);
  nll = nll.masked_fill(keep.logical_not(), 0.0).sum();
  if (epsilon == 0.0) return {nll, nll};
  at::Tensor smooth = -lprobs.sum(-1);
  smooth = smooth.masked_fill(keep.logical_not(), 0.0).sum();
  const double eps_i = epsilon / static_cast<double>(lprobs.size(-1));
  at::Tensor loss = (1.0 - epsilon) * nll + eps_i * smooth;
  return {loss, nll};
}

namespace {

// label_smoothed_nll_loss(log_softmax(logits)) as one autograd node that keeps only the
// log-probabilities. Its backward writes d/dlogits in one (N, V) tensor,
//   d loss/dz = p - (1 - eps) onehot(target) - eps / V,   d nll/dz = p - onehot(target)
// (zero on ignored rows), instead of the gather/sum/add/log_softmax chain's four (N, V) temporaries.
struct FusedLabelSmoothedLoss : public torch::autograd::Function<FusedLabelSmoothedLoss> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                                                const at::Tensor& target, double epsilon, int64_t ignore_index) {
    at::Tensor lprobs = torch::log_softmax(logits, -1);  // (N, V)
    auto [loss, nll] = label_smoothed_nll_loss(lprobs, target, epsilon, ignore_index);
    ctx->save_for_backward({lprobs, target});
    ctx->saved_data["epsilon"] = epsilon;
    ctx->saved_data["ignore_index"] = ignore_index;
    return {loss, nll};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& lprobs = saved[0];
    const at::Tensor& target = saved[1];
    const double eps = ctx->saved_data["epsilon"].toDouble();
    const int64_t ignore_index = ctx->saved_data["ignore_index"].toInt();
    const auto vocab = static_cast<double>(lprobs.size(-1));
    at::Tensor g_loss = grads[0].defined() ? grads[0] : torch::zeros({}, lprobs.options());
    at::Tensor g_nll = grads[1].defined() ? grads[1] : torch::zeros({}, lprobs.options());
    at::Tensor keep = target.ne(ignore_index);
    at::Tensor safe_target = target.masked_fill(keep.logical_not(), 0);
    at::Tensor grad = lprobs.exp();  // p
    grad.mul_(g_loss + g_nll).sub_(g_loss * (eps / vocab));
    at::Tensor at_target = (g_loss * (1.0 - eps) + g_nll).neg().expand({grad.size(0), 1});
    grad.scatter_add_(1, safe_target.unsqueeze(1), at_target);
    grad.mul_(keep.unsqueeze(1).to(grad.scalar_type()));
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

Criterion::Criterion(const CriterionOptions& options) : options_(options) {
  if (options.name != "cross_entropy" && options.name != "label_smoothed_cross_entropy") {
    raise<UserError>("`criterion._name` must be cross_entropy or label_smoothed_cross_entropy, but is `{}` instead.",
                     options.name);
  }
  if (options.name == "cross_entropy" && options.label_smoothing != 0.0) {
    raise<UserError>(
        "`criterion.label_smoothing` is {} but `criterion._name` is cross_entropy; use "
        "label_smoothed_cross_entropy.",
        options.label_smoothing);
  }
}

LossOutput Criterion::operator()(const at::Tensor& logits_in, const at::Tensor& target_in) const {
  at::Tensor logits = logits_in.to(torch::kFloat32);  // (B, T, V)
  at::Tensor target = target_in;
  if (options_.ignore_prefix_size > 0) {
    logits = logits.narrow(1, options_.ignore_prefix_size, logits.size(1) - options_.ignore_prefix_size);
    target = target.narrow(1, options_.ignore_prefix_size, target.size(1) - options_.ignore_prefix_size);
  }
  const int64_t vocab = logits.size(-1);
  at::Tensor flat_logits = logits.reshape({-1, vocab});  // (B, T, V) -> (B * T, V)
  at::Tensor flat_target = target.reshape({-1});         // (B, T) -> (B * T)
  const double eps = options_.name == "label_smoothed_cross_entropy" ? options_.label_smoothing : 0.0;
  auto losses = FusedLabelSmoothedLoss::apply(flat_logits, flat_target, eps, options_.padding_idx);
  const at::Tensor& loss = losses[0];
  const at::Tensor& nll = losses[1];

  LossOutput out;
  out.loss = loss;
  out.nll_loss = nll;
  at::Tensor keep = flat_target.ne(options_.padding_idx);
  out.stats.ntokens = keep.sum().item<int64_t>();
  out.stats.nsentences = target_in.size(0);
  out.stats.sample_size = options_.sentence_avg ? out.stats.nsentences : out.stats.ntokens;
  out.stats.loss_sum = loss.detach().item<double>();
  out.stats.nll_loss_sum = nll.detach().item<double>();
  if (options_.report_accuracy) {
    out.stats.n_correct = flat_logits.argmax(-1).eq(flat_target).logical_and(keep).sum().item<int64_t>();
  }
  return out;
}

}  // namespace fairseq_cpp::criterions
