#pragma once
// The constants of the vector kernels' exp (nn/log_softmax.cpp, criterions/loss_rows.cpp):
// exp(x) = 2^n exp(r) with x = n ln2 + r, |r| <= ln2 / 2, and exp(r) by its Taylor polynomial of
// degree 6 (truncation below 2e-7 relative: within 2 ulp of expf).

#include <cstddef>

namespace fairseq_cpp::core {

inline constexpr float kLog2e = 1.44269504088896341f;
// ln 2 in two parts, so that x - n ln2 loses nothing for |n| < 2^8: the high part's 8 low bits are 0.
inline constexpr float kLn2High = 0.693145751953125f;
inline constexpr float kLn2Low = 1.42860682030941723212e-6f;
// The polynomial's coefficients, highest degree first (for Horner's rule): 1/6!, ..., 1/1!, 1/0!.
inline constexpr float kExpTaylor[] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
inline constexpr std::size_t kExpTaylorTerms = sizeof(kExpTaylor) / sizeof(kExpTaylor[0]);

}  // namespace fairseq_cpp::core
