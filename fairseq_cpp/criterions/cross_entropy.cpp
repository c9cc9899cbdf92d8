#include "fairseq_cpp/criterions/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/criterions/loss_rows.h"

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

// A chunk's share of the loss: its sums, and A = dloss/dlogits when asked for.
struct ChunkLoss {
  double epsilon;
  bool count_correct;
  bool gradient;
  bool row_kernel;                  // on the CPU: label_smoothed_rows (else the operators)
  c10::ScalarType a_dtype;          // A's type: the products' operands' (float32 or bf16)
  at::Tensor nll, smooth, correct;  // the sums so far, on the device
  RowLossSums host;                 // the CPU's sums so far (label_smoothed_rows)
  at::Tensor lprobs, a_low;         // scratch: log-probabilities (not on the CPU), A in a_dtype (bf16 on the CPU)

  ChunkLoss(double epsilon_in, bool count_correct_in, bool gradient_in, bool row_kernel_in, c10::ScalarType a_dtype_in,
            const at::TensorOptions& float_options)
      : epsilon(epsilon_in),
        count_correct(count_correct_in),
        gradient(gradient_in),
        row_kernel(row_kernel_in),
        a_dtype(a_dtype_in),
        nll(at::zeros({}, float_options)),
        smooth(at::zeros({}, float_options)),
        correct(at::zeros({}, float_options.dtype(at::kLong))) {}

  // zc: the chunk's float32 logits (n, V), overwritten; tc: its targets (n, 1). Returns A (n, V)
  // when `gradient`, in zc's place when a_dtype is float32.
  at::Tensor add(at::Tensor zc, const at::Tensor& tc) {
    const int64_t n = zc.size(0), vocab = zc.size(1);
    const bool kernel_writes_a = !gradient || a_dtype == at::kFloat || a_dtype == at::kBFloat16;
    if (!row_kernel || !zc.is_cpu() || !kernel_writes_a) return in_operators(zc, tc);
    // One kernel: each row read once and its gradient written once.
    RowGradient out;
    if (gradient && a_dtype == at::kFloat) out.f32 = zc.data_ptr<float>();
    if (gradient && a_dtype == at::kBFloat16) {
      if (!a_low.defined()) a_low = at::empty(zc.sizes(), zc.options().dtype(a_dtype));
      out.bf16 = a_low.data_ptr<c10::BFloat16>();
    }
    RowLossSums sums =
        label_smoothed_rows(zc.data_ptr<float>(), tc.data_ptr<int64_t>(), n, vocab, epsilon, count_correct, out);
    host.nll += sums.nll;
    host.smooth += sums.smooth;
    host.correct += sums.correct;
    if (!gradient) return at::Tensor();
    return out.f32 != nullptr ? zc : a_low.narrow(0, 0, n);
  }

  // The same in LibTorch's operators (CUDA; an A type the kernel does not write).
  at::Tensor in_operators(at::Tensor zc, const at::Tensor& tc) {
    const int64_t n = zc.size(0), vocab = zc.size(1);
    if (!lprobs.defined()) lprobs = at::empty(zc.sizes(), zc.options());
    at::Tensor lc = lprobs.narrow(0, 0, n);
    if (count_correct) correct.add_(zc.argmax(1, true).eq(tc).sum());
    at::_log_softmax_out(lc, zc, 1, false);
    nll.sub_(lc.gather(1, tc).sum());
    if (epsilon != 0.0) smooth.sub_(lc.sum());
    if (!gradient) return at::Tensor();
    at::Tensor a = at::exp_out(zc, lc);  // p, then A in place
    if (epsilon != 0.0) a.sub_(epsilon / static_cast<double>(vocab));
    a.scatter_add_(1, tc, at::full({n, 1}, epsilon - 1.0, zc.options()));
    return a_dtype == at::kFloat ? a : a.to(a_dtype);
  }

  // The sums, once every chunk is in.
  void settle() {
    nll.add_(host.nll);
    if (epsilon != 0.0) smooth.add_(host.smooth);
    correct.add_(host.correct);
  }
};

