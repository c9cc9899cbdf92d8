// fairseq-cpp-generate's and fairseq-cpp-interactive's bodies (fairseq-generate and
// fairseq-interactive v0.9): beam search over a binarized split or raw text, printed in fairseq's
// S-/T-/H-/D-/P- format, with fairseq's tokenized BLEU line.
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <torch/torch.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/data/file_util.h"
#include "fairseq_cpp/data/language_pair_dataset.h"
#include "fairseq_cpp/data/sentencepiece.h"
#include "fairseq_cpp/data/text.h"
#include "fairseq_cpp/generation/batch_search.h"
#include "fairseq_cpp/generation/output.h"
#include "fairseq_cpp/generation/sequence_generator.h"
#include "fairseq_cpp/generation/sequence_scorer.h"
#include "fairseq_cpp/scoring/fairseq_bleu.h"
#include "fairseq_cpp/scoring/scorer.h"
#include "fairseq_cpp/tasks/compute_setup.h"
#include "fairseq_cpp/tasks/programs.h"
#include "fairseq_cpp/tasks/translation_setup.h"

namespace fairseq_cpp::tasks {
namespace fs = std::filesystem;
namespace {

std::vector<int64_t> row_without_pad(const at::Tensor& row, int64_t pad) {
  std::vector<int64_t> out;
  const int64_t* p = row.data_ptr<int64_t>();
  for (int64_t i = 0; i < row.numel(); ++i) {
    if (p[i] != pad) out.push_back(p[i]);
  }
  return out;
}

std::vector<int64_t> row_values(const at::Tensor& row) {
  at::Tensor cpu = row.to(torch::kCPU).contiguous();
  return {cpu.data_ptr<int64_t>(), cpu.data_ptr<int64_t>() + cpu.numel()};
}

// --replace-unk's alignment dictionary: none (off), empty (copy the source word) or the file's.
std::optional<std::map<std::string, std::string>> align_dict(const config::GenerationConfig& g) {
  if (g.replace_unk.empty()) return std::nullopt;
  if (g.replace_unk == config::kCopySourceWord) return std::map<std::string, std::string>{};
  return generation::load_align_dict(g.replace_unk);
}

// The A- line's text for --print-alignment hard | soft; `source` is the row as collated (padded).
std::string alignment_text(const std::string& kind, const generation::Hypothesis& h, const std::vector<int64_t>& source,
                           int64_t pad) {
  return kind == "soft" ? generation::soft_alignment_string(h.attention, source, pad)
                        : generation::alignment_string(h.alignment);
}

std::string positional_scores(const std::vector<float>& scores) {
  std::string out;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (i > 0) out += ' ';
    out += fmt::format("{:.4f}", static_cast<double>(scores[i]));
  }
  return out;
}

// The batch's rows in fairseq's printing order: its collate sorts the sources by length with
// torch's (unstable) sort, ours with a stable one; the rows are the same, only ties move.
std::vector<int64_t> fairseq_row_order(const data::LanguagePairDataset& dataset, const std::vector<int64_t>& indices,
                                       const data::Batch& batch) {
  std::vector<int64_t> lengths;
  for (int64_t index : indices) lengths.push_back(dataset.src_sizes()[static_cast<size_t>(index)]);
  at::Tensor order = std::get<1>(torch::tensor(lengths, torch::kInt64).sort(0, /*descending=*/true));
  std::map<int64_t, int64_t> row_of_id;
  for (int64_t r = 0; r < batch.nsentences; ++r) row_of_id[batch.id[r].item<int64_t>()] = r;
  std::vector<int64_t> rows;
  for (int64_t k = 0; k < order.numel(); ++k) {
    auto it = row_of_id.find(indices[static_cast<size_t>(order[k].item<int64_t>())]);
    if (it != row_of_id.end()) rows.push_back(it->second);
  }
  return rows;
}

// Beam search allocates and frees tensors of up to B * K * V floats at every step; glibc would
// return each to the kernel (mmap/munmap) and fault its pages in again next step. Keeping freed
// memory in the heap took a third off the wall time of the fixture's test split.
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

generation::SequenceGenerator make_generator(const config::Config& cfg, const Translation& t) {
  const auto& g = cfg.generation;
  const data::Dictionary& tgt_dict = t.tgt_dict;
  if (g.sampling && g.nbest != g.beam) raise<UserError>("--sampling requires --nbest to be equal to --beam");
  // fairseq divides each model's logits by the temperature before averaging; the ensemble here
  // averages normalized distributions, so the two would differ.
  if (t.models > 1 && g.temperature != 1.0)
    raise<UserError>("--temperature {} with an ensemble of {} models is not supported yet; use one model, or "
                     "temperature 1", g.temperature, t.models);
  return generation::SequenceGenerator(generation::generator_options(g, static_cast<uint64_t>(cfg.common.seed)),
                                       {tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk(), tgt_dict.size()});
}

// Where the S-/T-/H-/D-/P- lines go: standard output, or <results_path>/generate-<subset>.txt
// written through a temporary file.
class Output {
 public:
  Output(const std::string& results_path, const std::string& subset) {
    if (results_path.empty()) return;
    std::error_code ec;
    fs::create_directories(results_path, ec);
    if (ec) raise<UserError>("cannot create --results-path {}: {}", results_path, ec.message());
    file_ = std::make_unique<data::AtomicFile>((fs::path(results_path) / ("generate-" + subset + ".txt")).string());
  }
  void line(const std::string& text) {
    if (file_) {
      file_->write(text);
      file_->write("\n");
    } else {
      fmt::print("{}\n", text);
    }
  }
  void commit() {
    if (file_) file_->commit();
    std::fflush(stdout);
  }

