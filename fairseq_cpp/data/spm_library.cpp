// libfsq_spm.so: SentencePiece behind the C interface of data/spm_c_api.h. Built apart from the
// fairseq_cpp library and linked against SentencePiece alone; never linked into a program.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "fairseq_cpp/data/spm_c_api.h"

struct fsq_spm {
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

void set_error(char* err, size_t err_size, const std::string& message) {
  if (err == nullptr || err_size == 0) return;
  size_t n = std::min(message.size(), err_size - 1);
  std::memcpy(err, message.data(), n);
  err[n] = '\0';
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) fsq_spm* fsq_spm_load(const char* path, char* err, size_t err_size) {
  auto* model = new fsq_spm;
  auto status = model->processor.Load(path);
  if (!status.ok()) {
    set_error(err, err_size, status.ToString());
    delete model;
    return nullptr;
  }
  return model;
}

__attribute__((visibility("default"))) void fsq_spm_free(fsq_spm* model) { delete model; }

__attribute__((visibility("default"))) int fsq_spm_vocab_size(const fsq_spm* model) {
  return model->processor.GetPieceSize();
}

__attribute__((visibility("default"))) long fsq_spm_encode_pieces(const fsq_spm* model, const char* text, size_t len,
                                                                  char* out, size_t cap) {
  std::vector<std::string> pieces;
  if (!model->processor.Encode(absl::string_view(text, len), &pieces).ok()) return -1;
  size_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i > 0) {
      if (total < cap) out[total] = ' ';
      ++total;
    }
    const std::string& p = pieces[i];
    if (total + p.size() <= cap) std::memcpy(out + total, p.data(), p.size());
    total += p.size();
  }
  return static_cast<long>(total);
}

__attribute__((visibility("default"))) long fsq_spm_encode_ids(const fsq_spm* model, const char* text, size_t len,
                                                               int* out, size_t cap) {
  std::vector<int> ids;
  if (!model->processor.Encode(absl::string_view(text, len), &ids).ok()) return -1;
  std::copy_n(ids.begin(), std::min(cap, ids.size()), out);
  return static_cast<long>(ids.size());
}

__attribute__((visibility("default"))) int fsq_spm_train(const char* const* names, const char* const* values, size_t n,
                                                         char* err, size_t err_size) {
  std::unordered_map<std::string, std::string> kwargs;
  for (size_t i = 0; i < n; ++i) kwargs[names[i]] = values[i];
  // spm_train's --random_seed is no trainer field: it seeds SentencePiece's generator (the sample
  // of --input_sentence_size among others), as spm_train does before training.
  if (auto seed = kwargs.find("random_seed"); seed != kwargs.end()) {
    sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(std::stoul(seed->second)));
    kwargs.erase(seed);
  }
  auto status = sentencepiece::SentencePieceTrainer::Train(kwargs);
  if (!status.ok()) {
    set_error(err, err_size, status.ToString());
    return 1;
  }
  return 0;
}

}  // extern "C"
