// TensorBoard event files: CRC-32C against published vectors, records and events byte for byte
// against what TensorBoard's own protobuf classes serialize (the expected bytes below were made with
// tensorboard 2.21's event_pb2 and its masked_crc32c), and the progress-bar wrapper's directories,
// tags and steps read back with a small decoder. tensorboard_readback_test.cpp reads the files
// with the real tensorboard package.
#include "fairseq_cpp/core/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/progress.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::core {
namespace {

namespace fs = std::filesystem;

std::string unhex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  return out;
}

std::string le32(uint32_t v) {
  std::string out;
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// One decoded event: the fields this writer uses.
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<Scalar> values;
};

// A minimal protobuf reader over one message.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool done() const { return pos_ >= data_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (pos_ >= data_.size() || shift > 63) throw std::runtime_error("bad varint");
      auto byte = static_cast<unsigned char>(data_[pos_++]);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return v;
    }
  }
  std::string_view take(size_t n) {
    if (pos_ + n > data_.size()) throw std::runtime_error("truncated field");
    auto out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  uint64_t fixed(size_t bytes) {
    uint64_t v = 0;
    auto s = take(bytes);
    for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
    return v;
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

Event decode_event(std::string_view data) {
  Event e;
  Reader r(data);
  while (!r.done()) {
    uint64_t key = r.varint();
    if (key == (1 << 3 | 1)) {
      uint64_t bits = r.fixed(8);
      std::memcpy(&e.wall_time, &bits, 8);
    } else if (key == (2 << 3 | 0)) {
      e.step = static_cast<int64_t>(r.varint());
    } else if (key == (3 << 3 | 2)) {
      e.file_version = std::string(r.take(r.varint()));
    } else if (key == (5 << 3 | 2)) {
      Reader summary(r.take(r.varint()));
      while (!summary.done()) {
        if (summary.varint() != (1 << 3 | 2)) throw std::runtime_error("unexpected Summary field");
        Reader value(summary.take(summary.varint()));
        Scalar s;
        while (!value.done()) {
          uint64_t vkey = value.varint();
          if (vkey == (1 << 3 | 2)) {
            s.tag = std::string(value.take(value.varint()));
          } else if (vkey == (2 << 3 | 5)) {
            auto bits = static_cast<uint32_t>(value.fixed(4));
            std::memcpy(&s.value, &bits, 4);
          } else {
            throw std::runtime_error("unexpected Value field");
          }
        }
        e.values.push_back(s);
      }
    } else {
      throw std::runtime_error("unexpected Event field " + std::to_string(key));
    }
  }
  return e;
}

// Every record of an event file, its framing and checksums checked.
std::vector<Event> read_events(const std::string& path) {
  std::string bytes = testing::read_file(path);
  std::vector<Event> events;
  Reader r(bytes);
  while (!r.done()) {
    std::string_view length_bytes = r.take(8);
    uint64_t length = Reader(length_bytes).fixed(8);
    EXPECT_EQ(r.fixed(4), masked_crc32c(length_bytes)) << path;
    std::string_view data = r.take(length);
    EXPECT_EQ(r.fixed(4), masked_crc32c(data)) << path;
    events.push_back(decode_event(data));
  }
  return events;
}

// The one event file in `dir`.
std::string event_file(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path().string());
  EXPECT_EQ(files.size(), 1u) << dir;
  return files.empty() ? "" : files[0];
}

TEST(TensorBoard, Crc32cKnownVectors) {
  EXPECT_EQ(crc32c(""), 0x00000000u);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  // RFC 3720 (iSCSI), appendix B.4
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending += static_cast<char>(i);
    descending += static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc32c(descending), 0x113FDB5Cu);
}

TEST(TensorBoard, MaskedCrc) {
  EXPECT_EQ(masked_crc32c(""), 0xa282ead8u);  // rotate(0) + delta
  EXPECT_EQ(masked_crc32c("123456789"), 0xc78ab0e5u);
}

