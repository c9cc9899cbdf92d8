#pragma once
// fairseq's MMapIndexedDataset: `<prefix>.bin` holds the token ids of every sentence back to back,
// `<prefix>.idx` the header and the index:
//   "MMIDIDX\0\0" | uint64 version = 1 | uint8 dtype code | uint64 N | int32 sizes[N] | int64 pointers[N]
// (pointers are byte offsets into .bin). The reader maps both files (zero copy); the builder
// writes both through temporary files.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fairseq_cpp/data/file_util.h"

namespace fairseq_cpp::data {

// fairseq's dtype codes (indexed_dataset.dtypes; 6 and 7 are both float64).
enum class DType : uint8_t {
  uint8 = 1,
  int8 = 2,
  int16 = 3,
  int32 = 4,
  int64 = 5,
  float64 = 6,
  double_ = 7,
  uint16 = 8,
  uint32 = 9,
  uint64 = 10,
};
// Bytes per element; 0 for a code that is not a dtype.
size_t dtype_size(uint8_t code);
const char* dtype_name(DType dtype);
// fairseq's best fitting token dtype: uint16 for fewer than 65,500 symbols, else int32.
DType best_fitting_dtype(int64_t vocab_size);

inline std::string index_file_path(const std::string& prefix) { return prefix + ".idx"; }
inline std::string data_file_path(const std::string& prefix) { return prefix + ".bin"; }

// A read-only memory map of a whole file (empty files map to nothing).
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws DataError naming the file
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class IndexedDataset {
 public:
  // Maps `<prefix>.idx` and `<prefix>.bin` and checks them whole: magic, version, dtype code,
  // the index length, and every entry inside the .bin. Throws DataError naming the file and field.
  explicit IndexedDataset(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  size_t size() const { return count_; }
  DType dtype() const { return dtype_; }
  // Elements of sentence `i` (including its </s>). The arrays sit at unaligned offsets (26 + ...),
  // hence the memcpy loads.
  int32_t length(size_t i) const {
    int32_t v;
    std::memcpy(&v, sizes_ + 4 * i, 4);
    return v;
  }
  int64_t pointer(size_t i) const {
    int64_t v;
    std::memcpy(&v, pointers_ + 8 * i, 8);
    return v;
  }
  // Every sentence's length, as int64.
  std::vector<int64_t> lengths() const;
  // The raw elements of sentence `i`, inside the mapped .bin.
  const void* raw(size_t i) const { return bin_.data() + pointer(i); }
  // Sentence `i` converted to int64 (fairseq reads every dtype as int64), written to `out`.
  void read(size_t i, int64_t* out) const;
  std::vector<int64_t> tokens(size_t i) const;
  // The largest value in the whole .bin (converted to int64); -1 when there is none.
  int64_t max_value() const;
  // The smallest and the largest token of all sentences, read in one pass over the .bin when the
  // sentences lie back to back from its start (as every builder writes them) and the dtype is an
  // integer; nullopt otherwise, or without sentences. uint64 values past INT64_MAX give -1 as the
  // smallest (they have no int64 value).
  std::optional<std::pair<int64_t, int64_t>> integer_range() const;

 private:
  std::string prefix_;
  MappedFile idx_;
  MappedFile bin_;
  DType dtype_ = DType::int64;
  size_t count_ = 0;
  const uint8_t* sizes_ = nullptr;     // int32[count_] inside idx_
  const uint8_t* pointers_ = nullptr;  // int64[count_] inside idx_
  bool back_to_back_ = true;           // sentence i + 1 starts where sentence i ends, the first at 0
  size_t elements_ = 0;                // elements of all sentences together
};

// Writes a data-bin pair: items appended in order, then finalize() writes the index and renames
// both files into place. Destroyed without finalize(), it leaves nothing behind.
class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(const std::string& prefix, DType dtype);
  IndexedDatasetBuilder(const IndexedDatasetBuilder&) = delete;
  IndexedDatasetBuilder& operator=(const IndexedDatasetBuilder&) = delete;

  // One sentence of `ids` converted to the builder's dtype.
  void add_item(const int64_t* ids, size_t n);
  // Many sentences already in the builder's dtype: `data` holds sum(sizes) elements.
  void add_raw(const void* data, const std::vector<int32_t>& sizes);
  void finalize();

 private:
  std::string prefix_;
  DType dtype_;
  std::vector<int32_t> sizes_;
  std::unique_ptr<AtomicFile> bin_;
};

}  // namespace fairseq_cpp::data
