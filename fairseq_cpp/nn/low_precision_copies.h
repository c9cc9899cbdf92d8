#pragma once
// Training in bf16 (or fp16 on CUDA) with the linear layers' weights rounded once per update, not
// at every use. Under autocast, each linear layer casts its float32 weight and bias to bf16 in
// every forward pass (a kernel per tensor), and backward casts each bf16 gradient back to float32
// and adds it to the weight's gradient (two more). Here the weights are copied into one flat bf16
// buffer in one kernel after the update, nn::scoped_linear multiplies by those copies (as does
// nn::MultiheadAttention's joint projection of q, k and v, by the copies concatenated), their
// gradients accumulate in a flat bf16 buffer, and that is added to the float32 gradients in one
// kernel per range (a gradient bucket, or all of it). The bits are autocast's: the same rounding
// of each weight, the same bf16 products, and each copy's gradient, added to zero and then cast,
// is the one autocast's backward casts.
//
//   nn::LowPrecisionCopies copies(params, optimizer.flat_params(), read_by_linear, at::kBFloat16);
//   copies.refresh();                          // after every change of the weights
//   { AutocastScope autocast(...); loss = ... }  // scoped_linear reads the copies
//   loss.backward();                           // their gradients go to copies.gradient_source(i)
//   copies.fold_gradients(flat_grads, 0, n);   // flat_grads += the copies' gradients; those zeroed
//
// A copy is read only while autocast is on for its device in its dtype and its weight has not
// changed since refresh() (its version, and its storage: EmaWeights' set_data swaps that without
// a version bump); otherwise scoped_linear is autocast's as before.

#include <atomic>
#include <cstdint>
#include <vector>

#include <ATen/Tensor.h>

namespace fairseq_cpp::nn {

class LowPrecisionCopies {
 public:
  // `params` are float32 views of `flat_params`'s consecutive slices, in order; `copied[i]` says
  // whether params[i] is read only through nn::scoped_linear (a linear layer's weight or bias;
  // or through low_precision_copy, as attention's joint projections read them),
  // so that its copy can take all of its gradient. Copies of those, in `dtype`, are registered
  // for scoped_linear; refresh() fills them.
  LowPrecisionCopies(const std::vector<at::Tensor>& params, const at::Tensor& flat_params,
                     const std::vector<bool>& copied, c10::ScalarType dtype);
  ~LowPrecisionCopies();
  LowPrecisionCopies(const LowPrecisionCopies&) = delete;
  LowPrecisionCopies& operator=(const LowPrecisionCopies&) = delete;

  // The copies from the weights as they are now (one cast), their gradients zero, for
  // scoped_linear to read. A weight has one owner: where several LowPrecisionCopies hold it, the
  // one constructed last, and once that has ended, the next to refresh. The others' refresh()
  // fills copies that are never read, and makes the owner's unread until it refreshes again: the
  // others' forward passes take autocast's casts, and their gradients reach the float32
  // gradients directly, never the owner's copies.
  void refresh();
  // The tensor whose gradient accumulator receives params[i]'s gradient in backward: its copy,
  // or params[i] itself where it has none.
  const at::Tensor& gradient_source(size_t i) const;
  // Adds the copies' gradients of the flat range [begin, end) to `flat_grads` (float32, the flat
  // order of params) and zeroes them.
  void fold_gradients(const at::Tensor& flat_grads, int64_t begin, int64_t end);
  // Bytes of the copies and of their gradients.
  int64_t bytes() const;

 private:
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> copies_;  // leaves over values_, gradients over grads_; undefined where not copied
  at::Tensor flat_params_;          // the span [begin_, end_) of the flat order that holds every copy
  at::Tensor values_, grads_;       // that span in dtype
  int64_t begin_ = 0, end_ = 0;
};

// The copy nn::scoped_linear reads instead of `tensor`: registered by a LowPrecisionCopies, filled
// since `tensor` last changed, with autocast on for its device in the copy's dtype; else undefined.
at::Tensor low_precision_copy(const at::Tensor& tensor);

// Times low_precision_copy returned a copy, over the process (tests).
int64_t low_precision_copy_reads();

}  // namespace fairseq_cpp::nn
