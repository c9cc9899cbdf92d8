#pragma once
// Meters for training statistics, as fairseq's logging/meters.py: a running average, an
// exponentially smoothed average, a rate (events per second, e.g. words/s) and a stopwatch.
// Time comes from a Clock so that rates can be tested without sleeping.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

namespace fairseq_cpp::core {

// Seconds on a monotonic clock.
using Clock = std::function<double()>;
double monotonic_seconds();

// Weighted running average: update(value, n) adds n observations of `value`.
class AverageMeter {
 public:
  void reset() {
    sum_ = 0;
    count_ = 0;
    last_ = 0;
  }
  void update(double value, double n = 1) {
    sum_ += value * n;
    count_ += n;
    last_ = value;
  }
  double sum() const { return sum_; }
  double count() const { return count_; }
  double last() const { return last_; }
  double avg() const { return count_ > 0 ? sum_ / count_ : 0.0; }

 private:
  double sum_ = 0;
  double count_ = 0;
  double last_ = 0;
};

// Exponential moving average, the first value taken as is: avg = alpha * avg + (1 - alpha) * value.
class SmoothedMeter {
 public:
  explicit SmoothedMeter(double alpha = 0.98) : alpha_(alpha) {}
  void reset() { avg_.reset(); }
  void update(double value) { avg_ = avg_ ? alpha_ * *avg_ + (1 - alpha_) * value : value; }
  double avg() const { return avg_.value_or(0.0); }

 private:
  double alpha_;  // weight of the past, in [0, 1)
  std::optional<double> avg_;
};

// Events per second since the meter started: rate = n / elapsed. `init` restores a saved
// (n, elapsed) so that rates continue across a resume.
class TimeMeter {
 public:
  explicit TimeMeter(Clock clock = monotonic_seconds) : clock_(std::move(clock)), start_(clock_()) {}
  void reset(double n = 0, double elapsed = 0) {
    n_ = n;
    offset_ = elapsed;
    start_ = clock_();
  }
  void update(double n = 1) { n_ += n; }
  double n() const { return n_; }
  double elapsed() const { return offset_ + (clock_() - start_); }
  double rate() const {
    double t = elapsed();
    return t > 0 ? n_ / t : 0.0;
  }

 private:
  Clock clock_;
  double start_;
  double n_ = 0;
  double offset_ = 0;  // seconds carried over from before a reset/resume
};

// Accumulates timed intervals: start(), stop(n) adds the interval and n items.
class StopwatchMeter {
 public:
  explicit StopwatchMeter(Clock clock = monotonic_seconds) : clock_(std::move(clock)) {}
  void start() { started_ = clock_(); }
  void stop(double n = 1) {
    if (!started_) return;
    sum_ += clock_() - *started_;
    n_ += n;
    started_.reset();
  }
  void reset() {
    sum_ = 0;
    n_ = 0;
    started_.reset();
  }
  double sum() const { return sum_; }  // seconds in all intervals
  double n() const { return n_; }
  double avg() const { return n_ > 0 ? sum_ / n_ : 0.0; }  // seconds per item
  bool running() const { return started_.has_value(); }

 private:
  Clock clock_;
  std::optional<double> started_;
  double sum_ = 0;
  double n_ = 0;
};

}  // namespace fairseq_cpp::core
