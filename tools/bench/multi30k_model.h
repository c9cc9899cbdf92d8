#pragma once
// What the model benchmarks share: their `--name value` integer flags, the median of repeated
// timings, and the Multi30k model of the fairseq v0.9 reference run (3+3 layers, d 256, ffn 1024,
// 4 heads, shared 8000-word vocabulary).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/models/transformer.h"

namespace fairseq_cpp::bench {

// The text after `name` on the command line, or `fallback`.
inline std::string text_flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return argv[i + 1];
  }
  return fallback;
}

// The integer after `name` on the command line, or `fallback`.
inline int64_t flag(int argc, char** argv, const std::string& name, int64_t fallback) {
  const std::string text = text_flag(argc, argv, name, "");
  return text.empty() ? fallback : std::stoll(text);
}

// Median seconds of one call of `work` over `runs` timings of `iters` calls, after one call (a
// warm-up, and whatever packing the first call does).
template <typename F>
double median_seconds(F&& work, int64_t runs, int64_t iters) {
  work();
  std::vector<double> s;
  for (int64_t r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) work();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

// The model, initialized from seed 0.
inline std::shared_ptr<models::TransformerModel> multi30k_model() {
  torch::manual_seed(0);
  config::ModelConfig m;
  m.encoder_layers = 3;
  m.decoder_layers = 3;
  m.encoder_embed_dim = 256;
  m.encoder_ffn_embed_dim = 1024;
  m.encoder_attention_heads = 4;
  m.decoder_attention_heads = 4;
  m.share_all_embeddings = true;
  return std::make_shared<models::TransformerModel>(models::resolve_transformer_options(m, config::TaskConfig{}),
                                                    models::Vocabularies{8000, 8000, 1, true});
}

}  // namespace fairseq_cpp::bench
