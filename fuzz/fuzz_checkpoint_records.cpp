// The checkpoint loader behind its integrity checks: the input's records (records.h) are written
// as an intact zip with correct CRC-32s and digest, so every mutation reaches LibTorch's
// unpickler and the checks of the loaded values.
#include "fuzz/checkpoint_use.h"
#include "fuzz/records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fairseq_cpp;
  const std::string path = fuzz::scratch_dir() + "/checkpoint.pt";
  fuzz::write_checkpoint_zip(path, fuzz::split_records(fuzz::as_text(data, size)));
  fuzz::load_and_use(path);
  return 0;
}
