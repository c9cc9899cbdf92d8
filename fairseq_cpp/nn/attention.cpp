#include "fairseq_cpp/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include <sys/mman.h>

#include <ATen/Parallel.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/autocast_state.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/torch_compat.h"
#include "fairseq_cpp/nn/dropout.h"
#include "fairseq_cpp/nn/low_precision_copies.h"
#include "fairseq_cpp/nn/packed_linear.h"
#include "fairseq_cpp/nn/widened_bf16.h"

namespace fairseq_cpp::nn {

at::Tensor attention_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                               double dropout, bool training) {
  const double scaling = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  // (B, H, Tq, D) x (B, H, D, Tk) -> (B, H, Tq, Tk)
  at::Tensor scores = torch::matmul(q * scaling, k.transpose(-2, -1));
  if (mask.defined()) scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  at::Tensor probs = torch::softmax(scores.to(torch::kFloat32), -1).to(scores.scalar_type());
  if (dropout > 0 && training) probs = nn::dropout(probs, dropout, true);
  return torch::matmul(probs, v);  // (B, H, Tq, D)
}

at::Tensor attention_weights(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask) {
  const double scaling = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  // (B, H, Tq, D) x (B, H, D, Tk) -> (B, H, Tq, Tk)
  at::Tensor scores = torch::matmul(q * scaling, k.transpose(-2, -1)).to(torch::kFloat32);
  if (mask.defined()) scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  return torch::softmax(scores, -1);
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                     double dropout, bool training) {
  if (q.scalar_type() == at::kBFloat16 && widens_bf16_products(q)) {  // bf16 on a CPU without bf16 products
    CpuAutocastOff off;
    return attention(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), mask, dropout, training).to(at::kBFloat16);
  }
#if FSQ_TORCH_AT_LEAST(2, 0)
  // Training on the CPU: the batched products and a float32 softmax, as with LibTorch 1.13, where
  // the fused kernel's backward took 13% of a bf16 Multi30k update. One update at 4,096 tokens
  // (fsq_bench_train_step, LibTorch 2.11, 2-core Zen 4): bf16 1.14x faster at 32 and at 128
  // tokens a sentence, fp32 1.05x at 32; the probabilities kept for backward cost 95 MB more at 128
  // (0.97 against 0.88 GiB), so longer keys keep the fused kernel, whose memory does not grow with them.
  if (q.is_cpu() && k.size(-2) <= 128 && at::GradMode::is_enabled() &&
      (q.requires_grad() || k.requires_grad() || v.requires_grad())) {
    return attention_reference(q, k, v, mask, dropout, training);
  }
#if FSQ_TORCH_AT_LEAST(2, 5)
  // On CUDA in bf16/fp16, PyTorch 2.11 picks cuDNN's fused attention first on Hopper, which builds
  // an execution plan for every new (batch, length) shape (hundreds of milliseconds each, by
  // cuDNN users' reports); translation batches come in many shapes. The flash kernel has no such
  // cost. Set once, before the first call on any device.
  static const bool no_cudnn_attention = [] {
    at::globalContext().setSDPUseCuDNN(false);
    return true;
  }();
  (void)no_cudnn_attention;
#endif
  // The fused kernel's boolean mask is "may attend", the opposite of ours.
  c10::optional<at::Tensor> allowed;
  if (mask.defined()) allowed = mask.logical_not();
  return at::scaled_dot_product_attention(q, k, v, allowed, training ? dropout : 0.0, false);
#else
  if (cpu_attention_applies(q, k, v)) return cpu_attention(q, k, v, mask, dropout, training);
  return attention_reference(q, k, v, mask, dropout, training);
#endif
}

at::Tensor causal_mask(int64_t length, const at::Device& device) {
  return torch::ones({length, length}, torch::TensorOptions().dtype(torch::kBool).device(device)).triu(1);
}