// label_smoothed_nll_loss(log_softmax(h W^T)) over the non-padding rows h (N, C) as one autograd
// node that never holds the (N, V) logits: they are computed `chunk_rows` rows at a time into one
// buffer. The gradient with respect to the logits of the loss, A = p - (1 - eps) onehot - eps / V,
// does not depend on anything backward brings except the incoming scalar, so the forward pass also
// multiplies each chunk's A into dL/dh = A W and dL/dW = A^T h; backward only scales them. For the
// nll output, B = p - onehot = A - eps onehot + eps / V, whose products are A's plus cheap terms:
//   B W = A W - eps W[target] + eps / V sum_v W_v,   B^T h = A^T h - eps onehot^T h + eps / V 1 (sum_n h_n).
struct LinearLabelSmoothedLoss : public torch::autograd::Function<LinearLabelSmoothedLoss> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& features,
                                                const at::Tensor& weight, const at::Tensor& target_in, double epsilon,
                                                bool grad_enabled, bool count_correct, bool row_kernel,
                                                int64_t chunk_elements, c10::ScalarType matmul_dtype) {
    const int64_t rows = features.size(0);
    const int64_t vocab = weight.size(0);
    const bool grad_h = grad_enabled && features.requires_grad();
    const bool grad_w = grad_enabled && weight.requires_grad();
    const int64_t chunk_rows = std::max<int64_t>(1, std::min(rows, chunk_elements / vocab));
    const at::TensorOptions float_options = features.options().dtype(at::kFloat);
    const at::Tensor target = target_in.contiguous();
    at::Tensor h = features.to(at::kFloat).contiguous();
    at::Tensor w = weight.to(at::kFloat);
    // The products' operands: h and w themselves in float32, else rounded once to matmul_dtype.
    const bool reduced = matmul_dtype != at::kFloat;
    at::Tensor h_mm = reduced ? features.to(matmul_dtype).contiguous() : h;
    at::Tensor w_mm = reduced ? weight.to(matmul_dtype) : w;
    at::Tensor logits = at::empty({chunk_rows, vocab}, float_options);
    ChunkLoss loss_sums(epsilon, count_correct, grad_h || grad_w, row_kernel, matmul_dtype, float_options);
    at::Tensor dh = grad_h ? at::empty({rows, features.size(1)}, float_options) : at::Tensor();
    at::Tensor dw = grad_w ? at::zeros({vocab, features.size(1)}, float_options) : at::Tensor();
    for (int64_t start = 0; start < rows; start += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - start);
      at::Tensor hc = h.narrow(0, start, n);
      at::Tensor zc = logits.narrow(0, 0, n);
      if (reduced) {
        zc.copy_(at::mm(h_mm.narrow(0, start, n), w_mm.t()));  // (n, C) x (C, V), then float32
      } else {
        at::mm_out(zc, hc, w.t());
      }
      at::Tensor a_mm = loss_sums.add(zc, target.narrow(0, start, n).unsqueeze(1));  // A (n, V), or undefined
      if (grad_h) {
        at::Tensor dh_rows = dh.narrow(0, start, n);
        if (reduced) {
          dh_rows.copy_(at::mm(a_mm, w_mm));
        } else {
          at::mm_out(dh_rows, a_mm, w);
        }
      }
      if (grad_w) {
        if (reduced) {
          dw.add_(at::mm(a_mm.t(), h_mm.narrow(0, start, n)));  // each chunk's product, summed in float32
        } else {
          dw.addmm_(a_mm.t(), hc);
        }
      }
    }
    loss_sums.settle();
    const at::Tensor& nll = loss_sums.nll;
    at::Tensor loss = epsilon == 0.0 ? nll.clone() : (1.0 - epsilon) * nll + (epsilon / vocab) * loss_sums.smooth;
    ctx->saved_data["epsilon"] = epsilon;
    ctx->saved_data["dh"] = dh;
    ctx->saved_data["dw"] = dw;
    if (grad_h || grad_w) ctx->save_for_backward({h, w, target});
    ctx->mark_non_differentiable({loss_sums.correct});
    return {loss, nll, loss_sums.correct};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const double eps = ctx->saved_data["epsilon"].toDouble();
    at::Tensor dh = ctx->saved_data["dh"].toTensor();
    at::Tensor dw = ctx->saved_data["dw"].toTensor();
    const at::Tensor& g_loss = grads[0];
    const at::Tensor& g_nll = grads[1];
    at::Tensor scale = g_loss.defined() ? g_loss : at::Tensor();
    if (g_nll.defined()) scale = scale.defined() ? scale + g_nll : g_nll;
    at::Tensor grad_h = dh.defined() && scale.defined() ? dh * scale : at::Tensor();
    at::Tensor grad_w = dw.defined() && scale.defined() ? dw * scale : at::Tensor();
    if (g_nll.defined() && eps != 0.0) {
      auto saved = ctx->get_saved_variables();
      const at::Tensor& h = saved[0];
      const at::Tensor& w = saved[1];
      const at::Tensor& target = saved[2];
      at::Tensor s = g_nll * eps;
      const double inv_vocab = 1.0 / static_cast<double>(w.size(0));
      if (grad_h.defined()) grad_h.add_((w.sum(0, true) * inv_vocab - w.index_select(0, target)) * s);
      if (grad_w.defined()) {
        at::Tensor onehot_h = at::zeros_like(w).index_add_(0, target, h);
        grad_w.add_((h.sum(0, true) * inv_vocab - onehot_h) * s);
      }
    }
    return {grad_h,       grad_w,       at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

int64_t chunk_elements_for(const CriterionOptions& options, c10::Device device) {
  if (options.chunk_elements > 0) return options.chunk_elements;
  return device.is_cuda() ? int64_t{1} << 26 : int64_t{1} << 22;
}

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

LossOutput Criterion::operator()(const at::Tensor& logits, const at::Tensor& target) const {
  return (*this)(logits, at::Tensor(), target);
}

LossOutput Criterion::operator()(const at::Tensor& features, const at::Tensor& output_weight, const at::Tensor& target,
                                 c10::ScalarType matmul_dtype) const {
  LossOutput out = pending(features, output_weight, target, matmul_dtype);
  out.settle();
  return out;
}

void LossOutput::settle() {
  if (!pending_sums.defined()) return;
  const at::Tensor sums = pending_sums.to(at::kCPU, at::kDouble);  // the one wait
  stats.loss_sum = sums[0].item<double>();
  stats.nll_loss_sum = sums[1].item<double>();
  if (sums.size(0) > 2) stats.n_correct = sums[2].item<int64_t>();
  pending_sums = at::Tensor();
}

LossOutput Criterion::pending(const at::Tensor& features_in, const at::Tensor& output_weight,
                              const at::Tensor& target_in, c10::ScalarType matmul_dtype) const {
  at::Tensor features = features_in;  // (B, T, C), or the logits (B, T, V)
  at::Tensor target = target_in;      // (B, T), on the host or on features' device
  if (options_.ignore_prefix_size > 0) {
    features = features.narrow(1, options_.ignore_prefix_size, features.size(1) - options_.ignore_prefix_size);
    target = target.narrow(1, options_.ignore_prefix_size, target.size(1) - options_.ignore_prefix_size);
  }
  const at::Device device = features.device();
  // Host to device without waiting for the device (a pageable source is staged at once).
  auto to_device = [&device](const at::Tensor& t) { return t.to(device, /*non_blocking=*/true); };
  at::Tensor flat_features = features.reshape({-1, features.size(-1)});  // (B, T, C) -> (B * T, C)
  at::Tensor flat_target = target.reshape({-1});                         // (B, T) -> (B * T)
  const double eps = options_.name == "label_smoothed_cross_entropy" ? options_.label_smoothing : 0.0;

  LossOutput out;
  at::Tensor keep = flat_target.ne(options_.padding_idx);
  out.stats.ntokens = keep.sum().item<int64_t>();  // waits only for a target on a device
  out.stats.nsentences = target_in.size(0);
  out.stats.sample_size = options_.sentence_avg ? out.stats.nsentences : out.stats.ntokens;
  at::Tensor n_correct;
  if (output_weight.defined()) {
    if (out.stats.ntokens < flat_target.size(0)) {
      at::Tensor rows = keep.nonzero().squeeze(1);
      flat_target = flat_target.index_select(0, rows);
      flat_features = flat_features.index_select(0, to_device(rows));
    }
    auto losses = LinearLabelSmoothedLoss::apply(
        flat_features, output_weight, to_device(flat_target), eps, torch::GradMode::is_enabled(),
        options_.report_accuracy, options_.row_kernel, chunk_elements_for(options_, device), matmul_dtype);
    out.loss = losses[0];
    out.nll_loss = losses[1];
    if (options_.report_accuracy) n_correct = losses[2];
  } else {
    flat_target = to_device(flat_target);
    at::Tensor logits = flat_features.to(torch::kFloat32);
    auto losses = FusedLabelSmoothedLoss::apply(logits, flat_target, eps, options_.padding_idx);
    out.loss = losses[0];
    out.nll_loss = losses[1];
    if (options_.report_accuracy) n_correct = logits.argmax(-1).eq(flat_target).logical_and(to_device(keep)).sum();
  }
  std::vector<at::Tensor> sums{out.loss.detach().to(at::kDouble), out.nll_loss.detach().to(at::kDouble)};
  if (n_correct.defined()) sums.push_back(n_correct.to(at::kDouble));
  out.pending_sums = at::stack(sums);
  return out;
}

}  // namespace fairseq_cpp::criterions
