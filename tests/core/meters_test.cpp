#include "fairseq_cpp/core/meters.h"

#include <gtest/gtest.h>

namespace fairseq_cpp::core {
namespace {

// A clock the test moves by hand.
struct FakeClock {
  double now = 100.0;
  Clock clock() {
    return [this] { return now; };
  }
};

TEST(Meters, AverageIsWeighted) {
  AverageMeter m;
  EXPECT_EQ(m.avg(), 0.0);
  m.update(2.0, 3);  // 6
  m.update(5.0, 1);  // 5
  EXPECT_DOUBLE_EQ(m.sum(), 11.0);
  EXPECT_DOUBLE_EQ(m.count(), 4.0);
  EXPECT_DOUBLE_EQ(m.avg(), 2.75);
  EXPECT_DOUBLE_EQ(m.last(), 5.0);
  m.reset();
  EXPECT_EQ(m.count(), 0.0);
}

TEST(Meters, SmoothedStartsAtFirstValue) {
  SmoothedMeter m(0.9);
  m.update(10.0);
  EXPECT_DOUBLE_EQ(m.avg(), 10.0);
  m.update(0.0);
  EXPECT_DOUBLE_EQ(m.avg(), 9.0);  // 0.9 * 10 + 0.1 * 0
  m.update(19.0);
  EXPECT_DOUBLE_EQ(m.avg(), 10.0);  // 0.9 * 9 + 0.1 * 19
}

TEST(Meters, TimeMeterRateAndResume) {
  FakeClock c;
  TimeMeter m(c.clock());
  m.update(1000);
  c.now += 4.0;
  EXPECT_DOUBLE_EQ(m.rate(), 250.0);
  m.reset(1000, 4.0);  // resume: 1000 words in 4 s already
  m.update(1000);
  c.now += 4.0;
  EXPECT_DOUBLE_EQ(m.elapsed(), 8.0);
  EXPECT_DOUBLE_EQ(m.rate(), 250.0);
}

TEST(Meters, StopwatchSumsIntervals) {
  FakeClock c;
  StopwatchMeter m(c.clock());
  m.start();
  c.now += 1.5;
  m.stop(3);
  c.now += 100;  // not running: not counted
  m.start();
  c.now += 0.5;
  m.stop(1);
  m.stop(1);  // a stop without start does nothing
  EXPECT_DOUBLE_EQ(m.sum(), 2.0);
  EXPECT_DOUBLE_EQ(m.n(), 4.0);
  EXPECT_DOUBLE_EQ(m.avg(), 0.5);
}

TEST(Meters, MonotonicClockMoves) {
  double a = monotonic_seconds();
  double b = monotonic_seconds();
  EXPECT_GE(b, a);
}

}  // namespace
}  // namespace fairseq_cpp::core