TEST(TensorBoard, FirstEventAndItsRecordAsProtobufWritesThem) {
  std::string event = detail::event_bytes(1.5, 0, "brain.Event:2", {});
  EXPECT_EQ(event, unhex("09000000000000f83f1a0d627261696e2e4576656e743a32"));
  std::string record = detail::tf_record(event);
  EXPECT_EQ(record, unhex("1800000000000000") + le32(0x224b7fa3) + event + le32(0x6c64282a));
}

TEST(TensorBoard, ScalarEventAndItsRecordAsProtobufWritesThem) {
  std::string event = detail::event_bytes(2.0, 300, "", {{"loss", 0.25f}, {"ppl", -3.5f}});
  EXPECT_EQ(event, unhex("09000000000000004010ac022a190a0b0a046c6f7373150000803e0a0a0a0370706c15000060c0"));
  EXPECT_EQ(detail::tf_record(event), unhex("2700000000000000") + le32(0x46b1e1bb) + event + le32(0x3d0037fe));
}

TEST(TensorBoard, NegativeStepIsTenByteVarint) {
  std::string event = detail::event_bytes(0.0, -1, "", {});
  EXPECT_EQ(event.substr(9), unhex("10ffffffffffffffffff01"));  // after wall_time's 9 bytes
}

TEST(TensorBoard, WriterNamesItsFileAsPyTorchAndFlushes) {
  testing::TempDir dir;
  double before = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EventWriter writer(dir.path() + "/a/b");
  writer.add_scalar("loss", 4.2, 100);
  writer.add_scalar("loss", -1e-30, 200);
  writer.flush();
  double after = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

  std::string name = fs::path(writer.path()).filename().string();
  EXPECT_EQ(fs::path(writer.path()).parent_path(), fs::path(dir.path() + "/a/b"));
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string prefix =
      fmt::format("events.out.tfevents.{:010d}.{}.{}.", static_cast<int64_t>(before), host, ::getpid());
  EXPECT_EQ(name.substr(0, prefix.size()), prefix) << name;  // then this process's writer count

  auto events = read_events(writer.path());  // the writer still open: flushed
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_TRUE(events[0].values.empty());
  for (const auto& e : events) {
    EXPECT_GE(e.wall_time, before - 1e-3);
    EXPECT_LE(e.wall_time, after + 1e-3);
  }
  EXPECT_EQ(events[1].step, 100);
  ASSERT_EQ(events[1].values.size(), 1u);
  EXPECT_EQ(events[1].values[0].tag, "loss");
  EXPECT_EQ(events[1].values[0].value, 4.2f);
  EXPECT_EQ(events[2].step, 200);
  EXPECT_EQ(events[2].values[0].value, -1e-30f);
}

TEST(TensorBoard, TwoWritersInOneSecondGetTwoFiles) {
  testing::TempDir dir;
  EventWriter a(dir.path());
  EventWriter b(dir.path());
  EXPECT_NE(a.path(), b.path());
}

TEST(TensorBoard, UnwritableDirectoryIsAnOperationalErrorNamingIt) {
  testing::TempDir dir;
  std::string file = dir.write("plain", "not a directory");
  try {
    EventWriter writer(file + "/train");
    FAIL() << "no error";
  } catch (const OperationalError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(file + "/train"), std::string::npos) << what;
    EXPECT_NE(what.find("Not a directory"), std::string::npos) << what;
  }
}

const Stats kInner = {{"loss", 5.125, 3}, {"lr", 0.0005, -1}, {"num_updates", 0, 0}};

Stats with_updates(Stats stats, int64_t num_updates) {
  for (auto& s : stats)
    if (s.key == "num_updates") s.value = static_cast<double>(num_updates);
  return stats;
}

