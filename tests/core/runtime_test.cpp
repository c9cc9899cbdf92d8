#include "fairseq_cpp/core/runtime.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "fairseq_cpp/core/torch_compat.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::core {
namespace {

TEST(Runtime, ExplicitThreadsAreSet) {
  EXPECT_EQ(configure_cpu_threads(3, 1), 3);
  EXPECT_EQ(at::get_num_threads(), 3);
}

// The library's own at::parallel_for (its kernels, dropout, log-softmax, attention) uses every
// intra-op thread: compiled without OpenMP it ran each range on the calling thread alone.
TEST(Runtime, OurParallelForRunsOnEveryIntraOpThread) {
  const int before = at::get_num_threads();
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    EXPECT_EQ(parallel_for_threads(), threads);
  }
  at::set_num_threads(before);
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

// Debian's OpenBLAS (the pthread build) keeps a thread pool of its own, which at::set_num_threads
// does not size: a worker with one intra-op thread ran its GEMMs on two threads.
TEST(Runtime, TheBlasThreadsFollowTheIntraOpThreads) {
  const int blas_before = blas_threads();
  if (blas_before == 0) GTEST_SKIP() << "the BLAS loaded here has no thread count of its own";
  const int before = at::get_num_threads();
  for (int threads : {1, 2}) {
    configure_cpu_threads(threads, 1);
    EXPECT_EQ(blas_threads(), threads);
  }
  EXPECT_EQ(set_blas_threads(1), 2) << "returns the count before";
  EXPECT_EQ(blas_threads(), 1);
  at::set_num_threads(before);
  set_blas_threads(blas_before);
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

// Resident kB of the mapping that starts at `address` (/proc/self/smaps), or -1 if none does.
int64_t resident_kb_of(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool found = false;
  while (std::getline(smaps, line)) {
    unsigned long start = 0, end = 0;
    long long kb = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2) {  // a mapping's first line
      found = start == reinterpret_cast<uintptr_t>(address);
    } else if (found && std::sscanf(line.c_str(), "Rss: %lld kB", &kb) == 1) {
      return kb;
    }
  }
  return -1;
}

// The pages of the libraries and of a read-only file mapping leave the resident set, and come back
// with their contents when touched; a mapping with a written private page (as a library's relocated
// data) is left whole; LibTorch still computes the same.
TEST(Runtime, FilePagesAreGivenBackButPrivateCopiesStay) {
  testing::TempDir dir;
  const size_t size = 4 << 20;
  std::string content(size, '\0');
  for (size_t i = 0; i < size; ++i) content[i] = static_cast<char>(i % 251);
  const int fd = open(dir.write("pages", content).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  auto* clean = static_cast<const char*>(mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0));
  auto* written = static_cast<char*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0));
  close(fd);
  ASSERT_NE(clean, MAP_FAILED);
  ASSERT_NE(written, MAP_FAILED);
  int64_t sum = 0;
  for (size_t i = 0; i < size; i += 4096)  // every page resident
    sum += static_cast<unsigned char>(clean[i]) + static_cast<unsigned char>(written[i]);
  written[1] = 'X';  // a private copy of the first page
  ASSERT_EQ(mprotect(written, size, PROT_READ), 0);
  EXPECT_GT(sum, 0);
  const int64_t clean_kb = resident_kb_of(clean), written_kb = resident_kb_of(written);
  EXPECT_GT(clean_kb, 0);
  EXPECT_GT(written_kb, 0);
  const at::Tensor a = at::randn({64, 64}), b = at::randn({64, 64}), product = at::matmul(a, b);

  const int64_t before = testing::resident_bytes();
  const int64_t released = release_file_pages();
  const int64_t after = testing::resident_bytes();
  EXPECT_GT(released, clean_kb * 1024 + (int64_t{16} << 20)) << "the libraries' pages and this mapping's";
  EXPECT_GE(before - after, released / 2) << "before " << before << ", after " << after;
  EXPECT_EQ(resident_kb_of(clean), 0);
  EXPECT_EQ(resident_kb_of(written), written_kb) << "left whole";
  EXPECT_EQ(written[1], 'X');
  EXPECT_EQ(written[2], 2);
  EXPECT_EQ(std::string(clean, size), content) << "read back from the file";
  EXPECT_TRUE(at::equal(at::matmul(a, b), product));
  munmap(const_cast<char*>(clean), size);
  munmap(written, size);
}

}  // namespace
}  // namespace fairseq_cpp::core
