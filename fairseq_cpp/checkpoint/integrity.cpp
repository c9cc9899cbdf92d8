#include "fairseq_cpp/checkpoint/integrity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::checkpoint {
namespace {

constexpr uint32_t kLocalSignature = 0x04034b50, kCentralSignature = 0x02014b50, kDescriptorSignature = 0x08074b50;
constexpr uint32_t kEndSignature = 0x06054b50, kZip64EndSignature = 0x06064b50, kZip64LocatorSignature = 0x07064b50;
constexpr uint16_t kDescriptorFlag = 0x0008;  // sizes and CRC follow the data
constexpr uint16_t kZip64ExtraId = 0x0001, kPaddingExtraId = 0x4246;  // "FB": PyTorch's alignment padding
constexpr size_t kEndSize = 22, kZip64EndSize = 56, kZip64LocatorSize = 20, kLocalSize = 30, kCentralSize = 46;

uint16_t u16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
uint32_t u32(const unsigned char* p) { return u16(p) | static_cast<uint32_t>(u16(p + 2)) << 16; }
uint64_t u64(const unsigned char* p) { return u32(p) | static_cast<uint64_t>(u32(p + 4)) << 32; }

struct Record {
  std::string name;
  uint16_t needed = 0, flags = 0, method = 0, time = 0, date = 0;
  uint32_t crc = 0;
  uint64_t size = 0, offset = 0;
  bool zip64 = false;  // sizes or offset in a zip64 extra field (8-byte sizes in the descriptor)
  uint64_t data = 0, end = 0;  // its bytes, and the end of its descriptor
};

class File {
 public:
  explicit File(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) raise<OperationalError>("cannot read {}: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) raise<OperationalError>("cannot read {}: {}", path, std::strerror(errno));
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // `n` bytes at `offset`; a range past the end is damage.
  std::vector<unsigned char> read(uint64_t offset, uint64_t n, const std::string& what) const {
    if (offset > size_ || n > size_ - offset) damaged("{} lies past the end of the file ({} bytes)", what, size_);
    std::vector<unsigned char> out(n);
    size_t done = 0;
    while (done < n) {
      ssize_t got = ::pread(fd_, out.data() + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) raise<OperationalError>("cannot read {}: {}", path_, got < 0 ? std::strerror(errno) : "end of file");
      done += static_cast<size_t>(got);
    }
    return out;
  }

  template <typename... Args>
  [[noreturn]] void damaged(fmt::format_string<Args...> format, Args&&... args) const {
    // One line, whatever bytes a record's name holds.
    raise<DataError>("{} is damaged and was not used: {}", path_,
                     one_line(fmt::format(format, std::forward<Args>(args)...)));
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The central directory's records, each checked against its local header and descriptor, and
// the position where the central directory starts.
std::vector<Record> central_directory(const File& f, uint64_t cd_offset, uint64_t cd_size, uint64_t count) {
  if (cd_size > (uint64_t{64} << 20) || count > cd_size / kCentralSize)
    f.damaged("a central directory of {} bytes for {} records", cd_size, count);
  const auto cd = f.read(cd_offset, cd_size, "the central directory");
  std::vector<Record> records;
  size_t at = 0;
  uint16_t made_by = 0, internal = 0;
  uint32_t external = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (cd.size() - at < kCentralSize || u32(&cd[at]) != kCentralSignature)
      f.damaged("central directory entry {} is not where it should be", i);
    const unsigned char* e = &cd[at];
    Record r;
    r.needed = u16(e + 6);
    r.flags = u16(e + 8);
    r.method = u16(e + 10);
    r.time = u16(e + 12);
    r.date = u16(e + 14);
    r.crc = u32(e + 16);
    uint64_t compressed = u32(e + 20);
    r.size = u32(e + 24);
    const size_t name_len = u16(e + 28), extra_len = u16(e + 30), comment_len = u16(e + 32);
    r.offset = u32(e + 42);
    if (cd.size() - at < kCentralSize + name_len + extra_len + comment_len) f.damaged("central directory entry {} is cut", i);
    r.name.assign(reinterpret_cast<const char*>(e + kCentralSize), name_len);
    // Every entry the writers make has the same version, attributes, disk and no comment.
    if (i == 0) {
      made_by = u16(e + 4);
      internal = u16(e + 36);
      external = u32(e + 38);
    }
    if (u16(e + 4) != made_by || u16(e + 36) != internal || u32(e + 38) != external || u16(e + 34) != 0 ||
        comment_len != 0)
      f.damaged("record {}: its central directory entry differs from the others", r.name);
    // A zip64 extra field holds the 32-bit fields that are 0xFFFFFFFF, in order.
    const unsigned char* x = e + kCentralSize + name_len;
    for (size_t k = 0; k < extra_len;) {
      if (extra_len - k < 4) f.damaged("record {}: a cut extra field", r.name);
      const uint16_t id = u16(x + k), len = u16(x + k + 2);
      if (extra_len - k - 4 < len || id != kZip64ExtraId) f.damaged("record {}: an unexpected extra field", r.name);
      size_t v = k + 4;
      auto take = [&](uint64_t& field) {
        if (field != 0xFFFFFFFFULL) return;
        if (v + 8 > k + 4 + len) f.damaged("record {}: a cut zip64 field", r.name);
        field = u64(x + v);
        v += 8;
      };
      take(r.size);
      take(compressed);
      take(r.offset);
      r.zip64 = true;
      k += 4 + len;
    }
    if (r.method != 0) f.damaged("record {} is compressed (method {}); torch.save stores records", r.name, r.method);
    if (compressed != r.size) f.damaged("record {}: stored size {} but size {}", r.name, compressed, r.size);
    records.push_back(std::move(r));
    at += kCentralSize + name_len + extra_len + comment_len;
  }
  if (at != cd.size()) f.damaged("{} bytes after the last central directory entry", cd.size() - at);
  return records;
}

// Checks record r's local header and data descriptor against its central directory entry; sets
// where its bytes lie and where it ends.
void check_local(const File& f, Record& r) {
  const auto h = f.read(r.offset, kLocalSize, "record " + r.name);
  if (u32(h.data()) != kLocalSignature) f.damaged("record {}: no local header at offset {}", r.name, r.offset);
  const size_t name_len = u16(&h[26]), extra_len = u16(&h[28]);
  if (u16(&h[4]) != r.needed || u16(&h[6]) != r.flags || u16(&h[8]) != r.method || u16(&h[10]) != r.time ||
      u16(&h[12]) != r.date)
    f.damaged("record {}: its local header differs from the central directory", r.name);
  const bool descriptor = (r.flags & kDescriptorFlag) != 0;
  if (descriptor ? (u32(&h[14]) != 0 || u32(&h[18]) != 0 || u32(&h[22]) != 0)
                 : (u32(&h[14]) != r.crc || (!r.zip64 && (u32(&h[18]) != r.size || u32(&h[22]) != r.size))))
    f.damaged("record {}: its local header's sizes or CRC differ from the central directory", r.name);
  const auto rest = f.read(r.offset + kLocalSize, name_len + extra_len, "record " + r.name);
  if (std::string(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(name_len)) != r.name)
    f.damaged("record {}: its local header names it differently", r.name);
  for (size_t k = name_len; k < rest.size();) {
    if (rest.size() - k < 4) f.damaged("record {}: a cut extra field in its local header", r.name);
    const uint16_t id = u16(&rest[k]), len = u16(&rest[k + 2]);
    if (rest.size() - k - 4 < len) f.damaged("record {}: a cut extra field in its local header", r.name);
    if (id == kPaddingExtraId) {
      if (!std::all_of(rest.begin() + static_cast<std::ptrdiff_t>(k + 4),
                       rest.begin() + static_cast<std::ptrdiff_t>(k + 4 + len), [](unsigned char c) { return c == 'Z'; }))
        f.damaged("record {}: its alignment padding changed", r.name);
    } else if (id != kZip64ExtraId) {
      f.damaged("record {}: an unexpected extra field in its local header", r.name);
    }
    k += 4 + len;
  }
  r.data = r.offset + kLocalSize + name_len + extra_len;
  if (r.data > f.size() || r.size > f.size() - r.data) f.damaged("record {} ends past the end of the file", r.name);
  r.end = r.data + r.size;
  if (descriptor) {
    const size_t sizes = r.zip64 ? 8 : 4;
    const auto d = f.read(r.end, 8 + 2 * sizes, "record " + r.name + "'s data descriptor");
    const uint64_t compressed = r.zip64 ? u64(&d[8]) : u32(&d[8]);
    const uint64_t size = r.zip64 ? u64(&d[8 + sizes]) : u32(&d[8 + sizes]);
    if (u32(d.data()) != kDescriptorSignature || u32(&d[4]) != r.crc || compressed != r.size || size != r.size)
      f.damaged("record {}: its data descriptor differs from the central directory", r.name);
    r.end += d.size();
  }
}

std::string hex(const unsigned char* bytes, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += fmt::format("{:02x}", bytes[i]);
  return out;
}

}  // namespace

namespace {

// Where the zip's end records say its central directory is, and the zip's comment.
struct Directory {
  uint64_t end = 0;        // where the end record starts
  uint64_t count = 0;      // records
  uint64_t cd_size = 0;    // the central directory's bytes
  uint64_t cd_offset = 0;  // where it starts
  uint64_t cd_end = 0;     // where it must end: the zip64 end record, else the end record
  std::string comment;
};

// The zip64 end record and its locator, just before the end record (LibTorch and torch.save
// always write them), read into `d`.
void read_zip64_end(const File& f, Directory& d) {
  const auto loc = f.read(d.end - kZip64LocatorSize, kZip64LocatorSize, "the zip64 locator");
  const uint64_t z = u64(&loc[8]);
  if (u32(&loc[4]) != 0 || u32(&loc[16]) != 1 || z + kZip64EndSize != d.end - kZip64LocatorSize)
    f.damaged("the zip64 locator points elsewhere");
  const auto z64 = f.read(z, kZip64EndSize, "the zip64 end record");
  if (u32(z64.data()) != kZip64EndSignature || u64(&z64[4]) != kZip64EndSize - 12 || u32(&z64[16]) != 0 ||
      u32(&z64[20]) != 0 || u64(&z64[24]) != u64(&z64[32]))
    f.damaged("the zip64 end record is not what it should be");
  auto agree = [&](uint64_t small, uint64_t big, uint64_t all_ones) { return small == all_ones || small == big; };
  if (!agree(d.count, u64(&z64[32]), 0xFFFF) || !agree(d.cd_size, u64(&z64[40]), 0xFFFFFFFF) ||
      !agree(d.cd_offset, u64(&z64[48]), 0xFFFFFFFF))
    f.damaged("the end record and the zip64 end record disagree");
  d.count = u64(&z64[32]);
  d.cd_size = u64(&z64[40]);
  d.cd_offset = u64(&z64[48]);
  d.cd_end = z;
}

// The end record: the last "PK\5\6" whose comment reaches exactly to the end of the file.
Directory read_end_records(const File& f) {
  const uint64_t tail_size = std::min<uint64_t>(f.size(), kEndSize + 0xFFFF);
  if (f.size() < kEndSize) f.damaged("{} bytes are too few for a zip", f.size());
  const auto tail = f.read(f.size() - tail_size, tail_size, "the end record");
  Directory d;
  d.end = UINT64_MAX;
  for (size_t p = tail.size() - kEndSize + 1; p-- > 0;) {
    if (u32(&tail[p]) == kEndSignature && p + kEndSize + u16(&tail[p + 20]) == tail.size()) {
      d.end = f.size() - tail_size + p;
      break;
    }
  }
  if (d.end == UINT64_MAX) f.damaged("no zip end record: the file is truncated, or not a zip");
  const unsigned char* e = &tail[d.end - (f.size() - tail_size)];
  d.comment.assign(reinterpret_cast<const char*>(e + kEndSize), u16(e + 20));
  if (u16(e + 4) != 0 || u16(e + 6) != 0 || u16(e + 8) != u16(e + 10)) f.damaged("the end record names other disks");
  d.count = u16(e + 10), d.cd_size = u32(e + 12), d.cd_offset = u32(e + 16), d.cd_end = d.end;
  if (d.end >= kZip64LocatorSize &&
      u32(f.read(d.end - kZip64LocatorSize, 4, "the zip64 locator").data()) == kZip64LocatorSignature)
    read_zip64_end(f, d);
  if (d.cd_offset > d.cd_end || d.cd_end - d.cd_offset != d.cd_size)
    f.damaged("the central directory ({} bytes at {}) does not end where the end records begin", d.cd_size,
              d.cd_offset);
  return d;
}

// The records' CRC-32s, block by block.
struct RecordCrcs {
  const std::vector<Record>& records;
  std::vector<uLong> crcs = std::vector<uLong>(records.size(), crc32_z(0L, Z_NULL, 0));
  size_t first = 0;  // the first record not yet wholly read

