#pragma once
// Multi-head attention as fairseq's MultiheadAttention: separate q/k/v/out projections (state-dict
// keys `q_proj.weight`, ...), padding and causal masks, and a per-layer key/value cache for
// incremental decoding. Tensors are batch-first: (B, T, C).

#include <memory>

#include <ATen/Tensor.h>
#include <torch/nn/module.h>

#include "fairseq_cpp/nn/linear.h"

namespace fairseq_cpp::nn {

// Attention weights softmax(q k^T * scale + masks) v over (B, H, Tq, D) queries and (B, H, Tk, D)
// keys/values; `mask` is boolean, true = may not attend, broadcastable to (B, H, Tq, Tk), or
// undefined. Uses the fused at::scaled_dot_product_attention where LibTorch has it (2.0+),
// otherwise cpu_attention for float32 CPU tensors and the matmul-softmax-matmul path for the rest;
// all give the same results up to float rounding.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                     double dropout, bool training);
// One autograd node with one BLAS GEMM per (batch, head), for float32 CPU tensors, used by
// attention() on LibTorch 1.x whose CPU bmm dispatches per batch element (attention_cpu.cpp);
// applies when the BLAS exports sgemm_ and the shapes agree. With `kv_rows` (B) int64, query row b
// attends to key/value row kv_rows[b] (k and v may have fewer rows); with `kv_rows` (B, Tk), its
// key/value t is in row kv_rows[b][t] (a cache whose rows never move; one query row per head, and
// only where row_attention_kernel_applies). Those forms have no gradient, and `probs` (when given)
// receives their softmax weights (B, H, Tq, Tk).
bool cpu_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& kv_rows = at::Tensor());
at::Tensor cpu_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                         double dropout, bool training, const at::Tensor& kv_rows = at::Tensor(),
                         at::Tensor* probs = nullptr);
// Whether cpu_attention takes its kernel for one query row per head of `head_dim` (a decoder's step)
// instead of BLAS: on CPUs with AVX2 and FMA, for head sizes 32, 64 and 128.
bool row_attention_kernel_applies(int64_t head_dim);
// Benchmarks and tests: whether cpu_attention may take that kernel (and the decoder keep its
// self-attention caches in place, which only that kernel reads); on by default (process-wide; not
// to be changed while a search runs).
void set_row_attention_kernels(bool on);
// softmax(q k^T * scale + mask) in float32: the weights attention() applies, (B, H, Tq, Tk).
at::Tensor attention_weights(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask);
// The matmul-softmax-matmul path on every LibTorch version (softmax in float32, as fairseq).
at::Tensor attention_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                               double dropout, bool training);

// (T, T) boolean mask, true above the diagonal: position t may not attend to positions > t.
at::Tensor causal_mask(int64_t length, const at::Device& device);

// The buffers a decoder's self-attention caches take turns on during one search. Each step writes
// every cache anew (its rows reordered, one position longer) into the spare buffer and hands its
// old buffer back as the next spare, so that after the first steps no step allocates: N caches
// live on N + 1 buffers sized once for `max_steps` positions (only the pages written are ever
// resident). Allocating a one-step-longer tensor per cache and step instead left the allocator
// with freed blocks that no later, larger request fits (issue 37: about 360 MiB at
// transformer-base size, beam 5, 64 sentences).
struct CacheBuffers {
  explicit CacheBuffers(int64_t steps) : max_steps(steps) {}
  int64_t max_steps;  // positions a cache may reach (beam search: its longest output + 1)
  at::Tensor spare;   // a flat buffer that no cache uses now, or undefined
  // A flat buffer of at least `numel` elements: the spare when it is large enough, otherwise a new
  // one with room for `max_steps` positions of `numel / steps` elements each.
  at::Tensor take(int64_t numel, int64_t steps, const at::TensorOptions& options);
  // `buffer` (undefined: nothing) is free again: it becomes the spare unless that is larger.
  void give_back(at::Tensor buffer);
};

