#include "fairseq_cpp/core/progress.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::core {
namespace {

struct Captured {
  std::vector<std::pair<std::string, std::string>> lines;  // (tag, line)
};

ProgressOptions options_for(LogFormat format, Captured& sink) {
  ProgressOptions o;
  o.format = format;
  o.log_interval = 2;
  o.epoch = 3;
  o.total = 10;
  o.sink = [&sink](std::string_view tag, std::string_view line) { sink.lines.emplace_back(tag, line); };
  return o;
}

const Stats kStats = {{"loss", 5.123456, 3}, {"ppl", 34.8, 2}, {"wps", 1543.27, 1}, {"num_updates", 22, 0}};

TEST(Progress, FormatStatRoundsThenPrintsShortest) {
  EXPECT_EQ(format_stat({"x", 5.123456, 3}), "5.123");
  EXPECT_EQ(format_stat({"x", 10.0, 3}), "10");
  EXPECT_EQ(format_stat({"x", 0.00025, -1}), "0.00025");
  EXPECT_EQ(format_stat({"x", 3.7500000000000003e-05, -1}), "3.75e-05");
  EXPECT_EQ(format_stat({"x", 2.5, 0}), "3");  // round half away from zero
}

TEST(Progress, ParseLogFormat) {
  EXPECT_EQ(parse_log_format("", true), LogFormat::tqdm);
  EXPECT_EQ(parse_log_format("", false), LogFormat::simple);
  EXPECT_EQ(parse_log_format("json", true), LogFormat::json);
  EXPECT_THROW(parse_log_format("xml", true), UserError);
}

TEST(Progress, SimpleLinesEveryInterval) {
  Captured c;
  auto bar = make_progress_bar(options_for(LogFormat::simple, c));
  for (int step = 1; step <= 5; ++step) bar->log(kStats, step, "train_inner");
  bar->print({{"loss", 4.2, 3}, {"ppl", 18.38, 2}}, "train");
  ASSERT_EQ(c.lines.size(), 3u);
  EXPECT_EQ(c.lines[0].first, "train_inner");
  EXPECT_EQ(c.lines[0].second, "epoch 003:     2 / 10 loss=5.123, ppl=34.8, wps=1543.3, num_updates=22");
  EXPECT_EQ(c.lines[1].second, "epoch 003:     4 / 10 loss=5.123, ppl=34.8, wps=1543.3, num_updates=22");
  EXPECT_EQ(c.lines[2].first, "train");
  EXPECT_EQ(c.lines[2].second, "epoch 003 | loss 4.2 | ppl 18.38");
}

TEST(Progress, JsonLinesAreJsonWithFairseqsFields) {
  Captured c;
  auto bar = make_progress_bar(options_for(LogFormat::json, c));
  bar->log(kStats, 1, "train_inner");
  bar->log(kStats, 4, "train_inner");
  bar->print({{"loss", 4.2, 3}, {"nan", std::nan(""), 3}}, "valid");
  ASSERT_EQ(c.lines.size(), 2u);
  auto j = nlohmann::json::parse(c.lines[0].second);
  EXPECT_EQ(j["epoch"], 3);
  EXPECT_DOUBLE_EQ(j["update"].get<double>(), 2.4);  // (3 - 1) + 4 / 10
  EXPECT_DOUBLE_EQ(j["loss"].get<double>(), 5.123);
  EXPECT_DOUBLE_EQ(j["wps"].get<double>(), 1543.3);
  EXPECT_EQ(j["num_updates"], 22);
  EXPECT_EQ(c.lines[1].second, "{\"epoch\": 3, \"valid_loss\": 4.2, \"valid_nan\": NaN}");
}

TEST(Progress, NoneOnlyPrintsSummaries) {
  Captured c;
  auto bar = make_progress_bar(options_for(LogFormat::none, c));
  for (int step = 1; step <= 10; ++step) bar->log(kStats, step, "train_inner");
  bar->print({{"loss", 1, 3}}, "train");
  ASSERT_EQ(c.lines.size(), 1u);
  EXPECT_EQ(c.lines[0].second, "epoch 003 | loss 1");
}

TEST(Progress, TqdmDrawsABarWithEta) {
  Captured c;
  testing::TempDir dir;
  std::string path = dir.path() + "/tty";
  std::FILE* tty = std::fopen(path.c_str(), "w");
  double now = 0;
  {
    ProgressOptions o = options_for(LogFormat::tqdm, c);
    o.terminal = tty;
    o.clock = [&now] { return now; };
    auto bar = make_progress_bar(o);
    now = 10.0;  // 5 steps in 10 s: 0.5 it/s, 5 left => 10 s to go
    bar->log({{"loss", 2.5, 3}}, 5, "train_inner");
  }
  std::fclose(tty);
  std::string drawn = testing::read_file(path);
  EXPECT_NE(drawn.find("epoch 003:  50%|█████     | 5/10 [00:10<00:10, 0.50it/s, loss=2.5]"), std::string::npos)
      << drawn;
  EXPECT_EQ(drawn.back(), '\n');
  EXPECT_TRUE(c.lines.empty());
}

TEST(Progress, TqdmWritesSimpleLinesToTheLogFileOnly) {
  testing::TempDir dir;
  log::LogOptions log_options;
  log_options.file = dir.path() + "/log.txt";
  log::configure(log_options);
  std::string path = dir.path() + "/tty";
  std::FILE* tty = std::fopen(path.c_str(), "w");
  ::testing::internal::CaptureStderr();
  {
    ProgressOptions o;
    o.format = LogFormat::tqdm;
    o.log_interval = 2;
    o.epoch = 3;
    o.total = 10;
    o.terminal = tty;
    auto bar = make_progress_bar(o);
    bar->log({{"loss", 2.5, 3}}, 1, "train_inner");  // not due: bar only
    bar->log({{"loss", 2.25, 3}}, 2, "train_inner");
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  std::fclose(tty);
  log::configure(log::LogOptions{});
  std::string file = testing::read_file(log_options.file);
  EXPECT_NE(file.find("| INFO | [train_inner] epoch 003:     2 / 10 loss=2.25\n"), std::string::npos) << file;
  EXPECT_EQ(file.find("loss=2.5"), std::string::npos) << file;
  EXPECT_EQ(err.find("loss="), std::string::npos) << err;
}

}  // namespace
}  // namespace fairseq_cpp::core
