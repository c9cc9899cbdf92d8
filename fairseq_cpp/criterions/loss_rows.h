#pragma once
// The label-smoothed loss of a block of logits, one row at a time, and its gradient with respect to
// the logits, on the CPU: the projection's chunks (cross_entropy.cpp) read each row of logits once
// from memory and write its gradient once, where LibTorch's operators made about eight passes over
// the chunk (log_softmax, its sum, the target's gather, exp, the smoothing's subtraction, the
// target's scatter, and in bf16 the rounding of the gradient). A row of a translation vocabulary
// (8k-64k float32) stays in the core's caches between this kernel's passes over it: its maximum,
// the sum of exponentials (kept, when a gradient is asked for, in the logits' place) and the
// gradient. AVX2 with FMA where the CPU has it (exp by a degree-6 polynomial, within 2 ulp of expf),
// else portable C++ with std::exp.
//
//   label_smoothed_rows(z, t, rows, V, eps, true, {.f32 = z})   // sums of the chunk; z becomes A
//   where, per row i with lse_i = log sum_v exp z_iv:
//     nll    += lse_i - z_i,t_i                          (= -log p(target))
//     smooth += V lse_i - sum_v z_iv                     (= sum_v -log p_v)
//     correct += [the first largest z_iv is at t_i]      (as argmax counts it)
//     A_iv   = exp(z_iv - lse_i) - eps / V - (1 - eps) [v == t_i]
// A row with a NaN or an infinite logit gives NaN in its sums and its gradient row (the loss of
// fp16's and bf16's overflow must stay non-finite for the loss scaler to see).

#include <cstdint>

#include <c10/util/BFloat16.h>

namespace fairseq_cpp::criterions {

struct RowLossSums {
  double nll = 0;       // sum over the rows of -log p(target), natural log
  double smooth = 0;    // sum over the rows and the vocabulary of -log p
  int64_t correct = 0;  // rows whose first largest logit is the target's (when counted)
};

// Where the gradient A goes: nowhere (both null: no gradient), float32 (may be the logits
// themselves), or bf16, rounded to nearest even as c10::BFloat16 rounds. Row-major, `vocab` a row.
struct RowGradient {
  float* f32 = nullptr;
  c10::BFloat16* bf16 = nullptr;
};

// `logits` holds rows x vocab float32, row-major; with a gradient output its values are overwritten
// (it holds the exponentials in between). target: `rows` ids in [0, vocab). Threads: LibTorch's
// intra-op threads over the rows; the sums are added in row order (the same on any thread count).
RowLossSums label_smoothed_rows(float* logits, const int64_t* target, int64_t rows, int64_t vocab, double epsilon,
                                bool count_correct, RowGradient gradient);

// Tests: while set, the portable form runs even on a CPU with AVX2 and FMA (process-wide).
void use_portable_loss_rows(bool portable);

}  // namespace fairseq_cpp::criterions