// Cached keys and values of one attention block, each (B, H, T, D); undefined until the first step.
// Beam search reorders the rows every step; the reordering is composed lazily and applied in the
// same copy that appends the next step (self-attention), or when the keys are next read.
//
// A self-attention cache can instead keep its rows in place (append_in_place: float32 on the CPU,
// read by cpu_attention's row kernel): key and value are then (R, H, T, D) views of position-major
// (max_steps, R, H, D) buffers (`buffers->max_steps`; one position at the first step), each step's
// keys and values are written once, at their position and row, and copied again only when the
// rows outgrow the buffers, and `positions` (B, T) says which row holds position t of row b. A
// reorder permutes `positions` only. Copying the whole cache at every step was 8% of a beam search
// at transformer-base size (issue 37). The position-major buffers lie on pages of their own,
// unmapped as soon as the cache lets them go.
struct AttentionCache {
  at::Tensor key;
  at::Tensor value;
  at::Tensor pending_rows;  // (B') rows of key/value that the cache holds, not yet applied; or undefined
  // Where the appending copy of float32 CPU caches writes (set by the decoder from its
  // IncrementalState); without it each step allocates its copy.
  std::shared_ptr<CacheBuffers> buffers;
  // The buffers that key and value are views of (flat; in place: (max_steps, R, H, D)), or undefined.
  at::Tensor key_buffer, value_buffer;
  at::Tensor positions;                 // in place: (B, T) int64, the row of key/value of each position
  // Keeps the batch rows `new_order` (beam search), as index_select on dimension 0 would.
  void reorder(const at::Tensor& new_order);
  // Applies a pending reorder to key and value; a cache kept in place is gathered into (B, H, T, D)
  // tensors and is no longer in place.
  void materialize();
  // key/value with the pending reorder applied and one step's (B', H, 1, D) appended at the end of
  // dimension 2: one copy of the cache instead of index_select's and cat's.
  void append(const at::Tensor& step_key, const at::Tensor& step_value);
  // Whether append_in_place can take this step's (B', H, 1, D) keys and values: float32 CPU
  // tensors, buffers set, and the cache empty or in place with B' rows (more than 7/8 of its
  // buffers' rows) and room for one more position. Once not, append() takes the cache out of place.
  bool can_append_in_place(const at::Tensor& step_key, const at::Tensor& step_value) const;
  // Writes the step at rows 0..B'-1 and position T of the buffers (allocated for one position at
  // the first step, and for `max_steps` at the next, or when B' outgrows them) and extends
  // `positions` by that column.
  void append_in_place(const at::Tensor& step_key, const at::Tensor& step_value);
};

struct MultiheadAttentionOptions {
  int64_t embed_dim = 512;  // model width C (queries, keys and values)
  int64_t num_heads = 8;    // heads; embed_dim must be divisible by it
  double dropout = 0.0;     // dropout on the attention weights (fairseq's attention_dropout)
};

class MultiheadAttentionImpl : public torch::nn::Module {
 public:
  explicit MultiheadAttentionImpl(const MultiheadAttentionOptions& options);
  // fairseq's initialisation: xavier_uniform with gain 1/sqrt(2) on q/k/v (v0.9+), plain xavier on
  // out_proj, out_proj bias zero; q/k/v biases keep Linear's default. Does nothing while a
  // ParametersFromCheckpoint lives on this thread.
  void reset_parameters();

  // query (B, Tq, C), key_value (B, Tk, C) -> (B, Tq, C). `key_padding_mask` (B, Tk) is true at
  // padding; `attn_mask` (Tq, Tk) is true where attention is forbidden; either may be undefined.
  // With a cache: self-attention appends this step's keys/values to it; with `static_kv`
  // (encoder-decoder attention) the keys/values are computed once and `key_value` is then ignored.
  // `head_mean` (when given) receives the attention weights averaged over heads, (B, Tq, Tk) float32
  // (fairseq's need_weights; without dropout); computing them costs nothing when it is not given.
  at::Tensor forward(const at::Tensor& query, const at::Tensor& key_value, const at::Tensor& key_padding_mask,
                     const at::Tensor& attn_mask, AttentionCache* cache = nullptr, bool static_kv = false,
                     at::Tensor* head_mean = nullptr);

  const MultiheadAttentionOptions& options() const { return options_; }

 private:
  // (B, T, C) -> (B, H, T, C / H)
  at::Tensor split_heads(const at::Tensor& x) const;

  MultiheadAttentionOptions options_;
  int64_t head_dim_;
  Linear k_proj_{nullptr};
  Linear v_proj_{nullptr};
  Linear q_proj_{nullptr};
  Linear out_proj_{nullptr};
};
TORCH_MODULE(MultiheadAttention);

}  // namespace fairseq_cpp::nn
