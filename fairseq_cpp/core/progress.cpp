#include "fairseq_cpp/core/progress.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/core/tensorboard.h"

namespace fairseq_cpp::core {

LogFormat parse_log_format(std::string_view name, bool tty) {
  if (name.empty()) return tty ? LogFormat::tqdm : LogFormat::simple;
  if (name == "tqdm") return LogFormat::tqdm;
  if (name == "simple") return LogFormat::simple;
  if (name == "json") return LogFormat::json;
  if (name == "none") return LogFormat::none;
  raise<UserError>("`common.log_format` must be one of tqdm, simple, json, none, but is \"{}\" instead.", name);
}

std::string format_stat(const Stat& stat) {
  double v = stat.value;
  if (stat.decimals < 0) return fmt::format("{:g}", v);  // fairseq's "{:g}": 3.75e-05, 1543.27
  if (stat.decimals >= 0 && std::isfinite(v)) {
    double scale = std::pow(10.0, stat.decimals);
    v = std::round(v * scale) / scale;
  }
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

namespace {

std::string json_number(double v) {
  return std::isfinite(v) ? fmt::format("{}", v) : (std::isnan(v) ? "NaN" : (v > 0 ? "Infinity" : "-Infinity"));
}

std::string json_stat(const Stat& stat) {
  std::string s = format_stat(stat);
  return std::isfinite(stat.value) ? s : json_number(stat.value);
}

std::string join_stats(const Stats& stats, std::string_view key_sep, std::string_view sep) {
  std::string out;
  for (const auto& s : stats) out += fmt::format("{}{}{}{}", out.empty() ? "" : sep, s.key, key_sep, format_stat(s));
  return out;
}

class BaseBar : public ProgressBar {
 public:
  explicit BaseBar(ProgressOptions o) : o_(std::move(o)) {
    if (o_.prefix.empty() && o_.epoch > 0) o_.prefix = fmt::format("epoch {:03d}", o_.epoch);
  }

  void print(const Stats& stats, std::string_view tag) override {
    if (o_.format == LogFormat::json) {
      std::string line = o_.epoch > 0 ? fmt::format("{{\"epoch\": {}", o_.epoch) : "{";
      bool first = o_.epoch <= 0;
      for (const auto& s : stats) {
        line += fmt::format("{}\"{}_{}\": {}", first ? "" : ", ", tag, s.key, json_stat(s));
        first = false;
      }
      emit(tag, line + "}");
      return;
    }
    std::string body = join_stats(stats, " ", " | ");
    emit(tag, o_.prefix.empty() ? body : fmt::format("{} | {}", o_.prefix, body));
  }

 protected:
  void emit(std::string_view tag, std::string_view line) {
    if (o_.sink) {
      o_.sink(tag, line);
    } else {
      log::info(tag, "{}", line);
    }
  }
  bool due(int64_t step) const { return o_.log_interval > 0 && step % o_.log_interval == 0; }
  // "epoch 001:    100 / 1130 loss=5.123, wps=1543.2"
  std::string simple_line(const Stats& stats, int64_t step) const {
    std::string where = o_.total > 0 ? fmt::format("{:6d} / {}", step, o_.total) : fmt::format("{:6d}", step);
    return fmt::format("{}{}{} {}", o_.prefix, o_.prefix.empty() ? "" : ":", where, join_stats(stats, "=", ", "));
  }

  ProgressOptions o_;
};

class SimpleBar : public BaseBar {
 public:
  using BaseBar::BaseBar;
  void log(const Stats& stats, int64_t step, std::string_view tag) override {
    if (due(step)) emit(tag, simple_line(stats, step));
  }
};

class JsonBar : public BaseBar {
 public:
  using BaseBar::BaseBar;
  void log(const Stats& stats, int64_t step, std::string_view tag) override {
    if (!due(step)) return;
    std::string line = "{";
    if (o_.epoch > 0) {
      // fairseq's "update": the epoch as a real number, e.g. 1.088 = 8.8% into epoch 2.
      double update = o_.total > 0 ? (o_.epoch - 1) + static_cast<double>(step) / o_.total : o_.epoch - 1;
      line += fmt::format("\"epoch\": {}, \"update\": {}, ", o_.epoch, format_stat({"update", update, 3}));
    }
    for (size_t i = 0; i < stats.size(); ++i)
      line += fmt::format("{}\"{}\": {}", i ? ", " : "", stats[i].key, json_stat(stats[i]));
    emit(tag, line + "}");
  }
};

class NoneBar : public BaseBar {
 public:
  using BaseBar::BaseBar;
  void log(const Stats&, int64_t, std::string_view) override {}
};

// "01:23" or "1:02:03"
std::string clock_text(double seconds) {
  auto s = static_cast<int64_t>(std::max(0.0, seconds));
  return s >= 3600 ? fmt::format("{}:{:02d}:{:02d}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{:02d}:{:02d}", s / 60, s % 60);
}

// A live bar redrawn in place on the terminal, at most ten times a second:
//   epoch 001:  45%|████▌     | 508/1130 [01:23<01:41, 6.11it/s, loss=5.123, ppl=34.8]
class TqdmBar : public BaseBar {
 public:
  explicit TqdmBar(ProgressOptions o) : BaseBar(std::move(o)), start_(o_.clock()) { log::set_live_line(true); }
  ~TqdmBar() override {
    if (drawn_) std::fputs("\n", o_.terminal);
    std::fflush(o_.terminal);
    log::set_live_line(false);
  }

  void log(const Stats& stats, int64_t step, std::string_view tag) override {
    // The bar lives on the terminal only; common.log_file still gets the simple lines.
    if (due(step) && !o_.sink) log::write_file_only(log::Level::info, tag, simple_line(stats, step));
    double now = o_.clock();
    if (drawn_ && now - last_draw_ < 0.1 && step != o_.total) return;
    last_draw_ = now;
    drawn_ = true;
    double elapsed = now - start_;
    double rate = elapsed > 0 ? step / elapsed : 0;
    std::string head = o_.prefix.empty() ? "" : o_.prefix + ": ";
    std::string stats_text = join_stats(stats, "=", ", ");
    std::string line;
    if (o_.total > 0) {
      double frac = std::min(1.0, static_cast<double>(step) / o_.total);
      constexpr int kWidth = 10;
      static const char* kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
      int eighths = static_cast<int>(frac * kWidth * 8);
      std::string bar;
      for (int i = 0; i < eighths / 8; ++i) bar += "█";
      int cells = eighths / 8;
      if (cells < kWidth && eighths % 8) {
        bar += kEighths[eighths % 8];
        ++cells;
      }
      bar += std::string(kWidth - cells, ' ');
      double eta = rate > 0 ? (o_.total - step) / rate : 0;
      line =
          fmt::format("{}{:3d}%|{}| {}/{} [{}<{}, {:.2f}it/s{}{}]", head, static_cast<int>(frac * 100), bar, step,
                      o_.total, clock_text(elapsed), clock_text(eta), rate, stats_text.empty() ? "" : ", ", stats_text);
    } else {
      line = fmt::format("{}{} [{}, {:.2f}it/s{}{}]", head, step, clock_text(elapsed), rate,
                         stats_text.empty() ? "" : ", ", stats_text);
    }
    std::fprintf(o_.terminal, "\r\033[K%s", line.c_str());
    std::fflush(o_.terminal);
  }

 private:
  double start_;
  double last_draw_ = 0;
  bool drawn_ = false;
};

// fairseq's TensorboardProgressBarWrapper around another bar: every stat but num_updates becomes a
// scalar in logdir/<tag>, at step = the stat num_updates (else log's step, or 0 for print). log()
// writes only at the lines' interval, where fairseq calls it and the train_inner meters are whole.
class TensorBoardBar : public ProgressBar {
 public:
  TensorBoardBar(std::unique_ptr<ProgressBar> inner, std::string logdir, int64_t log_interval)
      : inner_(std::move(inner)), logdir_(std::move(logdir)), log_interval_(log_interval) {}

  void log(const Stats& stats, int64_t step, std::string_view tag) override {
    if (log_interval_ > 0 && step % log_interval_ == 0) write(stats, step, tag);
    inner_->log(stats, step, tag);
  }
  void print(const Stats& stats, std::string_view tag) override {
    write(stats, 0, tag);
    inner_->print(stats, tag);
  }

 private:
  void write(const Stats& stats, int64_t step, std::string_view tag) {
    for (const auto& s : stats)
      if (s.key == "num_updates") step = std::llround(s.value);
    EventWriter& writer = tensorboard_writer(logdir_, std::string(tag));
    for (const auto& s : stats)
      if (s.key != "num_updates") writer.add_scalar(s.key, s.value, step);
    writer.flush();
  }

  std::unique_ptr<ProgressBar> inner_;
  std::string logdir_;
  int64_t log_interval_;
};

std::unique_ptr<ProgressBar> make_text_bar(ProgressOptions options) {
  switch (options.format) {
    case LogFormat::tqdm:
      return std::make_unique<TqdmBar>(std::move(options));
    case LogFormat::simple:
      return std::make_unique<SimpleBar>(std::move(options));
    case LogFormat::json:
      return std::make_unique<JsonBar>(std::move(options));
    case LogFormat::none:
      return std::make_unique<NoneBar>(std::move(options));
  }
  return std::make_unique<NoneBar>(std::move(options));
}

}  // namespace

std::unique_ptr<ProgressBar> make_progress_bar(ProgressOptions options) {
  std::string logdir = options.tensorboard_logdir;
  int64_t log_interval = options.log_interval;
  auto bar = make_text_bar(std::move(options));
  if (logdir.empty()) return bar;
  return std::make_unique<TensorBoardBar>(std::move(bar), std::move(logdir), log_interval);
}

}  // namespace fairseq_cpp::core
