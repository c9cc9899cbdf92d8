#pragma once
// A checkpoint's bytes checked before LibTorch reads any of them. LibTorch's zip reader (miniz
// built with its CRC checks off) hands a flipped byte on as a wrong weight; here it is refused.
//
// A checkpoint is a zip as torch.save and fairseq-cpp write it: stored (uncompressed) records,
// each a local header, its bytes and a data descriptor, tiled from the start of the file, then
// the central directory, the zip64 end records and the end record. verify_file checks:
//   - every record's CRC-32 against the one stored in the zip;
//   - the layout: local headers and data descriptors agree with the central directory, PyTorch's
//     alignment padding is its 'Z' bytes, the parts tile the file with nothing between them;
//   - fairseq-cpp's digest when the zip comment carries one ("fairseq-cpp sha256:<hex>", written
//     by save_file and tools/fairseq-import): the SHA-256 of every byte before the comment's length.
// A file that fails gets a DataError of one line naming the file and the record or field.
//
//   DigestWriter w(write_to_file);      // wraps the writer LibTorch's zip writer calls
//   ... PyTorchStreamWriter(w) ... writeEndOfFile();
//   w.finish();                         // appends the comment with the digest

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX

namespace fairseq_cpp::checkpoint {

inline constexpr const char* kDigestPrefix = "fairseq-cpp sha256:";

// Throws DataError (one line) when `path` is not an intact checkpoint zip. Returns the size of
// each record by name ("archive/data/0" -> 96).
std::map<std::string, uint64_t> verify_file(const std::string& path);

// `text` on one line, for messages that quote names from a file: line breaks and other control
// characters become escapes ("a\nb" => "a\\nb", "\x01" => "\\x01").
std::string one_line(std::string_view text);

// Throws DataError (one line) when the pickle `data` (a checkpoint's data.pkl) has an opcode
// whose argument runs past its end (LibTorch's unpickler would allocate the length it claims), or
// one that takes more values than the stack holds, or a MARK that is not there (it would pop an
// empty stack).
void check_pickle(const std::string& path, const unsigned char* data, size_t size);

// Passes a zip's bytes on to `sink`, hashing them, and finish() ends the file with the digest as
// the zip comment. The last two bytes it is given must be the end record's comment length (0).
class DigestWriter {
 public:
  explicit DigestWriter(std::function<void(const char*, size_t)> sink);
  ~DigestWriter();
  DigestWriter(const DigestWriter&) = delete;
  DigestWriter& operator=(const DigestWriter&) = delete;

  void write(const char* data, size_t size);
  void finish();

 private:
  std::function<void(const char*, size_t)> sink_;
  evp_md_ctx_st* sha_;
  std::string held_;  // the last two bytes given, not yet passed on
};

}  // namespace fairseq_cpp::checkpoint