  // Adds the bytes of `block`, the file's from `at` on, to the CRC-32 of each record they hold.
  void add(uint64_t at, const std::vector<unsigned char>& block) {
    const uint64_t end = at + block.size();
    for (size_t i = first; i < records.size() && records[i].data < end; ++i) {
      const uint64_t from = std::max(records[i].data, at), to = std::min(records[i].data + records[i].size, end);
      if (from < to) crcs[i] = crc32_z(crcs[i], block.data() + (from - at), to - from);
      if (records[i].data + records[i].size <= end && i == first) ++first;
    }
  }
};

// One pass over the bytes up to `stop`: each record's CRC-32, and with `digest` (the comment's hex
// SHA-256) the digest of them all, on two threads (the CRCs of a block beside its digest; on one
// where no thread can be started).
void check_bytes(const File& f, const std::vector<Record>& records, uint64_t stop, const std::string& digest) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> sha(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!sha || EVP_DigestInit_ex(sha.get(), EVP_sha256(), nullptr) != 1) raise<OperationalError>("OpenSSL: no SHA-256");
  RecordCrcs crcs{records};
  constexpr uint64_t kBlock = 4 << 20;
  for (uint64_t at = 0; at < stop; at += kBlock) {
    const auto block = f.read(at, std::min(kBlock, stop - at), "the records");
    if (digest.empty()) {
      crcs.add(at, block);
      continue;
    }
    std::thread beside;
    try {
      beside = std::thread([&] { crcs.add(at, block); });
    } catch (const std::system_error&) {
      crcs.add(at, block);
    }
    const int hashed = EVP_DigestUpdate(sha.get(), block.data(), block.size());
    if (beside.joinable()) beside.join();  // before anything can throw
    if (hashed != 1) raise<OperationalError>("OpenSSL: SHA-256 failed while reading {}", f.path());
  }
  for (size_t i = 0; i < records.size(); ++i) {
    if (crcs.crcs[i] != records[i].crc)
      f.damaged("record {}: its bytes' CRC-32 is {:08x}, the zip says {:08x}", records[i].name, crcs.crcs[i],
                records[i].crc);
  }
  if (digest.empty()) return;
  unsigned char bytes[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(sha.get(), bytes, &len);
  if (digest != hex(bytes, len))
    f.damaged("its SHA-256 is not the one it was saved with (a byte changed outside the records' data)");
}

}  // namespace

std::map<std::string, uint64_t> verify_file(const std::string& path) {
  const File f(path);
  const Directory d = read_end_records(f);
  std::vector<Record> records = central_directory(f, d.cd_offset, d.cd_size, d.count);
  // The records tile the file from its first byte to the central directory.
  uint64_t next = 0;
  for (Record& r : records) {
    if (r.offset != next) f.damaged("record {} starts at {}, not right after the one before ({})", r.name, r.offset, next);
    check_local(f, r);
    next = r.end;
  }
  if (next != d.cd_offset) f.damaged("{} bytes between the last record and the central directory", d.cd_offset - next);
  // torch.save writes no comment; fairseq-cpp writes its digest there (of everything before the
  // comment's length). Anything else is damage.
  const bool has_digest = !d.comment.empty();
  if (has_digest &&
      (d.comment.rfind(kDigestPrefix, 0) != 0 || d.comment.size() != std::strlen(kDigestPrefix) + 64))
    f.damaged("its zip comment is not fairseq-cpp's digest");
  check_bytes(f, records, has_digest ? d.end + 20 : d.cd_offset,
              has_digest ? d.comment.substr(std::strlen(kDigestPrefix)) : std::string());
  std::map<std::string, uint64_t> sizes;
  for (const Record& r : records) sizes[r.name] = r.size;
  return sizes;
}

std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

// An opcode's effect on the unpickler's stack, as Python's pickle defines it: `pops` items taken
// from above the last MARK (-1: all of them, and the MARK), `needs` items that must be there
// besides (APPEND's list under its item), `pushes` items put back, `mark` whether it is MARK.
struct StackEffect {
  int pops = 0;
  int needs = 0;
  int pushes = 0;
  bool mark = false;
};

StackEffect stack_effect(unsigned char op) {
  switch (op) {
    case '(': return {0, 0, 0, true};                                   // MARK
    case '.': case '0': return {1, 0, 0};                               // STOP POP
    case '1': return {-1, 0, 0};                                        // POP_MARK
    case '2': return {0, 1, 1};                                         // DUP
    case 'q': case 'r': case 'p': case 0x94: return {0, 1, 0};         // BINPUT LONG_BINPUT PUT MEMOIZE
    case 0x85: case 'Q': case 0x98: case 0x99: return {1, 0, 1};       // TUPLE1 BINPERSID READONLY/WRITABLE_BUFFER
    case 0x86: case 0x93: case 'R': case 0x81: return {2, 0, 1};       // TUPLE2 STACK_GLOBAL REDUCE NEWOBJ
    case 0x87: case 0x92: return {3, 0, 1};                             // TUPLE3 NEWOBJ_EX
    case 'a': case 'b': return {1, 1, 0};                               // APPEND BUILD
    case 's': return {2, 1, 0};                                         // SETITEM
    case 't': case 'l': case 'd': case 'o': case 'i': case 0x91: return {-1, 0, 1};  // TUPLE LIST DICT OBJ INST FROZENSET
    case 'e': case 'u': case 0x90: return {-1, 1, 0};                   // APPENDS SETITEMS ADDITEMS
    case 0x80: case 0x95: return {};                                    // PROTO FRAME
    default: return {0, 0, 1};                                          // every other opcode pushes one value
  }
}

}  // namespace

namespace {

// The unpickler's stack as far as check_pickle follows it.
struct PickleStack {
  int64_t depth = 0;           // items on the stack, marks left out
  std::vector<int64_t> marks;  // the depth at each open MARK
};

// Applies opcode `op` (at byte `op_at`) to `stack`; a DataError when it takes more values than the
// stack holds, or needs a MARK that is not there.
void apply_stack_effect(const std::string& path, unsigned char op, size_t op_at, PickleStack& stack) {
  const StackEffect effect = stack_effect(op);
  const int64_t base = stack.marks.empty() ? 0 : stack.marks.back();  // the depth at the last MARK
  bool short_of_values = false;
  if (effect.pops < 0) {  // everything above the last MARK, and the MARK
    if (stack.marks.empty())
      raise<DataError>("{} is damaged and was not used: data.pkl: opcode 0x{:02x} at byte {} needs a MARK before it",
                       path, op, op_at);
    stack.marks.pop_back();
    short_of_values = base - (stack.marks.empty() ? 0 : stack.marks.back()) < effect.needs;
    stack.depth = base + effect.pushes;
  } else {
    short_of_values = stack.depth - base < effect.pops + effect.needs;
    stack.depth += effect.pushes - effect.pops;
  }
  if (short_of_values)
    raise<DataError>("{} is damaged and was not used: data.pkl: opcode 0x{:02x} at byte {} takes more values than "
                     "the stack holds",
                     path, op, op_at);
  if (effect.mark) stack.marks.push_back(stack.depth);
}

// The argument of opcode `op` whose bytes start at `arg` (`left` of them in the record): its
// length in bytes (more than `left` when it runs past the end), and in `lines` the arguments
// ended by '\n' that follow.
uint64_t argument_bytes(unsigned char op, const unsigned char* arg, uint64_t left, int* lines) {
  *lines = 0;
  switch (op) {
    case 'K': case 'h': case 'q': case 0x80: case 0x82:  // BININT1 BINGET BINPUT PROTO EXT1
      return 1;
    case 'M': case 0x83:  // BININT2 EXT2
      return 2;
    case 'J': case 'j': case 'r': case 0x84:  // BININT LONG_BINGET LONG_BINPUT EXT4
      return 4;
    case 'G': case 0x95:  // BINFLOAT FRAME
      return 8;
    case 'U': case 'C': case 0x8c: case 0x8a:  // SHORT_BINSTRING SHORT_BINBYTES SHORT_BINUNICODE LONG1
      return left < 1 ? 1 : 1 + uint64_t{arg[0]};
    case 'T': case 'B': case 'X': case 0x8b:  // BINSTRING BINBYTES BINUNICODE LONG4
      return left < 4 ? 4 : 4 + uint64_t{u32(arg)};
    case 0x8d: case 0x8e: case 0x96: {  // BINUNICODE8 BINBYTES8 BYTEARRAY8
      const uint64_t n = left < 8 ? 8 : u64(arg);
      return n > left - 8 ? left + 1 : 8 + n;
    }
    case 'I': case 'L': case 'F': case 'S': case 'V': case 'P': case 'g': case 'p':
      *lines = 1;
      return 0;
    case 'c': case 'i':  // GLOBAL INST: module and name
      *lines = 2;
      return 0;
    default:  // no argument; an opcode that is none is LibTorch's to refuse
      return 0;
  }
}

}  // namespace

void check_pickle(const std::string& path, const unsigned char* data, size_t size) {
  // Python's pickle opcodes (pickletools) by the argument that follows them, and their stack
  // effects: LibTorch's unpickler pops without looking (an empty stack is a wild write).
  size_t at = 0;
  uint64_t memo_entries = 0;
  PickleStack stack;
  while (at < size) {
    const size_t op_at = at;
    const unsigned char op = data[at++];
    const uint64_t left = size - at;
    apply_stack_effect(path, op, op_at, stack);
    if (op == '.') return;  // STOP: the rest is not read
    int lines = 0;
    const uint64_t skip = argument_bytes(op, data + at, left, &lines);
    if (skip > left) {
      raise<DataError>("{} is damaged and was not used: data.pkl: the argument of opcode 0x{:02x} at byte {} runs past "
                       "the end of the record",
                       path, op, op_at);
    }
    // Pickle numbers its memo entries 0, 1, 2, ... as it puts them; LibTorch reserves room up to
    // the number it reads.
    if (op == 'q' || op == 'r') {
      const uint64_t id = op == 'q' ? data[at] : u32(data + at);
      if (id > memo_entries)
        raise<DataError>("{} is damaged and was not used: data.pkl: memo entry {} at byte {} after only {} entries",
                         path, id, op_at, memo_entries);
    }
    if (op == 'q' || op == 'r' || op == 0x94) ++memo_entries;  // BINPUT LONG_BINPUT MEMOIZE
    at += skip;
    for (; lines > 0; --lines) {
      const auto* end = static_cast<const unsigned char*>(std::memchr(data + at, '\n', size - at));
      if (end == nullptr)
        raise<DataError>("{} is damaged and was not used: data.pkl: opcode 0x{:02x} at byte {} has no end of line", path,
                         op, op_at);
      at = static_cast<size_t>(end - data) + 1;
    }
  }
  raise<DataError>("{} is damaged and was not used: data.pkl ends without its STOP opcode", path);
}

DigestWriter::DigestWriter(std::function<void(const char*, size_t)> sink)
    : sink_(std::move(sink)), sha_(EVP_MD_CTX_new()) {
  if (sha_ == nullptr || EVP_DigestInit_ex(sha_, EVP_sha256(), nullptr) != 1)
    raise<OperationalError>("OpenSSL: no SHA-256");
}

DigestWriter::~DigestWriter() { EVP_MD_CTX_free(sha_); }

void DigestWriter::write(const char* data, size_t size) {
  auto pass = [&](const char* bytes, size_t n) {
    if (n == 0) return;
    EVP_DigestUpdate(sha_, bytes, n);
    sink_(bytes, n);
  };
  if (held_.size() + size <= 2) {
    held_.append(data, size);
  } else if (size >= 2) {
    pass(held_.data(), held_.size());
    pass(data, size - 2);
    held_.assign(data + size - 2, 2);
  } else {  // one byte after two held
    pass(held_.data(), 1);
    held_ = held_.substr(1) + data[0];
  }
}

void DigestWriter::finish() {
  if (held_ != std::string(2, '\0')) raise<OperationalError>("the zip writer did not end with an empty comment");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(sha_, digest, &len);
  const std::string comment = kDigestPrefix + hex(digest, len);
  const char length[2] = {static_cast<char>(comment.size() & 0xFF), static_cast<char>(comment.size() >> 8)};
  sink_(length, 2);
  sink_(comment.data(), comment.size());
  held_.clear();
}

}  // namespace fairseq_cpp::checkpoint
