// Beam search speed on a binarized split with a checkpoint, as fairseq-cpp-generate runs it
// (batch order, beam, max length, batches dealt out in parts to one worker per thread), against
// in-invocation baselines: one batch at a time on all intra-op threads (how fairseq and
// fairseq-cpp before it searched), the workers with the decoder's one-row attention through BLAS
// and its self-attention caches copied at every step (as before the row kernel and the caches
// kept in place), and optionally the search with the incremental cache disabled (every step
// re-decodes the whole prefix). tools/bench/generate.sh runs it.
//
//   build/tools/bench/fsq_bench_generate DATA CKPT [--threads 2] [--runs 3] [--beam 5] [--batch 128]
//       [--no-cache-runs 0] [--profile trace.json]
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/checkpoint/load_model.h"
#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/data/language_pair_dataset.h"
#include "fairseq_cpp/generation/batch_search.h"
#include "fairseq_cpp/generation/sequence_generator.h"
#include "fairseq_cpp/nn/attention.h"

using namespace fairseq_cpp;

namespace {

std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return argv[i + 1];
  }
  return fallback;
}

// The model with its incremental cache disabled: each step decodes the whole prefix again.
class NoCacheModel : public models::EncoderDecoderModel {
 public:
  explicit NoCacheModel(std::shared_ptr<models::TransformerModel> inner) : inner_(std::move(inner)) {}
  models::EncoderOut encode(const at::Tensor& s, const at::Tensor& l) override { return inner_->encode(s, l); }
  at::Tensor decode(const at::Tensor& p, const models::EncoderOut& e) override { return inner_->decode(p, e); }
  at::Tensor decode_step(const at::Tensor& prev, const models::EncoderOut& e, models::IncrementalState&) override {
    at::Tensor logits = inner_->decode(prev, e);   // (N, t, V)
    return logits.narrow(1, prev.size(1) - 1, 1);  // (N, 1, V)
  }
  int64_t max_source_positions() const override { return inner_->max_source_positions(); }
  int64_t max_target_positions() const override { return inner_->max_target_positions(); }

 private:
  std::shared_ptr<models::TransformerModel> inner_;
};

struct Run {
  double seconds = 0;
  int64_t sentences = 0;
  int64_t tokens = 0;
};

Run median(std::vector<Run> v) {
  std::sort(v.begin(), v.end(), [](const Run& a, const Run& b) { return a.seconds < b.seconds; });
  return v[v.size() / 2];
}

// The table: fairseq's README figure, then the medians of each way of searching (uncached: none
// when empty).
void print_table(int threads, const std::vector<Run>& uncached, const std::vector<Run>& cached,
                 const std::vector<Run>& blas_rows, const std::vector<Run>& workers) {
  const double kFairseqSeconds = 23.7, kFairseqSentences = 42.26, kFairseqTokens = 632.82;
  fmt::print("{:<44} {:>9} {:>12} {:>11} {:>9}\n", "beam 5, batch 128, " + std::to_string(threads) + " threads",
             "seconds", "sentences/s", "tokens/s", "speed-up");
  fmt::print("{:<44} {:>9.1f} {:>12.2f} {:>11.2f} {:>9}\n", "fairseq v0.9 (README figure, quiet machine)",
             kFairseqSeconds, kFairseqSentences, kFairseqTokens, "1.00x");
  auto row = [&](const std::string& name, const Run& r) {
    fmt::print("{:<44} {:>9.1f} {:>12.2f} {:>11.2f} {:>8.2f}x\n", name, r.seconds, r.sentences / r.seconds,
               r.tokens / r.seconds, kFairseqSeconds / r.seconds);
  };
  if (!uncached.empty()) row("fairseq-cpp, cache disabled (median)", median(uncached));
  row("fairseq-cpp, one batch at a time (baseline)", median(cached));
  row("fairseq-cpp, " + std::to_string(threads) + " workers, BLAS, caches copied", median(blas_rows));
  row("fairseq-cpp, " + std::to_string(threads) + " workers (as the program)", median(workers));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: fsq_bench_generate DATA CKPT [--threads 2] [--runs 3] [--no-cache-runs 0]\n");
    return 2;
  }
  const std::string data_dir = argv[1], path = argv[2];
  const int threads = std::stoi(flag(argc, argv, "--threads", "2"));
  const int runs = std::stoi(flag(argc, argv, "--runs", "3"));
  const int no_cache_runs = std::stoi(flag(argc, argv, "--no-cache-runs", "0"));
  const std::string profile = flag(argc, argv, "--profile", "");
  at::set_num_threads(threads);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // as fairseq-cpp-generate: freed tensors stay in the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);

  data::Dictionary src_dict = data::Dictionary::load(data_dir + "/dict.en.txt");
  data::Dictionary tgt_dict = data::Dictionary::load(data_dir + "/dict.de.txt");
  auto loaded = checkpoint::load_model(
      path, {src_dict.size(), tgt_dict.size(), 1, src_dict.to_text() == tgt_dict.to_text()}, torch::kCPU);
  auto dataset = data::LanguagePairDataset::load(data_dir, "test", "en", "de", src_dict, tgt_dict, {});
  data::BatchingOptions batching;
  batching.max_sentences = std::stoll(flag(argc, argv, "--batch", "128"));
  std::vector<data::Batch> batches;
  for (const auto& indices : dataset.make_batches(1, true, data::SizeFilterOptions{}, batching)) {
    batches.push_back(dataset.collate(indices));
  }
  generation::GeneratorOptions options;
  options.beam = std::stoll(flag(argc, argv, "--beam", "5"));
  generation::SequenceGenerator generator(options, {1, 2, 3, tgt_dict.size()});

  auto run_once = [&](models::EncoderDecoderModel& model) {
    Run r;
    for (const auto& b : batches) {
      auto start = std::chrono::steady_clock::now();
      auto hypos = generator.generate(model, b.src_tokens, b.src_lengths);
      r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      r.sentences += b.nsentences;
      for (const auto& h : hypos) r.tokens += static_cast<int64_t>(h[0].tokens.size());
    }
    return r;
  };
  std::vector<generation::SearchBatch> inputs;
  for (const auto& b : batches) inputs.push_back({b.src_tokens, b.src_lengths, at::Tensor()});
  auto run_workers = [&](models::EncoderDecoderModel& model) {
    Run r;
    auto start = std::chrono::steady_clock::now();
    generation::search_batches(generator, model, inputs, threads, [&](size_t i, generation::Hypotheses&& hypos) {
      r.sentences += batches[i].nsentences;
      for (const auto& h : hypos) r.tokens += static_cast<int64_t>(h[0].tokens.size());
    });
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  };
  if (!profile.empty()) {
    torch::autograd::profiler::RecordProfile guard(profile);
    run_once(*loaded.model);
    return 0;
  }
  std::vector<Run> cached, workers, blas_rows, uncached;
  for (int i = 0; i < runs; ++i) {  // interleaved, so that all see the same machine
    cached.push_back(run_once(*loaded.model));
    workers.push_back(run_workers(*loaded.model));
    nn::set_row_attention_kernels(false);
    blas_rows.push_back(run_workers(*loaded.model));
    nn::set_row_attention_kernels(true);
  }
  NoCacheModel no_cache(loaded.model);
  for (int i = 0; i < no_cache_runs; ++i) uncached.push_back(run_once(no_cache));

  print_table(threads, uncached, cached, blas_rows, workers);
  return 0;
}
