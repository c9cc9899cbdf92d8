#pragma once
// Progress reporting as fairseq's --log-format:
//   simple  a line every `log_interval` steps:  epoch 001:    100 / 1130 loss=5.123, wps=1543.2, ...
//   json    the same as one JSON object a line:  {"epoch": 1, "update": 1.088, "loss": 5.123, ...}
//   tqdm    a live bar on the terminal with ETA; summaries as simple, and the simple lines
//           go to common.log_file (if any) for tools/plot-log
//   none    summaries only
// Summaries (`print`) read "epoch 001 | loss 4.2 | ..." (json: {"epoch": 1, "train_loss": 4.2, ...}).
// With `tensorboard_logdir`, each logged line and each summary also goes to TensorBoard as
// fairseq's TensorboardProgressBarWrapper writes it: DIR/<tag>/events.out.tfevents.*, one scalar per
// stat but num_updates, at step = the stat "num_updates" (core/tensorboard.h).

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fairseq_cpp/core/meters.h"

namespace fairseq_cpp::core {

enum class LogFormat { tqdm, simple, json, none };

// "" picks tqdm when `tty`, else simple; throws UserError on an unknown name.
LogFormat parse_log_format(std::string_view name, bool tty);

// One named number in a progress line; `decimals` < 0 prints it with 6 significant digits.
struct Stat {
  std::string key;
  double value = 0;
  int decimals = 3;
};
using Stats = std::vector<Stat>;

// "5.123" for (5.12345, 3), "10" for (10.0, 3): rounded, then the shortest exact form;
// "3.75e-05" for (3.7500000000000003e-05, -1).
std::string format_stat(const Stat& stat);

struct ProgressOptions {
  LogFormat format = LogFormat::simple;
  int64_t log_interval = 100;  // steps between lines (simple, json)
  int64_t epoch = 0;           // shown as "epoch 001"; 0 = none
  std::string prefix;          // used instead of "epoch NNN" when set, e.g. "valid on 'valid' subset"
  int64_t total = 0;           // steps in this pass; 0 = unknown
  // Receives every finished line with its tag; empty = log::info(tag, line).
  std::function<void(std::string_view tag, std::string_view line)> sink;
  std::FILE* terminal = stderr;  // where tqdm draws its bar
  Clock clock = monotonic_seconds;
  std::string tensorboard_logdir;  // also write every stat as a TensorBoard scalar under DIR/<tag>; empty = off
};

class ProgressBar {
 public:
  virtual ~ProgressBar() = default;
  // Reports the stats after step `step` (1-based position in this pass) under `tag`.
  virtual void log(const Stats& stats, int64_t step, std::string_view tag) = 0;
  // Prints a summary line (end of an epoch or a validation) under `tag` ("train", "valid").
  virtual void print(const Stats& stats, std::string_view tag) = 0;
};

std::unique_ptr<ProgressBar> make_progress_bar(ProgressOptions options);

}  // namespace fairseq_cpp::core
