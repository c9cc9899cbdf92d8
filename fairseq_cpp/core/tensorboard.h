#pragma once
// TensorBoard scalars (fairseq's --tensorboard-logdir), written in the TFRecord event format that
// `tensorboard` reads: one event file per writer, each record
//   uint64 length (little endian) | masked CRC-32C of those 8 bytes | data | masked CRC-32C of data
// where data is a serialized tensorflow.Event, encoded here by hand:
//   Event{ double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary{ repeated Value value = 1; }  Value{ string tag = 1; float simple_value = 2; }
// Written without a library on purpose: Debian packages no TensorBoard writer for C++, and two
// messages of a few fields do not justify depending on protobuf and TensorFlow's .proto files.
//
//   core::EventWriter writer("runs/train");       // runs/train/events.out.tfevents.1700000000.host.4242.0
//   writer.add_scalar("loss", 4.2, 100);
//   writer.flush();

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fairseq_cpp::core {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): crc32c("123456789") = 0xE3069283.
uint32_t crc32c(std::string_view data);
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8, crc = crc32c(data).
uint32_t masked_crc32c(std::string_view data);

struct Scalar {
  std::string tag;
  float value = 0;
};

namespace detail {
// A serialized tensorflow.Event. Zero `step`, empty `file_version` and no `scalars` are left out,
// as protobuf leaves out proto3 defaults.
std::string event_bytes(double wall_time, int64_t step, std::string_view file_version,
                        const std::vector<Scalar>& scalars);
// `data` framed as one TFRecord.
std::string tf_record(std::string_view data);
}  // namespace detail

// Appends scalar events to a new event file in `dir` (made with its parents), named as PyTorch's
// SummaryWriter names it: events.out.tfevents.<10-digit unix seconds>.<hostname>.<pid>.<n>, n
// counting the writers of this process (two in one second would otherwise share a name). The
// first record carries file_version "brain.Event:2". Errors are OperationalError naming the file.
class EventWriter {
 public:
  explicit EventWriter(const std::string& dir);
  const std::string& path() const { return path_; }
  // One event with one value, stamped with the wall clock (seconds since the epoch).
  void add_scalar(std::string_view tag, double value, int64_t step);
  // Pushes the buffered events to the file, so that a killed run keeps what it logged.
  void flush();

 private:
  void write_record(std::string_view data);

  std::string path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_{nullptr, std::fclose};
};

// The writer for `logdir`/`tag`, made on first use and kept for the life of the process (one
// event file per tag per run, as fairseq's module-level SummaryWriters). Thread-safe.
EventWriter& tensorboard_writer(const std::string& logdir, const std::string& tag);

}  // namespace fairseq_cpp::core
