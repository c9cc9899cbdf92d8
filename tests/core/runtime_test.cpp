#include "fairseq_cpp/core/runtime.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "fairseq_cpp/core/torch_compat.h"

namespace fairseq_cpp::core {
namespace {

TEST(Runtime, ExplicitThreadsAreSet) {
  EXPECT_EQ(configure_cpu_threads(3, 1), 3);
  EXPECT_EQ(at::get_num_threads(), 3);
}

TEST(Runtime, DefaultThreadsShareTheCoresAmongLocalProcesses) {
  int cores = available_cores();
  EXPECT_EQ(configure_cpu_threads(0, 1), cores);
  EXPECT_EQ(at::get_num_threads(), cores);
  EXPECT_EQ(configure_cpu_threads(0, cores * 4), 1) << "never fewer than one thread";
  if (cores >= 2) {
    EXPECT_EQ(configure_cpu_threads(0, 2), cores / 2);
  }
}

TEST(Runtime, BlasProbeMeasuresAndNamesTheLibrary) {
  BlasProbe probe = probe_blas();
  EXPECT_GT(probe.gflops, 0.0);
  EXPECT_EQ(probe.slow, probe.gflops < kSlowBlasGflops);
}

TEST(Runtime, CompatKnowsTheTorchVersion) {
  EXPECT_EQ(compat::kHasFusedAttention, TORCH_VERSION_MAJOR >= 2);
  EXPECT_FALSE(std::string(compat::kTorchVersion).empty());
}

}  // namespace
}  // namespace fairseq_cpp::core
