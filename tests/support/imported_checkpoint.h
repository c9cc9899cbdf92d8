#pragma once
// The fairseq v0.9 fixture (../shared/fixtures/fairseq-v0.9, made by fairseq itself) and a gtest
// fixture that imports its checkpoint once per test suite with tools/fairseq-import.
//
//   class FairseqFixture : public testing::ImportedFairseqCheckpoint {};
//   TEST_F(FairseqFixture, ...) { run({..., "--path", imported_}); }

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/support/test_support.h"

namespace fairseq_cpp::testing {

// A file of the fixture; the test fails (it is not skipped) when the shared data is missing.
inline std::string fixture_path(const std::string& name) {
  std::string path = shared_dir() + "/fixtures/fairseq-v0.9/" + name;
  if (!std::filesystem::exists(path))
    ADD_FAILURE() << "fixture missing: " << path << " (see the project's shared data)";
  return path;
}

class ImportedFairseqCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    imported_ = dir_->path() + "/imported.pt";
    auto r = run_tool("fairseq-import", {fixture_path("checkpoint_best.pt"), imported_});
    import_status_ = r.exit_code;
    import_err_ = r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(import_status_, 0) << import_err_; }

  inline static TempDir* dir_ = nullptr;
  inline static std::string imported_;  // our checkpoint converted from fairseq's
  inline static int import_status_ = -1;
  inline static std::string import_err_;
};

}  // namespace fairseq_cpp::testing
