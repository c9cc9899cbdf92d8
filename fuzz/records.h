#pragma once
// The records of a checkpoint, as fuzz_checkpoint_records takes them: the pickle (data.pkl), then
// the tensors' storages (data/0, data/1, ...), each record ended by kRecordEnd.

#include <string>
#include <string_view>
#include <vector>

#include <caffe2/serialize/inline_container.h>

#include "fairseq_cpp/checkpoint/integrity.h"
#include "fuzz/fuzz_util.h"

namespace fairseq_cpp::fuzz {

inline constexpr std::string_view kRecordEnd = "\n@@record@@\n";
inline constexpr size_t kMaxRecords = 16;

inline std::string record_name(size_t i) { return i == 0 ? "data.pkl" : "data/" + std::to_string(i - 1); }

inline std::vector<std::string_view> split_records(std::string_view bytes) {
  std::vector<std::string_view> records;
  while (records.size() + 1 < kMaxRecords) {
    size_t end = bytes.find(kRecordEnd);
    if (end == std::string_view::npos) break;
    records.push_back(bytes.substr(0, end));
    bytes.remove_prefix(end + kRecordEnd.size());
  }
  records.push_back(bytes);
  return records;
}

// Writes `records` to `path` as an intact checkpoint zip: LibTorch's zip writer (CRC-32s) and
// fairseq-cpp's digest, as checkpoint::save_file writes them.
inline void write_checkpoint_zip(const std::string& path, const std::vector<std::string_view>& records) {
  std::string bytes;
  checkpoint::DigestWriter digest([&](const char* data, size_t size) { bytes.append(data, size); });
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
      digest.write(static_cast<const char*>(data), size);
      return size;
    });
    for (size_t i = 0; i < records.size(); ++i)
      writer.writeRecord(record_name(i), records[i].data(), records[i].size());
    writer.writeEndOfFile();
  }
  digest.finish();
  write_file(path, bytes);
}

}  // namespace fairseq_cpp::fuzz