TEST(TensorBoard, ProgressBarWritesEveryStatButNumUpdatesAtNumUpdates) {
  testing::TempDir dir;
  std::vector<std::pair<std::string, std::string>> lines;
  ProgressOptions o;
  o.format = LogFormat::simple;
  o.log_interval = 2;
  o.epoch = 1;
  o.total = 5;
  o.sink = [&lines](std::string_view tag, std::string_view line) { lines.emplace_back(tag, line); };
  o.tensorboard_logdir = dir.path() + "/tb";
  {
    auto bar = make_progress_bar(o);
    // Steps of this pass 1..5 are updates 11..15 (a resumed epoch): written at steps 2 and 4, as
    // the lines, at num_updates 12 and 14.
    for (int step = 1; step <= 5; ++step) bar->log(with_updates(kInner, 10 + step), step, "train_inner");
    bar->print({{"loss", 4.5, 3}, {"num_updates", 15, 0}}, "train");
    // Without num_updates: log's step, and 0 for print.
    bar->log({{"wps", 100, 1}}, 6, "no_updates");
    bar->print({{"bleu", 27.5, 2}}, "no_updates");
  }
  // The text lines are the plain bar's.
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].second, "epoch 001:     2 / 5 loss=5.125, lr=0.0005, num_updates=12");
  EXPECT_EQ(lines[2].second, "epoch 001 | loss 4.5 | num_updates 15");

  std::vector<std::string> runs;
  for (const auto& entry : fs::directory_iterator(o.tensorboard_logdir))
    runs.push_back(entry.path().filename().string());
  std::sort(runs.begin(), runs.end());
  EXPECT_EQ(runs, (std::vector<std::string>{"no_updates", "train", "train_inner"}));

  auto inner = read_events(event_file(o.tensorboard_logdir + "/train_inner"));
  ASSERT_EQ(inner.size(), 5u);  // file_version, then loss and lr at 12 and 14
  EXPECT_EQ(inner[0].file_version, "brain.Event:2");
  std::vector<std::tuple<std::string, int64_t, float>> got;
  for (size_t i = 1; i < inner.size(); ++i) {
    ASSERT_EQ(inner[i].values.size(), 1u);
    got.emplace_back(inner[i].values[0].tag, inner[i].step, inner[i].values[0].value);
  }
  EXPECT_EQ(got, (std::vector<std::tuple<std::string, int64_t, float>>{
                     {"loss", 12, 5.125f}, {"lr", 12, 0.0005f}, {"loss", 14, 5.125f}, {"lr", 14, 0.0005f}}));

  auto train = read_events(event_file(o.tensorboard_logdir + "/train"));
  ASSERT_EQ(train.size(), 2u);
  EXPECT_EQ(train[1].step, 15);
  EXPECT_EQ(train[1].values[0].tag, "loss");
  EXPECT_EQ(train[1].values[0].value, 4.5f);

  auto other = read_events(event_file(o.tensorboard_logdir + "/no_updates"));
  ASSERT_EQ(other.size(), 3u);
  EXPECT_EQ(other[1].step, 6);
  EXPECT_EQ(other[1].values[0].tag, "wps");
  EXPECT_EQ(other[2].step, 0);
  EXPECT_EQ(other[2].values[0].tag, "bleu");
}

TEST(TensorBoard, OneFilePerTagAcrossProgressBars) {
  // fairseq keeps one SummaryWriter per tag for the run; a bar per epoch must not start new files.
  testing::TempDir dir;
  ProgressOptions o;
  o.format = LogFormat::none;
  o.sink = [](std::string_view, std::string_view) {};
  o.tensorboard_logdir = dir.path();
  for (int epoch = 1; epoch <= 3; ++epoch) {
    o.epoch = epoch;
    make_progress_bar(o)->print({{"loss", 1.0 / epoch, 3}, {"num_updates", 10.0 * epoch, 0}}, "valid");
  }
  auto events = read_events(event_file(dir.path() + "/valid"));
  ASSERT_EQ(events.size(), 4u);
  for (int epoch = 1; epoch <= 3; ++epoch) {
    EXPECT_EQ(events[epoch].step, 10 * epoch);
    EXPECT_EQ(events[epoch].values[0].value, static_cast<float>(1.0 / epoch));
  }
}

TEST(TensorBoard, OffByDefault) {
  testing::TempDir dir;
  ProgressOptions o;
  o.format = LogFormat::none;
  o.sink = [](std::string_view, std::string_view) {};
  fs::path cwd = fs::current_path();
  fs::current_path(dir.path());  // where a relative DIR/<tag> would go
  make_progress_bar(o)->print({{"loss", 1, 3}, {"num_updates", 1, 0}}, "train");
  fs::current_path(cwd);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

}  // namespace
}  // namespace fairseq_cpp::core
