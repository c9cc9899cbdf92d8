#pragma once
// Helpers of the data tests: the shared fixtures and a reference run of Debian's Python.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/support/test_support.h"

namespace fairseq_cpp::testing {

// shared_dir()/fixtures/fairseq-v0.9 (the test FAILS when it is missing).
inline std::string fixture_dir() {
  std::string dir = shared_dir() + "/fixtures/fairseq-v0.9";
  EXPECT_TRUE(std::filesystem::is_directory(dir)) << "missing fixture directory " << dir;
  return dir;
}
inline std::string multi30k_dir() {
  std::string dir = shared_dir() + "/data/multi30k";
  EXPECT_TRUE(std::filesystem::is_directory(dir)) << "missing data directory " << dir;
  return dir;
}
// Runs `script` with /usr/bin/python3 (Debian's, with numpy) and returns its stdout.
inline std::string python(const std::string& script) {
  auto r = run({python_executable(), "-c", script});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

}  // namespace fairseq_cpp::testing