namespace {

// (B, H, T, D) from the (R, H, T, D) float32 CPU `cache`: position t of row b from row rows[b][t].
at::Tensor gather_positions(const at::Tensor& cache, const at::Tensor& rows) {
  const at::Tensor map = rows.to(at::kLong).contiguous();
  const int64_t batch = map.size(0), heads = cache.size(1), len = cache.size(2), dim = cache.size(3);
  at::Tensor out = at::empty({batch, heads, len, dim}, cache.options());
  const float* src = cache.data_ptr<float>();
  const int64_t sr = cache.stride(0), sh = cache.stride(1), st = cache.stride(2);
  const int64_t* row_of = map.data_ptr<int64_t>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, batch * heads, 16, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const int64_t b = i / heads, h = i % heads;
      for (int64_t t = 0; t < len; ++t) {
        std::memcpy(dst + (i * len + t) * dim, src + row_of[b * len + t] * sr + h * sh + t * st, sizeof(float) * dim);
      }
    }
  });
  return out;
}

}  // namespace

void AttentionCache::reorder(const at::Tensor& new_order) {
  if (!key.defined()) return;
  if (positions.defined()) {  // in place: the rows stay, their map follows the hypotheses
    positions = positions.index_select(0, new_order.to(positions.device()));
    return;
  }
  pending_rows = pending_rows.defined() ? pending_rows.index_select(0, new_order) : new_order;
}

void AttentionCache::materialize() {
  if (positions.defined()) {
    key = gather_positions(key, positions);
    value = gather_positions(value, positions);
    positions = at::Tensor();
    key_buffer = at::Tensor();
    value_buffer = at::Tensor();
    return;
  }
  if (!pending_rows.defined()) return;
  key = key.index_select(0, pending_rows);
  if (value.defined()) value = value.index_select(0, pending_rows);
  pending_rows = at::Tensor();
}

namespace {

// cat({cache.index_select(0, rows), step}, 2) for (B, H, T, D) float32 CPU tensors in one pass, written
// into `out` (B', H, T + 1, D): each output (row, head) block is the T x D block of its source row
// followed by the step's D values. `rows` is contiguous int64, or undefined for the identity.
void gather_append(const at::Tensor& cache_in, const at::Tensor& rows, const at::Tensor& step, at::Tensor& out) {
  at::Tensor cache = cache_in.contiguous();
  const int64_t out_rows = step.size(0), heads = cache.size(1), len = cache.size(2), dim = cache.size(3);
  const float* src = cache.data_ptr<float>();
  const int64_t* row_of = rows.defined() ? rows.data_ptr<int64_t>() : nullptr;
  float* dst = out.data_ptr<float>();
  const float* step_data = step.data_ptr<float>();
  const int64_t s0 = step.stride(0), s1 = step.stride(1), s3 = step.stride(3);
  at::parallel_for(0, out_rows * heads, 16, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const int64_t r = i / heads, h = i % heads;
      const int64_t from = row_of != nullptr ? row_of[r] : r;
      float* o = dst + i * (len + 1) * dim;
      std::memcpy(o, src + (from * heads + h) * len * dim, sizeof(float) * len * dim);
      const float* x = step_data + r * s0 + h * s1;
      for (int64_t d = 0; d < dim; ++d) o[len * dim + d] = x[d * s3];
    }
  });
}

// The cache `cache` with `rows` and `step` appended (gather_append), in a buffer of `buffers` (or
// a new tensor without them); `owner` is the flat buffer the old cache was in, and becomes the
// new one's.
at::Tensor appended(const at::Tensor& cache, const at::Tensor& rows, const at::Tensor& step, CacheBuffers* buffers,
                    at::Tensor& owner) {
  const std::vector<int64_t> shape{step.size(0), cache.size(1), cache.size(2) + 1, cache.size(3)};
  const int64_t numel = shape[0] * shape[1] * shape[2] * shape[3];
  at::Tensor flat =
      buffers != nullptr ? buffers->take(numel, shape[2], cache.options()) : at::empty({numel}, cache.options());
  at::Tensor out = flat.narrow(0, 0, numel).view(shape);
  gather_append(cache, rows, step, out);
  at::Tensor old = std::exchange(owner, flat);
  if (buffers != nullptr) buffers->give_back(std::move(old));
  return out;
}

}  // namespace

at::Tensor CacheBuffers::take(int64_t numel, int64_t steps, const at::TensorOptions& options) {
  at::Tensor out = std::exchange(spare, at::Tensor());
  if (out.defined() && out.numel() >= numel) return out;
  return at::empty({std::max(numel, numel / steps * max_steps)}, options);
}

