// The checkpoint loader on a whole file: the zip layout, CRC-32 and digest checks (integrity.h)
// refuse almost every mutation, so this target fuzzes those checks; fuzz_checkpoint_records fuzzes
// what lies behind them. Input: the file's bytes.
#include "fuzz/checkpoint_use.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fairseq_cpp::fuzz::scratch_dir() + "/checkpoint.pt";
  fairseq_cpp::fuzz::write_file(path, fairseq_cpp::fuzz::as_text(data, size));
  fairseq_cpp::fuzz::load_and_use(path);
  return 0;
}
