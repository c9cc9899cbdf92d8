#pragma once
// What a program does with a checkpoint file, for the two checkpoint fuzz targets: load it, take
// its model entry and read every tensor whole, parse its config. Anything but a one-line
// fairseq_cpp::Error is a finding, and so is a tensor that reads past its storage.

#include <sanitizer/asan_interface.h>

#include <string>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/core/errors.h"
#include "fuzz/fuzz_util.h"

namespace fairseq_cpp::fuzz {

// Reads the bytes that `t` covers, in sanitized code: the first and the last of its elements.
inline void read_whole(const at::Tensor& t, const std::string& name) {
  if (!t.defined() || t.layout() != at::kStrided || t.numel() == 0) return;
  const int64_t item = static_cast<int64_t>(t.element_size());
  int64_t lo = t.storage_offset(), hi = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) (t.stride(d) < 0 ? lo : hi) += (t.size(d) - 1) * t.stride(d);
  const auto* base = static_cast<const char*>(t.storage().data());
  const int64_t bytes = static_cast<int64_t>(t.storage().nbytes());
  const std::string what = "tensor " + name + " reads elements " + std::to_string(lo) + ".." + std::to_string(hi) +
                           " of a storage of " + std::to_string(bytes) + " bytes";
  if (lo < 0 || (hi + 1) * item > bytes) finding(what);
  // A storage is its record's bytes: one larger than any input is not backed by them, and ASan
  // knows the buffer's true end.
  if ((hi - lo + 1) * item > (int64_t{1} << 30)) finding(what + ", more than any record holds");
  if (const void* bad = __asan_region_is_poisoned(const_cast<char*>(base) + lo * item,
                                                  static_cast<size_t>((hi - lo + 1) * item)))
    finding(what + ": byte " + std::to_string(static_cast<const char*>(bad) - base) + " lies outside its buffer");
}

inline void load_and_use(const std::string& path) {
  try {
    checkpoint::StateDict state = checkpoint::load_file(path);
    for (const auto& item : checkpoint::model_entry(state, path)) read_whole(item.value(), item.key());
    checkpoint::config_entry(state, path);
  } catch (const Error& e) {
    check_one_line(e);
    if (std::getenv("FSQ_FUZZ_VERBOSE") != nullptr) std::fprintf(stderr, "fuzz: refused: %s\n", e.what());
  }
}

}  // namespace fairseq_cpp::fuzz
