#pragma once
// log_softmax over the last dimension for beam search's (hypotheses x vocabulary) scores: on a
// float32 CPU tensor with AVX-512F, one vectorized pass for the maximum, one for the sum of
// exponentials (a degree-6 polynomial, within 2 ulp of expf) and one for the result; otherwise
// torch::log_softmax. Agrees with torch's to float rounding (about 1e-6 on log-probabilities).

#include <ATen/Tensor.h>

namespace fairseq_cpp::nn {

at::Tensor log_softmax_last_dim(const at::Tensor& x);

}  // namespace fairseq_cpp::nn
