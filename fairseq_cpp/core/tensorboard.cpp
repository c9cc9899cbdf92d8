#include "fairseq_cpp/core/tensorboard.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::core {
namespace {

constexpr uint32_t kCastagnoli = 0x82F63B78;  // reflected
constexpr uint32_t kMaskDelta = 0xa282ead8;
constexpr std::string_view kFileVersion = "brain.Event:2";

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kCastagnoli : 0);
    table[i] = crc;
  }
  return table;
}

uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

void put_fixed32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

void put_fixed64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

// Protobuf wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  static const std::array<uint32_t, 256> kTable = make_crc_table();
  uint32_t crc = 0xFFFFFFFF;
  for (unsigned char c : data) crc = kTable[(crc ^ c) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFF;
}

uint32_t masked_crc32c(std::string_view data) { return mask(crc32c(data)); }

namespace detail {

std::string event_bytes(double wall_time, int64_t step, std::string_view file_version,
                        const std::vector<Scalar>& scalars) {
  std::string event;
  uint64_t wall_bits;
  static_assert(sizeof(wall_bits) == sizeof(wall_time));
  std::memcpy(&wall_bits, &wall_time, sizeof(wall_bits));
  put_key(event, 1, 1);
  put_fixed64(event, wall_bits);
  if (step != 0) {
    put_key(event, 2, 0);
    put_varint(event, static_cast<uint64_t>(step));  // negative: ten bytes, two's complement
  }
  if (!file_version.empty()) put_bytes(event, 3, file_version);
  if (!scalars.empty()) {
    std::string summary;
    for (const Scalar& s : scalars) {
      std::string value;
      put_bytes(value, 1, s.tag);
      uint32_t value_bits;
      static_assert(sizeof(value_bits) == sizeof(s.value));
      std::memcpy(&value_bits, &s.value, sizeof(value_bits));
      put_key(value, 2, 5);
      put_fixed32(value, value_bits);
      put_bytes(summary, 1, value);
    }
    put_bytes(event, 5, summary);
  }
  return event;
}

std::string tf_record(std::string_view data) {
  std::string record;
  record.reserve(data.size() + 16);
  put_fixed64(record, data.size());
  put_fixed32(record, masked_crc32c(record));
  record += data;
  put_fixed32(record, masked_crc32c(data));
  return record;
}

}  // namespace detail

EventWriter::EventWriter(const std::string& dir) {
  static std::atomic<int> next_id{0};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) raise<OperationalError>("cannot create the TensorBoard directory {}: {}", dir, ec.message());
  double now = unix_seconds();
  path_ = fmt::format("{}/events.out.tfevents.{:010d}.{}.{}.{}", dir, static_cast<int64_t>(now), host_name(),
                      ::getpid(), next_id++);
  file_.reset(std::fopen(path_.c_str(), "wb"));
  if (!file_) raise<OperationalError>("cannot write {}: {}", path_, std::strerror(errno));
  write_record(detail::event_bytes(now, 0, kFileVersion, {}));
  flush();
}

void EventWriter::add_scalar(std::string_view tag, double value, int64_t step) {
  write_record(detail::event_bytes(unix_seconds(), step, {}, {{std::string(tag), static_cast<float>(value)}}));
}

void EventWriter::flush() {
  if (std::fflush(file_.get()) != 0) raise<OperationalError>("cannot write {}: {}", path_, std::strerror(errno));
}

void EventWriter::write_record(std::string_view data) {
  std::string record = detail::tf_record(data);
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size())
    raise<OperationalError>("cannot write {}: {}", path_, std::strerror(errno));
}

EventWriter& tensorboard_writer(const std::string& logdir, const std::string& tag) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::string>, std::unique_ptr<EventWriter>> writers;
  std::lock_guard<std::mutex> lock(mutex);
  auto& writer = writers[{logdir, tag}];
  if (!writer) writer = std::make_unique<EventWriter>(tag.empty() ? logdir : logdir + "/" + tag);
  return *writer;
}

}  // namespace fairseq_cpp::core
