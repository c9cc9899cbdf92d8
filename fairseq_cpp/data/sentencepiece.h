#pragma once
// SentencePiece for programs that also load LibTorch: the model lives in libfsq_spm.so, loaded
// with dlopen(RTLD_LOCAL | RTLD_DEEPBIND) so its protobuf never meets LibTorch's (LIBTORCH.md,
// trap 3). Decoding needs no SentencePiece at all.
//
//   auto spm = SentencePiece::load("spm8k.model");
//   spm.encode_pieces("Ein Mann.")       // "▁Ein ▁Mann ."
//   decode_pieces("▁Ein ▁Mann .")        // "Ein Mann."

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fairseq_cpp::data {

struct SpmLibrary;

class SentencePiece {
 public:
  // Loads the model; throws UserError naming the file when it cannot be read, OperationalError
  // when libfsq_spm.so cannot be found or loaded.
  static SentencePiece load(const std::string& model_path);
  ~SentencePiece();
  SentencePiece(SentencePiece&& other) noexcept;
  SentencePiece& operator=(SentencePiece&& other) noexcept;
  SentencePiece(const SentencePiece&) = delete;
  SentencePiece& operator=(const SentencePiece&) = delete;

  // The pieces of `text` joined by single spaces, as `spm_encode --output_format=piece` prints them.
  // Thread-safe.
  std::string encode_pieces(std::string_view text) const;
  // The same, appended to `out`.
  void encode_pieces_into(std::string_view text, std::string& out) const;
  // The piece ids of `text`, as `spm_encode --output_format=id`. Thread-safe.
  std::vector<int> encode_ids(std::string_view text) const;
  int vocab_size() const;
  const std::string& model_path() const { return model_path_; }

 private:
  SentencePiece() = default;
  const SpmLibrary* library_ = nullptr;
  void* model_ = nullptr;
  std::string model_path_;
};

// Lines encoded by encode_pieces, kept back to back in one buffer per worker: millions of small
// strings fragmented glibc's heap, and SentencePiece's own allocations then crawled (3.3x the
// time of spm_encode at 4.5M sentence pairs, issue 22).
struct EncodedLines {
  std::vector<std::string> buffers;     // the pieces' text
  std::vector<std::string_view> lines;  // one per input line, into `buffers`
};
// Encodes `lines` in `workers` threads.
EncodedLines encode_lines(const SentencePiece& spm, const std::vector<std::string_view>& lines, int workers);

// Options of SentencePiece training (spm_train's flags of the same names).
struct SpmTrainOptions {
  std::vector<std::string> inputs;     // raw text files, one sentence per line
  std::string model_prefix;            // writes <model_prefix>.model and <model_prefix>.vocab
  int64_t vocab_size = 8000;           // pieces in the model
  std::string model_type = "unigram";  // unigram | bpe | char | word
  double character_coverage = 1.0;     // share of characters covered by the model
  int64_t input_sentence_size = 0;     // > 0: train on a sample of this many sentences (seeded)
  uint32_t random_seed = 1;            // the sample's seed (SentencePiece's default is the clock)
};

// Trains a model (spm_train). Throws UserError with SentencePiece's reason on failure.
void train_sentencepiece(const SpmTrainOptions& options);

// Pieces back to text: "▁Ein ▁Mann ." => "Ein Mann." (fairseq's --remove-bpe sentencepiece:
// drop spaces, U+2581 becomes a space, strip).
std::string decode_pieces(std::string_view pieces);

// Where libfsq_spm.so is: beside the running program, else in the build directory, else
// $FSQ_SPM_LIBRARY. Throws OperationalError listing the places tried.
std::string spm_library_path();

}  // namespace fairseq_cpp::data
