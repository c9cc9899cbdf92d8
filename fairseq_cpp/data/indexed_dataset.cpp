#include "fairseq_cpp/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <type_traits>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderSize = 9 + 8 + 1 + 8;

template <typename T>
T load(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// Returns n, or the position of the first element that has no int64 value (a float64 NaN,
// infinity or magnitude of 2^63 and more).
template <typename T>
size_t convert(const void* src, size_t n, int64_t* out) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (size_t k = 0; k < n; ++k) {
    const T v = load<T>(p + k * sizeof(T));
    if constexpr (std::is_floating_point_v<T>) {
      if (!(v >= -0x1p63 && v < 0x1p63)) return k;
    }
    out[k] = static_cast<int64_t>(v);
  }
  return n;
}

size_t convert_any(DType dtype, const void* src, size_t n, int64_t* out) {
  switch (dtype) {
    case DType::uint8:
      return convert<uint8_t>(src, n, out);
    case DType::int8:
      return convert<int8_t>(src, n, out);
    case DType::int16:
      return convert<int16_t>(src, n, out);
    case DType::int32:
      return convert<int32_t>(src, n, out);
    case DType::int64:
      return convert<int64_t>(src, n, out);
    case DType::float64:
    case DType::double_:
      return convert<double>(src, n, out);
    case DType::uint16:
      return convert<uint16_t>(src, n, out);
    case DType::uint32:
      return convert<uint32_t>(src, n, out);
    case DType::uint64:
      return convert<uint64_t>(src, n, out);
  }
  raise<OperationalError>("indexed dataset: no conversion for dtype code {}", static_cast<int>(dtype));
}

template <typename T>
void narrow(const int64_t* ids, size_t n, std::vector<uint8_t>& out) {
  size_t at = out.size();
  out.resize(at + n * sizeof(T));
  for (size_t k = 0; k < n; ++k) {
    T v = static_cast<T>(ids[k]);
    std::memcpy(out.data() + at + k * sizeof(T), &v, sizeof(T));
  }
}

}  // namespace

size_t dtype_size(uint8_t code) {
  static const size_t sizes[] = {0, 1, 1, 2, 4, 8, 8, 8, 2, 4, 8};
  return code <= 10 ? sizes[code] : 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::uint8:
      return "uint8";
    case DType::int8:
      return "int8";
    case DType::int16:
      return "int16";
    case DType::int32:
      return "int32";
    case DType::int64:
      return "int64";
    case DType::float64:
      return "float64";
    case DType::double_:
      return "double";
    case DType::uint16:
      return "uint16";
    case DType::uint32:
      return "uint32";
    case DType::uint64:
      return "uint64";
  }
  return "?";
}

DType best_fitting_dtype(int64_t vocab_size) { return vocab_size < 65500 ? DType::uint16 : DType::int32; }

MappedFile::MappedFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) raise<DataError>("cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    raise<DataError>("cannot stat {}: {}", path, std::strerror(err));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      raise<OperationalError>("cannot map {}: {}", path, std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx_path = index_file_path(prefix);
  const std::string bin_path = data_file_path(prefix);
  idx_ = MappedFile(idx_path);
  bin_ = MappedFile(bin_path);
  const uint8_t* p = idx_.data();
  if (idx_.size() < kHeaderSize) {
    raise<DataError>("{}: truncated index: {} bytes, but the header alone has {} (expected a fairseq mmap index)",
                     idx_path, idx_.size(), kHeaderSize);
  }
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0) {
    raise<DataError>(
        "{}: not a fairseq mmap index: expected magic \"MMIDIDX\\0\\0\", found other bytes (made with "
        "--dataset-impl mmap?)",
        idx_path);
  }
  auto version = load<uint64_t>(p + 9);
  if (version != 1) raise<DataError>("{}: field version: expected 1, found {}", idx_path, version);
  uint8_t code = p[17];
  if (code < 1 || code > 10) raise<DataError>("{}: field dtype: expected a code 1-10, found {}", idx_path, code);
  dtype_ = static_cast<DType>(code);
  auto count = load<uint64_t>(p + 18);
  const uint64_t body = idx_.size() - kHeaderSize;
  if (count > body / 12 || count * 12 != body) {
    raise<DataError>(
        "{}: {} index: field N = {} needs {} bytes of sizes and pointers after the header, found {}", idx_path,
        count > body / 12 ? "truncated" : "malformed", count,
        count > std::numeric_limits<uint64_t>::max() / 12 ? std::string("too many") : std::to_string(count * 12), body);
  }
  count_ = static_cast<size_t>(count);
  sizes_ = p + kHeaderSize;
  pointers_ = p + kHeaderSize + 4 * count_;
  const size_t esize = dtype_size(code);
  const auto bin_size = static_cast<int64_t>(bin_.size());
  int64_t next = 0;  // where sentence i starts if the sentences lie back to back
  for (size_t i = 0; i < count_; ++i) {
    int32_t size = length(i);
    int64_t ptr = pointer(i);
    if (size < 0) raise<DataError>("{}: entry {}: size {} is negative", idx_path, i, size);
    if (ptr < 0 || ptr > bin_size || static_cast<int64_t>(size) * static_cast<int64_t>(esize) > bin_size - ptr) {
      // The sentence's byte count, not its end: a pointer near 2^63 would overflow the sum.
      raise<DataError>("{}: entry {} points past the end of {}: {} bytes at byte {}, but the file has {} bytes",
                       idx_path, i, bin_path, static_cast<int64_t>(size) * static_cast<int64_t>(esize), ptr, bin_size);
    }
    back_to_back_ = back_to_back_ && ptr == next;
    next = ptr + static_cast<int64_t>(size) * static_cast<int64_t>(esize);
    elements_ += static_cast<size_t>(size);
  }
}

