// fairseq's dict.txt reader. Input: the file's bytes.
#include <string>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/dictionary.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fairseq_cpp;
  const std::string path = fuzz::scratch_dir() + "/dict.txt";
  fuzz::write_file(path, fuzz::as_text(data, size));
  try {
    data::Dictionary d = data::Dictionary::load(path);
    // What preprocess and the programs do with a loaded dictionary.
    for (int64_t id = 0; id < d.size(); ++id)
      if (d.index(d.symbol(id)) < 0) fuzz::finding("a symbol without an id");
    d.finalize(/*threshold=*/1, /*nwords=*/-1, /*padding_factor=*/8);
    d.to_text();
  } catch (const DataError& e) {
    fuzz::check_one_line(e);
  }
  return 0;
}
