#include "fairseq_cpp/data/sentencepiece.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <utility>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/binarizer.h"
#include "fairseq_cpp/data/spm_c_api.h"

#ifndef FSQ_SPM_BUILD_DIR
#define FSQ_SPM_BUILD_DIR ""
#endif

namespace fairseq_cpp::data {

namespace fs = std::filesystem;

constexpr const char* kSpmLibraryName = "libfsq_spm.so";

// The loaded libfsq_spm.so; loaded once per process and never unloaded.
struct SpmLibrary {
  fsq_spm_load_fn load = nullptr;
  fsq_spm_free_fn free = nullptr;
  fsq_spm_vocab_size_fn vocab_size = nullptr;
  fsq_spm_encode_pieces_fn encode_pieces = nullptr;
  fsq_spm_encode_ids_fn encode_ids = nullptr;
  fsq_spm_train_fn train = nullptr;
};

namespace {

const SpmLibrary& spm_library() {
  static std::once_flag once;
  static SpmLibrary library;
  std::call_once(once, [] {
    std::string path = spm_library_path();
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) raise<OperationalError>("cannot load {}: {}", path, ::dlerror());
    auto symbol = [&](const char* name) {
      void* p = ::dlsym(handle, name);
      if (p == nullptr) raise<OperationalError>("{} lacks the function {} (rebuild it)", path, name);
      return p;
    };
    library.load = reinterpret_cast<fsq_spm_load_fn>(symbol("fsq_spm_load"));
    library.free = reinterpret_cast<fsq_spm_free_fn>(symbol("fsq_spm_free"));
    library.vocab_size = reinterpret_cast<fsq_spm_vocab_size_fn>(symbol("fsq_spm_vocab_size"));
    library.encode_pieces = reinterpret_cast<fsq_spm_encode_pieces_fn>(symbol("fsq_spm_encode_pieces"));
    library.encode_ids = reinterpret_cast<fsq_spm_encode_ids_fn>(symbol("fsq_spm_encode_ids"));
    library.train = reinterpret_cast<fsq_spm_train_fn>(symbol("fsq_spm_train"));
  });
  return library;
}

}  // namespace

std::string spm_library_path() {
  std::vector<std::string> tried;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) tried.push_back((exe.parent_path() / kSpmLibraryName).string());
  if (std::string(FSQ_SPM_BUILD_DIR).size() > 0)
    tried.push_back((fs::path(FSQ_SPM_BUILD_DIR) / kSpmLibraryName).string());
  if (const char* env = std::getenv("FSQ_SPM_LIBRARY"); env != nullptr && *env != '\0') tried.emplace_back(env);
  for (const auto& candidate : tried)
    if (fs::is_regular_file(candidate, ec)) return candidate;
  std::string list;
  for (const auto& candidate : tried) list += (list.empty() ? "" : ", ") + candidate;
  raise<OperationalError>("cannot find {} (SentencePiece support); tried {}; set FSQ_SPM_LIBRARY to its path",
                          kSpmLibraryName, list);
}

SentencePiece SentencePiece::load(const std::string& model_path) {
  const SpmLibrary& library = spm_library();
  std::error_code ec;
  if (!fs::is_regular_file(model_path, ec))
    raise<UserError>("cannot read SentencePiece model {}: no such file", model_path);
  char err[512] = {0};
  fsq_spm* model = library.load(model_path.c_str(), err, sizeof err);
  if (model == nullptr) raise<UserError>("cannot load SentencePiece model {}: {}", model_path, err);
  SentencePiece spm;
  spm.library_ = &library;
  spm.model_ = model;
  spm.model_path_ = model_path;
  return spm;
}

SentencePiece::~SentencePiece() {
  if (model_ != nullptr) library_->free(static_cast<fsq_spm*>(model_));
}

SentencePiece::SentencePiece(SentencePiece&& other) noexcept
    : library_(other.library_), model_(other.model_), model_path_(std::move(other.model_path_)) {
  other.model_ = nullptr;
}

SentencePiece& SentencePiece::operator=(SentencePiece&& other) noexcept {
  if (this != &other) {
    if (model_ != nullptr) library_->free(static_cast<fsq_spm*>(model_));
    library_ = other.library_;
    model_ = other.model_;
    model_path_ = std::move(other.model_path_);
    other.model_ = nullptr;
  }
  return *this;
}

std::string SentencePiece::encode_pieces(std::string_view text) const {
  std::string out;
  encode_pieces_into(text, out);
  return out;
}