namespace {

template <typename T>
std::pair<int64_t, int64_t> range_of(const uint8_t* data, size_t n) {
  // The .bin is mapped at a page boundary and sentences lie back to back from 0: aligned elements.
  const T* p = reinterpret_cast<const T*>(data);
  T lo = std::numeric_limits<T>::max();
  T hi = std::numeric_limits<T>::lowest();
  for (size_t k = 0; k < n; ++k) {
    lo = std::min(lo, p[k]);
    hi = std::max(hi, p[k]);
  }
  if constexpr (std::is_same_v<T, uint64_t>) {
    constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (hi > kMax) return {-1, std::numeric_limits<int64_t>::max()};
  }
  return {static_cast<int64_t>(lo), static_cast<int64_t>(hi)};
}

}  // namespace

std::optional<std::pair<int64_t, int64_t>> IndexedDataset::integer_range() const {
  if (!back_to_back_ || elements_ == 0) return std::nullopt;
  const uint8_t* p = bin_.data();
  switch (dtype_) {
    case DType::uint8:
      return range_of<uint8_t>(p, elements_);
    case DType::int8:
      return range_of<int8_t>(p, elements_);
    case DType::int16:
      return range_of<int16_t>(p, elements_);
    case DType::int32:
      return range_of<int32_t>(p, elements_);
    case DType::int64:
      return range_of<int64_t>(p, elements_);
    case DType::uint16:
      return range_of<uint16_t>(p, elements_);
    case DType::uint32:
      return range_of<uint32_t>(p, elements_);
    case DType::uint64:
      return range_of<uint64_t>(p, elements_);
    case DType::float64:
    case DType::double_:
      return std::nullopt;
  }
  return std::nullopt;
}

void IndexedDataset::read(size_t i, int64_t* out) const {
  const auto n = static_cast<size_t>(length(i));
  if (size_t bad = convert_any(dtype_, raw(i), n, out); bad != n) {
    double value;
    std::memcpy(&value, static_cast<const uint8_t*>(raw(i)) + bad * sizeof(double), sizeof(double));
    raise<DataError>("{}: sentence {}, element {}: expected a token id, found {} ({} data)", data_file_path(prefix_), i,
                     bad, value, dtype_name(dtype_));
  }
}

std::vector<int64_t> IndexedDataset::lengths() const {
  std::vector<int64_t> out(count_);
  for (size_t i = 0; i < count_; ++i) out[i] = length(i);
  return out;
}

std::vector<int64_t> IndexedDataset::tokens(size_t i) const {
  std::vector<int64_t> out(static_cast<size_t>(length(i)));
  read(i, out.data());
  return out;
}

int64_t IndexedDataset::max_value() const {
  int64_t best = -1;
  std::vector<int64_t> buffer;
  for (size_t i = 0; i < count_; ++i) {
    buffer.resize(static_cast<size_t>(length(i)));
    read(i, buffer.data());
    for (int64_t v : buffer) best = std::max(best, v);
  }
  return best;
}

IndexedDatasetBuilder::IndexedDatasetBuilder(const std::string& prefix, DType dtype)
    : prefix_(prefix), dtype_(dtype), bin_(std::make_unique<AtomicFile>(data_file_path(prefix))) {}

void IndexedDatasetBuilder::add_item(const int64_t* ids, size_t n) {
  std::vector<uint8_t> bytes;
  switch (dtype_) {
    case DType::uint8:
      narrow<uint8_t>(ids, n, bytes);
      break;
    case DType::int8:
      narrow<int8_t>(ids, n, bytes);
      break;
    case DType::int16:
      narrow<int16_t>(ids, n, bytes);
      break;
    case DType::int32:
      narrow<int32_t>(ids, n, bytes);
      break;
    case DType::int64:
      narrow<int64_t>(ids, n, bytes);
      break;
    case DType::float64:
    case DType::double_:
      narrow<double>(ids, n, bytes);
      break;
    case DType::uint16:
      narrow<uint16_t>(ids, n, bytes);
      break;
    case DType::uint32:
      narrow<uint32_t>(ids, n, bytes);
      break;
    case DType::uint64:
      narrow<uint64_t>(ids, n, bytes);
      break;
  }
  bin_->write(bytes.data(), bytes.size());
  sizes_.push_back(static_cast<int32_t>(n));
}

void IndexedDatasetBuilder::add_raw(const void* data, const std::vector<int32_t>& sizes) {
  size_t elements = 0;
  for (int32_t s : sizes) elements += static_cast<size_t>(s);
  bin_->write(data, elements * dtype_size(static_cast<uint8_t>(dtype_)));
  sizes_.insert(sizes_.end(), sizes.begin(), sizes.end());
}

void IndexedDatasetBuilder::finalize() {
  const uint64_t count = sizes_.size();
  const size_t esize = dtype_size(static_cast<uint8_t>(dtype_));
  std::vector<uint8_t> index(kHeaderSize + count * 12);
  uint8_t* p = index.data();
  std::memcpy(p, kMagic, sizeof kMagic);
  const uint64_t version = 1;
  std::memcpy(p + 9, &version, 8);
  p[17] = static_cast<uint8_t>(dtype_);
  std::memcpy(p + 18, &count, 8);
  std::memcpy(p + kHeaderSize, sizes_.data(), count * 4);
  int64_t address = 0;
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(p + kHeaderSize + count * 4 + i * 8, &address, 8);
    address += static_cast<int64_t>(sizes_[i]) * static_cast<int64_t>(esize);
  }
  AtomicFile idx(index_file_path(prefix_));
  idx.write(index.data(), index.size());
  bin_->commit();
  idx.commit();
  bin_.reset();
}

}  // namespace fairseq_cpp::data
