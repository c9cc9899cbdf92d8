// Our TensorBoard event files read back by the tensorboard package itself (the pinned one, in the
// project's Python environment; FSQ_REQUIREMENTS_PYTHON, set by tools/setup.sh --torch wheel):
// every record must pass its checksums and parse (the whole file consumed), the first must carry
// file_version "brain.Event:2", and EventAccumulator must give back every scalar with its run
// (DIR/<tag>), tag, step and float32 value, in the order written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fairseq_cpp/core/progress.h"
#include "fairseq_cpp/core/tensorboard.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::core {
namespace {

// Prints, tab-separated: "file <run> <whole file read> <first event's file_version>" per event
// file and "scalar <run> <tag> <step> <value.hex()>" per scalar EventAccumulator gives back.
constexpr const char* kReadBack = R"(
import os, sys
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

logdir = sys.argv[1]
for run in sorted(os.listdir(logdir)):
    folder = os.path.join(logdir, run)
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        raw = list(event_file_loader.RawEventFileLoader(path).Load())
        whole = sum(len(r) + 16 for r in raw) == os.path.getsize(path)
        first = next(iter(event_file_loader.EventFileLoader(path).Load()))
        print("file", run, whole, first.file_version, sep="\t")
    accumulator = EventAccumulator(folder)
    accumulator.Reload()
    for tag in accumulator.Tags()["scalars"]:
        for event in accumulator.Scalars(tag):
            print("scalar", run, tag, event.step, event.value.hex(), sep="\t")
)";

// "run/tag" -> "step:value" in writing order; the value exact (hex), NaN as "nan".
using Scalars = std::map<std::string, std::vector<std::string>>;

std::string entry(int64_t step, double value) {
  return std::isnan(value) ? fmt::format("{}:nan", step) : fmt::format("{}:{:a}", step, value);
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream in(line);
  for (std::string field; std::getline(in, field, '\t');) fields.push_back(field);
  return fields;
}

// Adds a point to what TensorBoard must read back for `run`'s `tag`.
void expect(Scalars& expected, const std::string& run, const std::string& tag, int64_t step, double value) {
  expected[run + "/" + tag].push_back(entry(step, static_cast<float>(value)));
}

// The writer directly: negative, tiny, subnormal, huge, infinite and NaN values, 4.2 (not a
// float), steps 0, negative and going back (which TensorBoard keeps for file_version 2).
void write_directly(const std::string& logdir, Scalars& expected) {
  EventWriter writer(logdir + "/direct");
  const std::vector<std::pair<int64_t, double>> points = {{0, 4.2},  {1, -7.25}, {2, 1e-30},     {3, -1e-42}, {4, 3e38},
                                                          {5, -0.0}, {-3, 0.1},  {10, INFINITY}, {7, NAN}};
  for (const auto& [step, value] : points) {
    writer.add_scalar("value", value, step);
    expect(expected, "direct", "value", step, value);
  }
  writer.add_scalar("other tag", 1.0 / 3, 1'000'000'000'000);
  expect(expected, "direct", "other tag", 1'000'000'000'000, 1.0 / 3);
  writer.flush();
}

// Through the progress bars, as training logs: train_inner every 2 steps, train and two valid
// subsets once per epoch, num_updates the step.
void log_through_progress_bars(const std::string& logdir, Scalars& expected) {
  ProgressOptions o;
  o.format = LogFormat::json;
  o.log_interval = 2;
  o.sink = [](std::string_view, std::string_view) {};
  o.tensorboard_logdir = logdir;
  int64_t updates = 0;
  for (int epoch = 1; epoch <= 2; ++epoch) {
    o.epoch = epoch;
    o.total = 5;
    auto bar = make_progress_bar(o);
    for (int step = 1; step <= 5; ++step) {
      ++updates;
      double loss = 10.0 / updates, lr = 5e-4 * updates / 10;
      bar->log({{"loss", loss, 3}, {"lr", lr, -1}, {"num_updates", static_cast<double>(updates), 0}}, step,
               "train_inner");
      if (step % 2 == 0) {
        expect(expected, "train_inner", "loss", updates, loss);
        expect(expected, "train_inner", "lr", updates, lr);
      }
    }
    bar->print({{"loss", 3.3 / epoch, 3}, {"num_updates", static_cast<double>(updates), 0}}, "train");
    expect(expected, "train", "loss", updates, 3.3 / epoch);
    for (const std::string subset : {"valid", "valid_de"}) {
      o.prefix = fmt::format("epoch {:03d} | valid on '{}' subset", epoch, subset);
      make_progress_bar(o)->print(
          {{"loss", -2.5 * epoch, 3}, {"ppl", 1e-7 * epoch, 2}, {"num_updates", static_cast<double>(updates), 0}},
          subset);
      expect(expected, subset, "loss", updates, -2.5 * epoch);
      expect(expected, subset, "ppl", updates, 1e-7 * epoch);
      o.prefix.clear();
    }
  }
}

TEST(TensorBoardReadBack, TensorBoardReadsEveryScalar) {
  testing::TempDir dir;
  const std::string logdir = dir.path() + "/tb";
  Scalars expected;
  write_directly(logdir, expected);
  log_through_progress_bars(logdir, expected);

  std::string script = dir.write("read_back.py", kReadBack);
  auto result = testing::run({FSQ_REQUIREMENTS_PYTHON, script, logdir});
  ASSERT_EQ(result.exit_code, 0) << result.err;

  Scalars got;
  std::vector<std::string> files;
  std::istringstream out(result.out);
  for (std::string line; std::getline(out, line);) {
    auto f = split_tabs(line);
    if (f.size() == 4 && f[0] == "file") {
      files.push_back(fmt::format("{} {} {}", f[1], f[2], f[3]));
    } else if (f.size() == 5 && f[0] == "scalar") {
      got[f[1] + "/" + f[2]].push_back(entry(std::stoll(f[3]), std::strtod(f[4].c_str(), nullptr)));
    } else {
      ADD_FAILURE() << "unexpected line: " << line;
    }
  }
  // One file per run, each read whole, each starting with the file version.
  EXPECT_EQ(files, (std::vector<std::string>{"direct True brain.Event:2", "train True brain.Event:2",
                                             "train_inner True brain.Event:2", "valid True brain.Event:2",
                                             "valid_de True brain.Event:2"}))
      << result.out;
  EXPECT_EQ(got, expected) << result.out;
}

}  // namespace
}  // namespace fairseq_cpp::core