void SentencePiece::encode_pieces_into(std::string_view text, std::string& out) const {
  const size_t at = out.size();
  out.resize(at + text.size() * 2 + 64);
  auto* model = static_cast<const fsq_spm*>(model_);
  long n = library_->encode_pieces(model, text.data(), text.size(), out.data() + at, out.size() - at);
  if (n >= 0 && static_cast<size_t>(n) > out.size() - at) {
    out.resize(at + static_cast<size_t>(n));
    n = library_->encode_pieces(model, text.data(), text.size(), out.data() + at, out.size() - at);
  }
  if (n < 0) {
    out.resize(at);
    raise<OperationalError>("SentencePiece ({}) failed to encode a line", model_path_);
  }
  out.resize(at + static_cast<size_t>(n));
}

EncodedLines encode_lines(const SentencePiece& spm, const std::vector<std::string_view>& lines, int workers) {
  EncodedLines out;
  out.buffers.resize(static_cast<size_t>(std::max(1, workers)));
  std::vector<size_t> ends(lines.size());  // where each line's pieces end in its chunk's buffer
  std::vector<std::pair<size_t, size_t>> ranges(out.buffers.size());  // each chunk's lines
  parallel_chunks(lines.size(), workers, [&](size_t begin, size_t end, int chunk) {
    std::string& buffer = out.buffers[static_cast<size_t>(chunk)];
    ranges[static_cast<size_t>(chunk)] = {begin, end};
    for (size_t i = begin; i < end; ++i) {
      spm.encode_pieces_into(lines[i], buffer);
      ends[i] = buffer.size();
    }
    buffer.shrink_to_fit();
  });
  // Views once every buffer has stopped growing.
  out.lines.resize(lines.size());
  for (size_t c = 0; c < out.buffers.size(); ++c) {
    const std::string_view buffer = out.buffers[c];
    size_t start = 0;
    for (size_t i = ranges[c].first; i < ranges[c].second; ++i) {
      out.lines[i] = buffer.substr(start, ends[i] - start);
      start = ends[i];
    }
  }
  return out;
}

std::vector<int> SentencePiece::encode_ids(std::string_view text) const {
  std::vector<int> out(text.size() + 16);
  auto* model = static_cast<const fsq_spm*>(model_);
  long n = library_->encode_ids(model, text.data(), text.size(), out.data(), out.size());
  if (n >= 0 && static_cast<size_t>(n) > out.size()) {
    out.resize(static_cast<size_t>(n));
    n = library_->encode_ids(model, text.data(), text.size(), out.data(), out.size());
  }
  if (n < 0) raise<OperationalError>("SentencePiece ({}) failed to encode a line", model_path_);
  out.resize(static_cast<size_t>(n));
  return out;
}

int SentencePiece::vocab_size() const { return library_->vocab_size(static_cast<const fsq_spm*>(model_)); }

void train_sentencepiece(const SpmTrainOptions& options) {
  const SpmLibrary& library = spm_library();
  std::string inputs;
  for (const auto& input : options.inputs) inputs += (inputs.empty() ? "" : ",") + input;
  std::vector<std::pair<std::string, std::string>> flags = {
      {"input", inputs},
      {"model_prefix", options.model_prefix},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"model_type", options.model_type},
      {"character_coverage", std::to_string(options.character_coverage)},
      {"input_sentence_size", std::to_string(options.input_sentence_size)},
      {"shuffle_input_sentence", "true"},
      {"random_seed", std::to_string(options.random_seed)},
  };
  std::vector<const char*> names, values;
  for (const auto& [name, value] : flags) {
    names.push_back(name.c_str());
    values.push_back(value.c_str());
  }
  char err[1024] = {0};
  if (library.train(names.data(), values.data(), flags.size(), err, sizeof err) != 0)
    raise<UserError>("SentencePiece training on {} failed: {}", inputs, err);
}

std::string decode_pieces(std::string_view pieces) {
  static const std::string_view kSpace = "\xE2\x96\x81";  // U+2581
  std::string out;
  out.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size();) {
    if (pieces[i] == ' ') {
      ++i;
    } else if (pieces.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += pieces[i++];
    }
  }
  size_t begin = out.find_first_not_of(' ');
  if (begin == std::string::npos) return "";
  size_t end = out.find_last_not_of(' ');
  return out.substr(begin, end - begin + 1);
}

}  // namespace fairseq_cpp::data