void CacheBuffers::give_back(at::Tensor buffer) {
  if (buffer.defined() && (!spare.defined() || buffer.numel() > spare.numel())) spare = std::move(buffer);
}

bool AttentionCache::can_append_in_place(const at::Tensor& step_key, const at::Tensor& step_value) const {
  const bool float_cpu = step_key.is_cpu() && step_key.scalar_type() == at::kFloat && step_value.is_cpu() &&
                         step_value.scalar_type() == at::kFloat && step_key.dim() == 4 && step_key.size(2) == 1 &&
                         step_value.sizes() == step_key.sizes();
  if (!float_cpu || buffers == nullptr || buffers->max_steps < 1) return false;
  if (!key.defined()) return true;
  // An eighth of the rows gone (finished sentences): their pages would stay resident to the end of
  // the search, where the copying form keeps only the rows alive. (Leaving at half of the rows
  // cost the fixture's translation, whose sentences finish over many steps, 25-38 MiB at its peak,
  // measured with the buffers from the allocator.)
  return positions.defined() && positions.size(0) == step_key.size(0) && 8 * step_key.size(0) > 7 * key.size(0) &&
         key.size(1) == step_key.size(1) && key.size(3) == step_key.size(3) && key.size(2) < buffers->max_steps;
}

namespace {

// An uninitialized tensor on pages mapped for it alone and unmapped when it dies. A cache kept in
// place touches its buffers' pages only as it reaches their positions; from the allocator, whose
// freed pages stay resident until the batch ends (jemalloc with dirty_decay_ms -1), the buffers
// it leaves (for larger ones, or for the copying form once sentences finish) would stay resident
// beside their successors: 30-35 MiB at the peak of the fixture's translation (issue 37). Where
// the system maps no more (vm.max_map_count, overcommit), the tensor comes from the allocator.
at::Tensor empty_own_pages(const std::vector<int64_t>& shape, const at::TensorOptions& options) {
  int64_t numel = 1;
  for (int64_t n : shape) numel *= n;
  const size_t bytes = std::max<size_t>(1, static_cast<size_t>(numel) * options.dtype().itemsize());
  void* pages = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pages == MAP_FAILED) return at::empty(shape, options);
  auto unmap = [bytes](void* p) { munmap(p, bytes); };
  std::unique_ptr<void, decltype(unmap)> owner(pages, unmap);  // until the tensor owns the pages
  at::Tensor out = at::from_blob(pages, shape, unmap, options);
  owner.release();
  return out;
}

}  // namespace

void AttentionCache::append_in_place(const at::Tensor& step_key, const at::Tensor& step_value) {
  TORCH_CHECK(can_append_in_place(step_key, step_value), "AttentionCache: this step cannot be appended in place");
  const int64_t rows = step_key.size(0), len = key.defined() ? key.size(2) : 0;
  if (!key.defined() || rows > key.size(0) || len == key_buffer.size(0)) {
    // Position-major (T, R, H, D): a step writes one contiguous slab, so the pages resident are
    // those of the positions reached (per-row blocks of max_steps positions each left a page
    // partly written per row and head). More rows than the buffers have (beam search's first
    // step decodes one row per sentence, the next one per hypothesis), or the first step's
    // one-position buffers full: new buffers for max_steps positions, with the positions so far
    // gathered into them. (Buffers for max_steps positions at the first step, freed at the
    // second, left the fixture's translation with about 10 MiB more at its peak.)
    const std::vector<int64_t> shape{key.defined() ? buffers->max_steps : 1, rows, step_key.size(1), step_key.size(3)};
    at::Tensor new_key = empty_own_pages(shape, step_key.options());
    at::Tensor new_value = empty_own_pages(shape, step_value.options());
    for (int64_t t = 0; t < len; ++t) {
      const at::Tensor from = positions.select(1, t);
      new_key.select(0, t).copy_(key_buffer.select(0, t).index_select(0, from));
      new_value.select(0, t).copy_(value_buffer.select(0, t).index_select(0, from));
    }
    key_buffer = new_key;
    value_buffer = new_value;
    positions = at::arange(rows, step_key.options().dtype(at::kLong)).unsqueeze(1).expand({rows, len});
  }
  key_buffer.select(0, len).narrow(0, 0, rows).copy_(step_key.select(2, 0));
  value_buffer.select(0, len).narrow(0, 0, rows).copy_(step_value.select(2, 0));
  key = key_buffer.narrow(0, 0, len + 1).permute({1, 2, 0, 3});  // (R, H, T + 1, D)
  value = value_buffer.narrow(0, 0, len + 1).permute({1, 2, 0, 3});
  positions = at::cat({positions, at::arange(rows, positions.options()).unsqueeze(1)}, 1);
}

