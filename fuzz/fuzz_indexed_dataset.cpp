// fairseq's mmap .idx/.bin reader on real files. Input: a 4-byte little-endian length L, then the
// .idx's L bytes (fewer when the input ends first), then the .bin's bytes.
#include <algorithm>
#include <string>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/indexed_dataset.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fairseq_cpp;
  if (size < 4) return 0;
  const size_t idx_size = std::min<size_t>(size - 4, data[0] | data[1] << 8 | data[2] << 16 | size_t{data[3]} << 24);
  const std::string prefix = fuzz::scratch_dir() + "/train.en-de.en";
  fuzz::write_file(data::index_file_path(prefix), fuzz::as_text(data + 4, idx_size));
  fuzz::write_file(data::data_file_path(prefix), fuzz::as_text(data + 4 + idx_size, size - 4 - idx_size));
  try {
    data::IndexedDataset dataset(prefix);
    int64_t total = 0;
    for (int64_t n : dataset.lengths()) total += n;
    for (size_t i = 0; i < dataset.size(); ++i) {
      if (dataset.tokens(i).size() != static_cast<size_t>(dataset.length(i))) fuzz::finding("a sentence's length");
    }
    dataset.max_value();
    (void)total;
  } catch (const DataError& e) {
    fuzz::check_one_line(e);
  }
  return 0;
}
