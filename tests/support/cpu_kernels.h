#pragma once
// Runs a check with each family of the project's vector kernels that this CPU can run.

#include <gtest/gtest.h>

#include "fairseq_cpp/core/runtime.h"

namespace fairseq_cpp::testing {

// `body` with the kernels this CPU picks (AVX-512F, else AVX2, else the portable code), then, on a
// CPU with both AVX-512F and AVX2, again with the AVX2 forms as a CPU without AVX-512F runs them
// (core::use_avx2_kernels_only); each run is traced with its family's name.
template <typename Body>
void for_each_cpu_kernel_family(Body&& body) {
  {
    SCOPED_TRACE(core::cpu_has_avx512f() ? "AVX-512F kernels" : core::cpu_has_avx2_fma() ? "AVX2 kernels"
                                                                                          : "portable code");
    body();
  }
  if (core::cpu_has_avx512f() && core::cpu_has_avx2_fma()) {
    SCOPED_TRACE("AVX2 kernels (AVX-512F set aside)");
    core::use_avx2_kernels_only(true);
    body();
    core::use_avx2_kernels_only(false);
  }
}

}  // namespace fairseq_cpp::testing