void AttentionCache::append(const at::Tensor& step_key, const at::Tensor& step_value) {
  if (positions.defined()) materialize();
  if (!key.defined()) {
    key = step_key;
    value = step_value;
    return;
  }
  const bool fast = key.is_cpu() && key.scalar_type() == at::kFloat && step_key.is_cpu() &&
                    step_key.scalar_type() == at::kFloat && step_value.scalar_type() == at::kFloat;
  if (!fast) {
    materialize();
    key = torch::cat({key, step_key}, 2);
    value = torch::cat({value, step_value}, 2);
    return;
  }
  at::Tensor rows = pending_rows.defined() ? pending_rows.to(at::kLong).contiguous() : at::Tensor();
  key = appended(key, rows, step_key, buffers.get(), key_buffer);
  value = appended(value, rows, step_value, buffers.get(), value_buffer);
  pending_rows = at::Tensor();
}

MultiheadAttentionImpl::MultiheadAttentionImpl(const MultiheadAttentionOptions& options)
    : options_(options), head_dim_(options.embed_dim / std::max<int64_t>(options.num_heads, 1)) {
  if (options.num_heads <= 0 || head_dim_ * options.num_heads != options.embed_dim) {
    raise<UserError>("attention width {} must be divisible by the number of heads {}.", options.embed_dim,
                     options.num_heads);
  }
  const int64_t c = options.embed_dim;
  // Registration order = fairseq's state-dict order.
  k_proj_ = register_module("k_proj", Linear(c, c));
  v_proj_ = register_module("v_proj", Linear(c, c));
  q_proj_ = register_module("q_proj", Linear(c, c));
  out_proj_ = register_module("out_proj", Linear(c, c));
  reset_parameters();
}

void MultiheadAttentionImpl::reset_parameters() {
  if (!initialise_parameters()) return;
  torch::NoGradGuard no_grad;
  const double gain = 1.0 / std::sqrt(2.0);
  torch::nn::init::xavier_uniform_(k_proj_->weight, gain);
  torch::nn::init::xavier_uniform_(v_proj_->weight, gain);
  torch::nn::init::xavier_uniform_(q_proj_->weight, gain);
  torch::nn::init::xavier_uniform_(out_proj_->weight);
  torch::nn::init::zeros_(out_proj_->bias);
}

namespace {

// Under autocast (bf16 or fp16 training and validation), x's projections by `layers` as one product
// by their weights and biases concatenated (each the update's low-precision copy where it has one),
// split back into one output per layer: autocast casts x once instead of once per layer, one GEMM
// of 2C or 3C columns runs instead of 2 or 3 of C, and backward takes x's gradient from one GEMM
// (before: one per layer, each cast back to float32, then added). Where autocast is off or a layer
// has no bias: nothing (the caller projects one by one). Never with an incremental cache (the
// caller checks): generation projects each step's row as before.
std::vector<at::Tensor> joint_projections(const at::Tensor& x, std::initializer_list<const Linear*> layers) {
  if (!compat::autocast_state(x.device().type()).enabled) return {};
  std::vector<at::Tensor> weights, biases;
  for (const Linear* layer : layers) {
    const at::Tensor& weight = (*layer)->weight;
    const at::Tensor& bias = (*layer)->bias;
    if (!bias.defined()) return {};
    const at::Tensor weight_copy = low_precision_copy(weight), bias_copy = low_precision_copy(bias);
    weights.push_back(weight_copy.defined() ? weight_copy : weight);
    biases.push_back(bias_copy.defined() ? bias_copy : bias);
  }
  const at::Tensor y = scoped_linear(x, at::cat(weights), at::cat(biases));
  return y.split((**layers.begin())->weight.size(0), -1);
}

}  // namespace

