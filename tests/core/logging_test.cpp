#include "fairseq_cpp/core/logging.h"

#include <gtest/gtest.h>

#include <regex>

#include "fairseq_cpp/core/errors.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::log {
namespace {

class Logging : public ::testing::Test {
 protected:
  void TearDown() override { configure(LogOptions{}); }
};

TEST_F(Logging, LineHasTimestampLevelAndTag) {
  configure(LogOptions{});
  std::string line = format_line(Level::info, "trainer", "epoch 1 done");
  EXPECT_TRUE(
      std::regex_match(line, std::regex(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| INFO \| \[trainer\] epoch 1 done)")))
      << line;
}

TEST_F(Logging, OnlyRankZeroLogsInfoUnlessAllRanks) {
  testing::TempDir dir;
  LogOptions o;
  o.rank = 1;
  o.world_size = 2;
  o.file = dir.path() + "/log.txt";
  configure(o);
  ::testing::internal::CaptureStderr();
  info("trainer", "hidden {}", 1);
  warning("trainer", "shown {}", 2);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("hidden"), std::string::npos);
  EXPECT_NE(err.find("| WARNING | rank 1 | [trainer] shown 2"), std::string::npos) << err;
  o.all_ranks = true;
  configure(o);
  ::testing::internal::CaptureStderr();
  info("trainer", "now shown");
  ::testing::internal::GetCapturedStderr();
  std::string file = testing::read_file(o.file);
  EXPECT_NE(file.find("[trainer] shown 2"), std::string::npos);
  EXPECT_NE(file.find("| INFO | rank 1 | [trainer] now shown"), std::string::npos) << file;
  EXPECT_EQ(file.find("hidden"), std::string::npos);
}

TEST_F(Logging, LevelFilters) {
  LogOptions o;
  o.level = Level::warning;
  configure(o);
  EXPECT_FALSE(enabled(Level::info));
  EXPECT_TRUE(enabled(Level::error));
}

TEST_F(Logging, UnwritableFileIsAUserError) {
  LogOptions o;
  o.file = "/nonexistent-dir/log.txt";
  EXPECT_THROW(configure(o), UserError);
}

}  // namespace
}  // namespace fairseq_cpp::log