 private:
  std::unique_ptr<data::AtomicFile> file_;
};

}  // namespace

int generate_main(const Invocation& inv) {
  const config::Config& cfg = inv.config;
  const int threads = setup_compute(cfg);
  keep_freed_memory();
  const std::string& subset = cfg.dataset.gen_subset;
  Translation t = load_translation(cfg, subset);
  const std::string& bpe = cfg.common_eval.post_process;
  const bool post_processed = !bpe.empty() && bpe != "none";

  data::LanguagePairOptions pair_options = language_pair_options(t.trained.task, cfg.task, t.src_dict);
  auto dataset =
      data::LanguagePairDataset::load(t.data_dir, subset, t.src_lang, t.tgt_lang, t.src_dict, t.tgt_dict, pair_options);
  log::info("generate", "{} {} {}-{} {} examples", t.data_dir, subset, t.src_lang, t.tgt_lang, dataset.size());

  data::SizeFilterOptions filter;
  filter.max_source_positions = std::min(cfg.task.max_source_positions, t.model->max_source_positions());
  filter.max_target_positions = std::min(cfg.task.max_target_positions, t.model->max_target_positions());
  filter.skip_invalid = cfg.dataset.skip_invalid_size_inputs_valid_test;
  filter.what = subset;
  data::BatchingOptions batching;
  batching.max_tokens = cfg.dataset.max_tokens;
  batching.max_sentences = cfg.dataset.batch_size;
  batching.required_batch_size_multiple = cfg.dataset.required_batch_size_multiple;
  if (batching.max_tokens <= 0 && batching.max_sentences <= 0) batching.max_tokens = 12000;  // fairseq's default
  // fairseq orders the examples under numpy_seed(seed) with the dataset's shuffle on.
  auto batches = dataset.make_batches(static_cast<uint32_t>(cfg.common.seed), true, filter, batching);
  // --num-shards N --shard-id I: this process translates every N-th batch from the I-th on (fairseq's
  // sharded iterator), so N processes together translate the split once.
  if (cfg.dataset.num_shards > 1) {
    std::vector<std::vector<int64_t>> shard;
    for (size_t k = static_cast<size_t>(cfg.dataset.shard_id); k < batches.size();
         k += static_cast<size_t>(cfg.dataset.num_shards))
      shard.push_back(std::move(batches[k]));
    log::info("generate", "shard {} of {}: {} of {} batches", cfg.dataset.shard_id, cfg.dataset.num_shards,
              shard.size(), batches.size());
    batches = std::move(shard);
  }

  generation::SequenceGenerator generator = make_generator(cfg, t);
  scoring::FairseqBleu scorer(t.tgt_dict);
  auto sacrebleu = scoring::make_scorer("bleu", scoring::ScoringOptions{});
  Output out(cfg.common_eval.results_path, subset);
  const bool quiet = cfg.common_eval.quiet;
  const int64_t nbest = cfg.generation.nbest;

  int64_t num_sentences = 0, num_tokens = 0;
  bool has_target = dataset.target() != nullptr;
  const bool score_reference = cfg.generation.score_reference;
  if (score_reference && !has_target)
    raise<UserError>("--score-reference scores the references, but {} has no {} side", subset, t.tgt_lang);
  const std::string& print_alignment = cfg.generation.print_alignment;
  if (score_reference && (!print_alignment.empty() || !cfg.generation.replace_unk.empty()))
    raise<UserError>("--print-alignment and --replace-unk with --score-reference are not supported yet");
  const auto unk_dict = align_dict(cfg.generation);
  // fairseq scores strings (turned back into tokens) when BPE is removed or <unk> replaced.
  const bool retokenized = post_processed || unk_dict.has_value();
  // Batches are collated and searched a window at a time, so memory stays bounded on large sets.
  constexpr size_t kWindow = 32;
  std::vector<std::vector<int64_t>> batch_indices;
  std::vector<data::Batch> collated;
  std::vector<generation::SearchBatch> inputs;
  // Prints one batch's results (on this thread, in batch order, while the workers search on).
  auto print_batch = [&](size_t b, generation::Hypotheses&& hypos) {
    const data::Batch& batch = collated[b];
    for (const auto& h : hypos) num_tokens += h.empty() ? 0 : static_cast<int64_t>(h[0].tokens.size());
    const int64_t* ids = batch.id.data_ptr<int64_t>();
    for (int64_t i : fairseq_row_order(dataset, batch_indices[b], batch)) {
      const int64_t id = ids[i];
      std::vector<int64_t> src = row_without_pad(batch.src_tokens[i], t.src_dict.pad());
      std::vector<int64_t> tgt;
      std::string target_str;
      if (has_target) {
        tgt = row_without_pad(batch.target[i], t.tgt_dict.pad());
        target_str = generation::ids_to_string(t.tgt_dict, tgt, bpe, /*escape_unk=*/true);
      }
      const std::string src_str = generation::ids_to_string(t.src_dict, src, bpe);
      if (!quiet) {
        out.line(fmt::format("S-{}\t{}", id, src_str));
        if (has_target) out.line(fmt::format("T-{}\t{}", id, target_str));
      }
      const auto& list = hypos[static_cast<size_t>(i)];
      for (size_t j = 0; j < list.size() && static_cast<int64_t>(j) < nbest; ++j) {
        const auto& h = list[j];
        std::string hypo_str = generation::ids_to_string(t.tgt_dict, h.tokens, bpe);
        if (unk_dict)
          hypo_str = generation::replace_unk(hypo_str, src_str, h.alignment, *unk_dict, data::Dictionary::unk_word());
        std::vector<int32_t> hypo_ids;
        if (retokenized) hypo_ids = scorer.encode_line(hypo_str);  // as fairseq: every hypothesis
        if (!quiet) {
          const std::string score = generation::python_float(static_cast<double>(h.score));
          out.line(fmt::format("H-{}\t{}\t{}", id, score, hypo_str));
          out.line(fmt::format("D-{}\t{}\t{}", id, score, hypo_str));
          out.line(fmt::format("P-{}\t{}", id, positional_scores(h.positional_scores)));
          if (!print_alignment.empty()) {
            out.line(fmt::format(
                "A-{}\t{}", id, alignment_text(print_alignment, h, row_values(batch.src_tokens[i]), t.src_dict.pad())));
          }
        }
        if (has_target && j == 0) {
          if (cfg.generation.sacrebleu) {
            sacrebleu->add(std::string_view(hypo_str), {std::string_view(target_str)});
          } else if (retokenized) {
            scorer.add(scorer.encode_line(target_str), std::move(hypo_ids));
          } else {
            std::vector<int32_t> r(tgt.begin(), tgt.end()), p(h.tokens.begin(), h.tokens.end());
            scorer.add(std::move(r), std::move(p));
          }
        }
      }
    }
    num_sentences += batch.nsentences;
  };
  const auto start = std::chrono::steady_clock::now();
  for (size_t first = 0; first < batches.size(); first += kWindow) {
    batch_indices.clear();
    collated.clear();
    inputs.clear();
    for (size_t k = first; k < std::min(batches.size(), first + kWindow); ++k) {
      data::Batch batch = dataset.collate(batches[k]);
      if (batch.empty()) continue;
      at::Tensor prefix;
      if (cfg.generation.prefix_size > 0) {
        prefix = batch.target.narrow(1, 0, std::min(cfg.generation.prefix_size, batch.target.size(1))).to(t.device);
      }
      inputs.push_back({batch.src_tokens.to(t.device), batch.src_lengths.to(t.device), prefix});
      batch_indices.push_back(batches[k]);
      collated.push_back(std::move(batch));
    }
    if (score_reference) {
      for (size_t b = 0; b < collated.size(); ++b) {
        const data::Batch& batch = collated[b];
        print_batch(b, generation::score_references(*t.model, inputs[b].src_tokens, inputs[b].src_lengths,
                                                    batch.prev_output_tokens.to(t.device), batch.target.to(t.device),
                                                    t.tgt_dict.pad()));
      }
    } else {
      generation::search_batches(generator, *t.model, inputs, t.device.is_cpu() ? threads : 1, print_batch);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.commit();
  const double s = std::max(seconds, 1e-9);
  fmt::print("| Translated {} sentences ({} tokens) in {:.1f}s ({:.2f} sentences/s, {:.2f} tokens/s)\n", num_sentences,
             num_tokens, seconds, static_cast<double>(num_sentences) / s, static_cast<double>(num_tokens) / s);
  if (has_target) {
    const std::string result = cfg.generation.sacrebleu
                                   ? sacrebleu->format(sacrebleu->score())
                                   : scorer.result_string();
    fmt::print("| Generate {} with beam={}: {}\n", subset, cfg.generation.beam, result);
  }
  std::fflush(stdout);
  return kExitOk;
}

int interactive_main(const Invocation& inv) {
  const config::Config& cfg = inv.config;
  const int threads = setup_compute(cfg);
  keep_freed_memory();
  Translation t = load_translation(cfg, "train");
  const std::string& bpe =
      cfg.common_eval.post_process.empty() ? std::string("sentencepiece") : cfg.common_eval.post_process;
  std::string spm_path = cfg.interactive.sentencepiece_model;
  if (spm_path.empty()) {
    spm_path = (fs::path(t.data_dir) / "spm.model").string();
    if (!fs::exists(spm_path)) {
      raise<UserError>(
          "no SentencePiece model for raw input: {} does not exist; give one with --sentencepiece-model FILE",
          spm_path);
    }
  } else if (!fs::exists(spm_path)) {
    raise<UserError>("--sentencepiece-model {} does not exist", spm_path);
  }
  data::SentencePiece spm = data::SentencePiece::load(spm_path);

  std::ifstream file;
  std::istream* in = &std::cin;
  if (cfg.interactive.input != "-") {
    file.open(cfg.interactive.input, std::ios::binary);
    if (!file) raise<UserError>("cannot read --input {}", cfg.interactive.input);
    in = &file;
  }
  generation::SequenceGenerator generator = make_generator(cfg, t);
  const std::string& print_alignment = cfg.generation.print_alignment;
  const auto unk_dict = align_dict(cfg.generation);
  const int64_t max_source = std::min(cfg.task.max_source_positions, t.model->max_source_positions());
  const int64_t batch_limit = cfg.dataset.batch_size > 0 ? cfg.dataset.batch_size : cfg.interactive.buffer_size;
  const int64_t nbest = cfg.generation.nbest;
  log::info("interactive", "reading raw text from {}",
            cfg.interactive.input == "-" ? "standard input" : cfg.interactive.input);

  int64_t next_id = 0;
  std::vector<std::string> buffer;
  // Translates `buffer`, printing S-/H-/D-/P- lines in input order.
  auto translate_buffer = [&]() {
    struct Item {
      int64_t id;
      std::string pieces;
      std::vector<int64_t> ids;
    };
    std::vector<Item> items;
    for (const std::string& line : buffer) {
      Item item{next_id++, "", {}};
      const std::string_view text = data::rstrip(line);
      if (data::find_invalid_utf8(text) != std::string::npos) {
        log::warning("interactive", "line {}: not valid UTF-8; skipped", item.id + 1);
        continue;
      }
      item.pieces = spm.encode_pieces(text);
      std::vector<std::string_view> pieces;
      data::tokenize_line(item.pieces, pieces);
      for (auto p : pieces) item.ids.push_back(t.src_dict.index(p));
      item.ids.push_back(t.src_dict.eos());
      if (static_cast<int64_t>(item.ids.size()) > max_source) {
        log::warning("interactive", "line {}: {} tokens exceed the model's {} source positions; skipped", item.id + 1,
                     item.ids.size(), max_source);
        fmt::print("S-{}\t{}\nW-{}\tskipped: {} tokens > {} source positions\n", item.id,
                   generation::post_process(item.pieces, bpe), item.id, item.ids.size(), max_source);
        continue;
      }
      items.push_back(std::move(item));
    }
    std::vector<size_t> starts;
    std::vector<generation::SearchBatch> inputs;
    for (size_t start = 0; start < items.size(); start += static_cast<size_t>(batch_limit)) {
      const size_t end = std::min(items.size(), start + static_cast<size_t>(batch_limit));
      size_t width = 0;
      for (size_t i = start; i < end; ++i) width = std::max(width, items[i].ids.size());
      const auto rows = static_cast<int64_t>(end - start);
      at::Tensor src = torch::full({rows, static_cast<int64_t>(width)}, t.src_dict.pad(), torch::kInt64);
      at::Tensor lengths = torch::empty({rows}, torch::kInt64);
      for (size_t i = start; i < end; ++i) {
        const auto& ids = items[i].ids;
        const auto r = static_cast<int64_t>(i - start);
        const int64_t offset = static_cast<int64_t>(width - ids.size());  // left padding
        src[r].narrow(0, offset, static_cast<int64_t>(ids.size())).copy_(torch::tensor(ids, torch::kInt64));
        lengths[r] = static_cast<int64_t>(ids.size());
      }
      starts.push_back(start);
      inputs.push_back({src.to(t.device), lengths.to(t.device), at::Tensor()});
    }
    auto print_batch = [&](size_t b, generation::Hypotheses&& hypos) {
      for (size_t i = starts[b]; i < starts[b] + hypos.size(); ++i) {
        const Item& item = items[i];
        // The input's own words: an <unk> is replaced by the word itself, not by "<unk>".
        const std::string src_str = generation::post_process(item.pieces, bpe);
        fmt::print("S-{}\t{}\n", item.id, src_str);
        const auto& list = hypos[i - starts[b]];
        for (size_t j = 0; j < list.size() && static_cast<int64_t>(j) < nbest; ++j) {
          const auto& h = list[j];
          std::string hypo_str = generation::ids_to_string(t.tgt_dict, h.tokens, bpe);
          if (unk_dict)
            hypo_str = generation::replace_unk(hypo_str, src_str, h.alignment, *unk_dict, data::Dictionary::unk_word());
          const std::string score = generation::python_float(static_cast<double>(h.score));
          fmt::print("H-{}\t{}\t{}\n", item.id, score, hypo_str);
          fmt::print("D-{}\t{}\t{}\n", item.id, score, hypo_str);
          fmt::print("P-{}\t{}\n", item.id, positional_scores(h.positional_scores));
          if (!print_alignment.empty()) {
            const auto row = static_cast<int64_t>(i - starts[b]);
            fmt::print("A-{}\t{}\n", item.id,
                       alignment_text(print_alignment, h, row_values(inputs[b].src_tokens[row]), t.src_dict.pad()));
          }
        }
      }
      std::fflush(stdout);
    };
    generation::search_batches(generator, *t.model, inputs, t.device.is_cpu() ? threads : 1, print_batch);
    buffer.clear();
  };
  for (std::string line; std::getline(*in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    buffer.push_back(std::move(line));
    if (static_cast<int64_t>(buffer.size()) >= cfg.interactive.buffer_size) translate_buffer();
  }
  if (!buffer.empty()) translate_buffer();
  return kExitOk;
}

}  // namespace fairseq_cpp::tasks