at::Tensor MultiheadAttentionImpl::split_heads(const at::Tensor& x) const {
  // (B, T, C) -> (B, T, H, D) -> (B, H, T, D)
  return x.view({x.size(0), x.size(1), options_.num_heads, head_dim_}).transpose(1, 2);
}

at::Tensor MultiheadAttentionImpl::forward(const at::Tensor& query, const at::Tensor& key_value,
                                           const at::Tensor& key_padding_mask, const at::Tensor& attn_mask,
                                           AttentionCache* cache, bool static_kv, at::Tensor* head_mean) {
  const int64_t batch = query.size(0);
  const int64_t tgt_len = query.size(1);
  // Training and validation under autocast: self-attention's three projections in one product,
  // the encoder attention's key and value in one.
  std::vector<at::Tensor> joint;
  if (cache == nullptr && query.is_same(key_value)) joint = joint_projections(query, {&q_proj_, &k_proj_, &v_proj_});
  at::Tensor q = split_heads(joint.empty() ? scoped_linear(query, q_proj_->weight, q_proj_->bias) : joint[0]);
  if (cache == nullptr && joint.empty()) joint = joint_projections(key_value, {&k_proj_, &v_proj_});
  at::Tensor k;
  at::Tensor v;
  at::Tensor kv_rows;  // query row b reads key/value row kv_rows[b]; undefined = b
  if (cache != nullptr && static_kv && cache->key.defined()) {
    // The CPU kernel reads the cache through its pending rows: a beam's hypotheses share their
    // sentence's keys and values, which are never copied per hypothesis.
    if (cpu_attention_applies(q, cache->key, cache->value, cache->pending_rows) && !is_training() &&
        !at::GradMode::is_enabled()) {
      kv_rows = cache->pending_rows;
    } else {
      cache->materialize();
    }
    k = cache->key;
    v = cache->value;
  } else if (!joint.empty()) {
    k = split_heads(joint[joint.size() - 2]);
    v = split_heads(joint.back());
  } else {
    k = split_heads(scoped_linear(key_value, k_proj_->weight, k_proj_->bias));
    v = split_heads(scoped_linear(key_value, v_proj_->weight, v_proj_->bias));
    if (cache != nullptr) {
      if (static_kv) {
        cache->key = k;
        cache->value = v;
      } else if (!is_training() && !at::GradMode::is_enabled() && row_attention_kernel_applies(head_dim_) &&
                 cache->can_append_in_place(k, v)) {
        cache->append_in_place(k, v);  // read by position below, never copied
        kv_rows = cache->positions;
        k = cache->key;
        v = cache->value;
      } else {
        cache->append(k, v);
        k = cache->key;
        v = cache->value;
      }
    }
  }
  const int64_t src_len = k.size(2);

  at::Tensor mask;
  if (attn_mask.defined()) mask = attn_mask.view({1, 1, tgt_len, src_len});
  if (key_padding_mask.defined()) {
    at::Tensor pad = key_padding_mask.view({batch, 1, 1, src_len});
    mask = mask.defined() ? mask.logical_or(pad) : pad;
  }
  at::Tensor out;
  if (kv_rows.defined()) {
    at::Tensor probs;  // (B, H, Tq, Tk), computed by the kernel anyway
    out = cpu_attention(q, k, v, mask, 0.0, false, kv_rows, head_mean != nullptr ? &probs : nullptr);
    if (head_mean != nullptr) *head_mean = probs.mean(1);  // (B, H, Tq, Tk) -> (B, Tq, Tk)
  } else {
    out = attention(q, k, v, mask, options_.dropout, is_training());
    // The fused kernels do not return their weights: one more product, only when they are asked for.
    if (head_mean != nullptr) *head_mean = attention_weights(q, k, mask).mean(1);  // (B, H, Tq, Tk) -> (B, Tq, Tk)
  }
  // (B, H, Tq, D) -> (B, Tq, H, D) -> (B, Tq, C)
  out = out.transpose(1, 2).reshape({batch, tgt_len, options_.embed_dim});
  return scoped_linear(out, out_proj_->weight, out_proj_->bias);
}

}  // namespace fairseq_cpp::nn
