// fairseq-cpp-generate's and fairseq-cpp-interactive's bodies (fairseq-generate and
// fairseq-interactive v0.9): beam search over a binarized split or raw text, printed in fairseq's
// S-/T-/H-/D-/P- format, with fairseq's tokenized BLEU line.
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>

#include <fmt/format.h>
#include "fairseq_cpp/core/torch.h"

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
  if (g.retain_dropout) {
    // The dropout masks come from LibTorch's default generator: seeded as training seeds it.
    torch::manual_seed(static_cast<uint64_t>(cfg.common.seed));
    log::info("generate", "--retain-dropout: dropout stays active at inference (seed {})", cfg.common.seed);
  }
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

// The test split's batches (fairseq's generate iterator): filtered by the model's and the task's
// positions, fairseq's default size, ordered under the seed; with --num-shards N --shard-id I
// every N-th batch from the I-th on, so N processes together translate the split once.
std::vector<std::vector<int64_t>> test_batches(const config::Config& cfg, const Translation& t,
                                               const data::LanguagePairDataset& dataset) {
  const std::string& subset = cfg.dataset.gen_subset;
  data::SizeFilterOptions filter;
  filter.max_source_positions = std::min(cfg.task.max_source_positions, t.model->max_source_positions());
  filter.max_target_positions = std::min(cfg.task.max_target_positions, t.model->max_target_positions());
  filter.skip_invalid = cfg.dataset.skip_invalid_size_inputs_valid_test;
  filter.what = subset;
  data::BatchingOptions batching = batching_options(cfg.dataset, BatchesFor::training);
  if (batching.max_tokens <= 0 && batching.max_sentences <= 0) batching.max_tokens = 12000;  // fairseq's default
  // fairseq orders the examples under numpy_seed(seed) with the dataset's shuffle on.
  auto batches = dataset.make_batches(static_cast<uint32_t>(cfg.common.seed), true, filter, batching);
  if (cfg.dataset.num_shards <= 1) return batches;
  std::vector<std::vector<int64_t>> shard;
  for (size_t k = static_cast<size_t>(cfg.dataset.shard_id); k < batches.size();
       k += static_cast<size_t>(cfg.dataset.num_shards))
    shard.push_back(std::move(batches[k]));
  log::info("generate", "shard {} of {}: {} of {} batches", cfg.dataset.shard_id, cfg.dataset.num_shards,
            shard.size(), batches.size());
  return shard;
}

// --score-reference's limits, checked before --replace-unk's dictionary is read.
void check_score_reference(const config::Config& cfg, const Translation& t, const data::LanguagePairDataset& dataset) {
  if (!cfg.generation.score_reference) return;
  if (dataset.target() == nullptr)
    raise<UserError>("--score-reference scores the references, but {} has no {} side", cfg.dataset.gen_subset,
                     t.tgt_lang);
  if (!cfg.generation.print_alignment.empty() || !cfg.generation.replace_unk.empty())
    raise<UserError>("--print-alignment and --replace-unk with --score-reference are not supported yet");
}

// fairseq-generate's printing and scoring: each sentence's S-/T- lines, its nbest H-/D-/P-(/A-)
// lines, and the best hypothesis against the reference for the BLEU line.
class GenerateReport {
 public:
  GenerateReport(const config::Config& cfg, const Translation& t, const data::LanguagePairDataset& dataset)
      : cfg_(cfg),
        t_(t),
        dataset_(dataset),
        bpe_(cfg.common_eval.post_process),
        has_target_(dataset.target() != nullptr),
        unk_dict_(align_dict(cfg.generation)),
        // fairseq scores strings (turned back into tokens) when BPE is removed or <unk> replaced.
        retokenized_((!bpe_.empty() && bpe_ != "none") || unk_dict_.has_value()),
        scorer_(t.tgt_dict),
        sacrebleu_(scoring::make_scorer("bleu", scoring::ScoringOptions{})),
        out_(cfg.common_eval.results_path, cfg.dataset.gen_subset) {}

  // Prints one batch's results (`indices`: its examples), in fairseq's row order.
  void batch(const data::Batch& batch, const std::vector<int64_t>& indices, generation::Hypotheses&& hypos) {
    for (const auto& h : hypos) num_tokens_ += h.empty() ? 0 : static_cast<int64_t>(h[0].tokens.size());
    for (int64_t i : fairseq_row_order(dataset_, indices, batch)) sentence(batch, i, hypos[static_cast<size_t>(i)]);
    num_sentences_ += batch.nsentences;
  }

  // The speed line and, with references, the BLEU line.
  void finish(double seconds) {
    out_.commit();
    const double s = std::max(seconds, 1e-9);
    fmt::print("| Translated {} sentences ({} tokens) in {:.1f}s ({:.2f} sentences/s, {:.2f} tokens/s)\n",
               num_sentences_, num_tokens_, seconds, static_cast<double>(num_sentences_) / s,
               static_cast<double>(num_tokens_) / s);
    if (has_target_) {
      const std::string result =
          cfg_.generation.sacrebleu ? sacrebleu_->format(sacrebleu_->score()) : scorer_.result_string();
      fmt::print("| Generate {} with beam={}: {}\n", cfg_.dataset.gen_subset, cfg_.generation.beam, result);
    }
    std::fflush(stdout);
  }

 private:
  // Row `i` of `batch`: its lines and its score.
  void sentence(const data::Batch& batch, int64_t i, const std::vector<generation::Hypothesis>& list) {
    const int64_t id = batch.id.data_ptr<int64_t>()[i];
    std::vector<int64_t> src = row_without_pad(batch.src_tokens[i], t_.src_dict.pad());
    std::vector<int64_t> tgt;
    std::string target_str;
    if (has_target_) {
      tgt = row_without_pad(batch.target[i], t_.tgt_dict.pad());
      target_str = generation::ids_to_string(t_.tgt_dict, tgt, bpe_, /*escape_unk=*/true);
    }
    const std::string src_str = generation::ids_to_string(t_.src_dict, src, bpe_);
    if (!cfg_.common_eval.quiet) {
      out_.line(fmt::format("S-{}\t{}", id, src_str));
      if (has_target_) out_.line(fmt::format("T-{}\t{}", id, target_str));
    }
    for (size_t j = 0; j < list.size() && static_cast<int64_t>(j) < cfg_.generation.nbest; ++j) {
      const auto& h = list[j];
      std::string hypo_str = generation::ids_to_string(t_.tgt_dict, h.tokens, bpe_);
      if (unk_dict_)
        hypo_str = generation::replace_unk(hypo_str, src_str, h.alignment, *unk_dict_, data::Dictionary::unk_word());
      std::vector<int32_t> hypo_ids;
      if (retokenized_) hypo_ids = scorer_.encode_line(hypo_str);  // as fairseq: every hypothesis
      if (!cfg_.common_eval.quiet) hypothesis_lines(id, h, hypo_str, batch.src_tokens[i]);
      if (has_target_ && j == 0) score(h, hypo_str, std::move(hypo_ids), target_str, tgt);
    }
  }

  void hypothesis_lines(int64_t id, const generation::Hypothesis& h, const std::string& hypo_str,
                        const at::Tensor& source_row) {
    const std::string score = generation::python_float(static_cast<double>(h.score));
    out_.line(fmt::format("H-{}\t{}\t{}", id, score, hypo_str));
    out_.line(fmt::format("D-{}\t{}\t{}", id, score, hypo_str));
    out_.line(fmt::format("P-{}\t{}", id, positional_scores(h.positional_scores)));
    const std::string& kind = cfg_.generation.print_alignment;
    if (!kind.empty())
      out_.line(fmt::format("A-{}\t{}", id, alignment_text(kind, h, row_values(source_row), t_.src_dict.pad())));
  }

  void score(const generation::Hypothesis& h, const std::string& hypo_str, std::vector<int32_t> hypo_ids,
             const std::string& target_str, const std::vector<int64_t>& tgt) {
    if (cfg_.generation.sacrebleu) {
      sacrebleu_->add(std::string_view(hypo_str), {std::string_view(target_str)});
    } else if (retokenized_) {
      scorer_.add(scorer_.encode_line(target_str), std::move(hypo_ids));
    } else {
      std::vector<int32_t> r(tgt.begin(), tgt.end()), p(h.tokens.begin(), h.tokens.end());
      scorer_.add(std::move(r), std::move(p));
    }
  }

  const config::Config& cfg_;
  const Translation& t_;
  const data::LanguagePairDataset& dataset_;
  const std::string bpe_;
  const bool has_target_;
  const std::optional<std::map<std::string, std::string>> unk_dict_;
  const bool retokenized_;
  scoring::FairseqBleu scorer_;
  std::unique_ptr<scoring::Scorer> sacrebleu_;
  Output out_;
  int64_t num_sentences_ = 0, num_tokens_ = 0;
};

// One window of collated batches and the search's inputs on the model's device (empty ones left out).
struct Window {
  std::vector<std::vector<int64_t>> indices;
  std::vector<data::Batch> collated;
  std::vector<generation::SearchBatch> inputs;
};

Window collate_window(const config::Config& cfg, const Translation& t, const data::LanguagePairDataset& dataset,
                      const std::vector<std::vector<int64_t>>& batches, size_t first, size_t last) {
  Window w;
  for (size_t k = first; k < last; ++k) {
    data::Batch batch = dataset.collate(batches[k]);
    if (batch.empty()) continue;
    at::Tensor prefix;
    if (cfg.generation.prefix_size > 0)
      prefix = batch.target.narrow(1, 0, std::min(cfg.generation.prefix_size, batch.target.size(1))).to(t.device);
    w.inputs.push_back({batch.src_tokens.to(t.device), batch.src_lengths.to(t.device), prefix, {}});
    w.indices.push_back(batches[k]);
    w.collated.push_back(std::move(batch));
  }
  return w;
}

// --score-reference: the references' scores instead of a search.
void score_window(const Translation& t, const Window& w, bool retain_dropout,
                  const std::function<void(size_t, generation::Hypotheses&&)>& done) {
  for (size_t b = 0; b < w.collated.size(); ++b) {
    const data::Batch& batch = w.collated[b];
    done(b, generation::score_references(*t.model, w.inputs[b].src_tokens, w.inputs[b].src_lengths,
                                         batch.prev_output_tokens.to(t.device), batch.target.to(t.device),
                                         t.tgt_dict.pad(), retain_dropout));
  }
}

// interactive's SentencePiece model: --sentencepiece-model, else spm.model in the data-bin.
data::SentencePiece load_sentencepiece(const config::Config& cfg, const Translation& t) {
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
  return data::SentencePiece::load(spm_path);
}

// fairseq-interactive: raw lines, a buffer at a time, encoded, searched and printed in input order.
class Interactive {
 public:
  Interactive(const config::Config& cfg, const Translation& t, int threads, data::SentencePiece spm)
      : cfg_(cfg),
        t_(t),
        threads_(threads),
        bpe_(cfg.common_eval.post_process.empty() ? std::string("sentencepiece") : cfg.common_eval.post_process),
        spm_(std::move(spm)),
        generator_(make_generator(cfg, t)),
        unk_dict_(align_dict(cfg.generation)),
        max_source_(std::min(cfg.task.max_source_positions, t.model->max_source_positions())),
        batch_limit_(cfg.dataset.batch_size > 0 ? cfg.dataset.batch_size : cfg.interactive.buffer_size) {}

  // Translates every line of `in`, interactive.buffer_size lines at a time.
  void run(std::istream& in) {
    std::vector<std::string> buffer;
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      buffer.push_back(std::move(line));
      if (static_cast<int64_t>(buffer.size()) >= cfg_.interactive.buffer_size) translate(buffer);
    }
    if (!buffer.empty()) translate(buffer);
  }

 private:
  struct Item {
    int64_t id;
    std::string pieces;
    std::vector<int64_t> ids;
    std::vector<std::string> constraint_pieces;  // with --constraints: the line's target phrases, encoded
    generation::Constraints constraints;         // ... as target words
  };

  // Translates `buffer`, printing S-/H-/D-/P- lines in input order, and empties it.
  void translate(std::vector<std::string>& buffer) {
    items_ = encode(buffer);
    starts_.clear();
    inputs_.clear();
    for (size_t start = 0; start < items_.size(); start += static_cast<size_t>(batch_limit_)) {
      starts_.push_back(start);
      inputs_.push_back(collate(start, std::min(items_.size(), start + static_cast<size_t>(batch_limit_))));
    }
    generation::search_batches(generator_, *t_.model, inputs_, t_.device.is_cpu() ? threads_ : 1,
                               [&](size_t b, generation::Hypotheses&& hypos) { print(b, hypos); });
    buffer.clear();
  }

  // The lines as source ids; a line that is not UTF-8 or too long is skipped with a warning (the
  // long one also with its S- and W- lines).
  std::vector<Item> encode(const std::vector<std::string>& buffer) {
    std::vector<Item> items;
    for (const std::string& line : buffer) {
      Item item{next_id_++, "", {}, {}, {}};
      std::string_view text = data::rstrip(line);
      if (data::find_invalid_utf8(text) != std::string::npos) {
        log::warning("interactive", "line {}: not valid UTF-8; skipped", item.id + 1);
        continue;
      }
      if (!cfg_.generation.constraints.empty()) text = split_constraints(text, item);
      item.pieces = spm_.encode_pieces(text);
      std::vector<std::string_view> pieces;
      data::tokenize_line(item.pieces, pieces);
      for (auto p : pieces) item.ids.push_back(t_.src_dict.index(p));
      item.ids.push_back(t_.src_dict.eos());
      if (static_cast<int64_t>(item.ids.size()) > max_source_) {
        log::warning("interactive", "line {}: {} tokens exceed the model's {} source positions; skipped", item.id + 1,
                     item.ids.size(), max_source_);
        fmt::print("S-{}\t{}\nW-{}\tskipped: {} tokens > {} source positions\n", item.id,
                   generation::post_process(item.pieces, bpe_), item.id, item.ids.size(), max_source_);
        continue;
      }
      items.push_back(std::move(item));
    }
    return items;
  }

  // --constraints: the line's source (before the first TAB); each TAB-separated phrase after it is
  // encoded as the source is and looked up in the target dictionary (fairseq's
  // examples/constrained_decoding format).
  std::string_view split_constraints(std::string_view line, Item& item) const {
    const size_t tab = line.find('\t');
    const std::string_view source = line.substr(0, tab);
    for (size_t at = tab; at != std::string_view::npos;) {
      const size_t next = line.find('\t', at + 1);
      const std::string_view phrase =
          data::rstrip(line.substr(at + 1, next == std::string_view::npos ? next : next - at - 1));
      at = next;
      if (phrase.find_first_not_of(' ') == std::string_view::npos) continue;
      std::string pieces = spm_.encode_pieces(phrase);
      std::vector<std::string_view> words;
      data::tokenize_line(pieces, words);
      generation::Constraints::value_type ids;
      for (auto w : words) ids.push_back(t_.tgt_dict.index(w));
      item.constraints.push_back(std::move(ids));
      item.constraint_pieces.push_back(std::move(pieces));
    }
    return source;
  }

  // items_[start, end) as one left-padded batch on the model's device.
  generation::SearchBatch collate(size_t start, size_t end) const {
    size_t width = 0;
    for (size_t i = start; i < end; ++i) width = std::max(width, items_[i].ids.size());
    const auto rows = static_cast<int64_t>(end - start);
    at::Tensor src = torch::full({rows, static_cast<int64_t>(width)}, t_.src_dict.pad(), torch::kInt64);
    at::Tensor lengths = torch::empty({rows}, torch::kInt64);
    for (size_t i = start; i < end; ++i) {
      const auto& ids = items_[i].ids;
      const auto r = static_cast<int64_t>(i - start);
      const int64_t offset = static_cast<int64_t>(width - ids.size());  // left padding
      src[r].narrow(0, offset, static_cast<int64_t>(ids.size())).copy_(torch::tensor(ids, torch::kInt64));
      lengths[r] = static_cast<int64_t>(ids.size());
    }
    generation::SearchBatch batch{src.to(t_.device), lengths.to(t_.device), at::Tensor(), {}};
    if (!cfg_.generation.constraints.empty())
      for (size_t i = start; i < end; ++i) batch.constraints.push_back(items_[i].constraints);
    return batch;
  }

  // Batch `b`'s lines.
  void print(size_t b, const generation::Hypotheses& hypos) const {
    for (size_t i = starts_[b]; i < starts_[b] + hypos.size(); ++i) {
      const Item& item = items_[i];
      // The input's own words: an <unk> is replaced by the word itself, not by "<unk>".
      const std::string src_str = generation::post_process(item.pieces, bpe_);
      fmt::print("S-{}\t{}\n", item.id, src_str);
      for (const std::string& pieces : item.constraint_pieces)
        fmt::print("C-{}\t{}\n", item.id, generation::post_process(pieces, bpe_));
      const auto& list = hypos[i - starts_[b]];
      for (size_t j = 0; j < list.size() && static_cast<int64_t>(j) < cfg_.generation.nbest; ++j) {
        const auto& h = list[j];
        std::string hypo_str = generation::ids_to_string(t_.tgt_dict, h.tokens, bpe_);
        if (unk_dict_)
          hypo_str = generation::replace_unk(hypo_str, src_str, h.alignment, *unk_dict_, data::Dictionary::unk_word());
        const std::string score = generation::python_float(static_cast<double>(h.score));
        fmt::print("H-{}\t{}\t{}\n", item.id, score, hypo_str);
        fmt::print("D-{}\t{}\t{}\n", item.id, score, hypo_str);
        fmt::print("P-{}\t{}\n", item.id, positional_scores(h.positional_scores));
        const std::string& kind = cfg_.generation.print_alignment;
        if (!kind.empty()) {
          const auto row = static_cast<int64_t>(i - starts_[b]);
          fmt::print("A-{}\t{}\n", item.id,
                     alignment_text(kind, h, row_values(inputs_[b].src_tokens[row]), t_.src_dict.pad()));
        }
      }
    }
    std::fflush(stdout);
  }

  const config::Config& cfg_;
  const Translation& t_;
  const int threads_;
  const std::string bpe_;
  data::SentencePiece spm_;
  generation::SequenceGenerator generator_;
  const std::optional<std::map<std::string, std::string>> unk_dict_;
  const int64_t max_source_;
  const int64_t batch_limit_;
  int64_t next_id_ = 0;
  std::vector<Item> items_;                     // the buffer's lines that are searched
  std::vector<size_t> starts_;                  // each batch's first item
  std::vector<generation::SearchBatch> inputs_;  // the batches
};

}  // namespace

int generate_main(const Invocation& inv) {
  const config::Config& cfg = inv.config;
  const int threads = setup_compute(cfg);
  keep_freed_memory();
  const std::string& subset = cfg.dataset.gen_subset;
  Translation t = load_translation(cfg, subset);
  data::LanguagePairOptions pair_options = language_pair_options(t.trained.task, cfg.task, t.src_dict);
  auto dataset =
      data::LanguagePairDataset::load(t.data_dir, subset, t.src_lang, t.tgt_lang, t.src_dict, t.tgt_dict, pair_options);
  log::info("generate", "{} {} {}-{} {} examples", t.data_dir, subset, t.src_lang, t.tgt_lang, dataset.size());
  const std::vector<std::vector<int64_t>> batches = test_batches(cfg, t, dataset);
  generation::SequenceGenerator generator = make_generator(cfg, t);
  check_score_reference(cfg, t, dataset);
  GenerateReport report(cfg, t, dataset);
  // Batches are collated and searched a window at a time, so memory stays bounded on large sets.
  constexpr size_t kWindow = 32;
  const auto start = std::chrono::steady_clock::now();
  for (size_t first = 0; first < batches.size(); first += kWindow) {
    const Window w = collate_window(cfg, t, dataset, batches, first, std::min(batches.size(), first + kWindow));
    // Each batch's results are printed on this thread, in batch order, while the workers search on.
    auto print = [&](size_t b, generation::Hypotheses&& hypos) { report.batch(w.collated[b], w.indices[b], std::move(hypos)); };
    if (cfg.generation.score_reference) {
      score_window(t, w, cfg.generation.retain_dropout, print);
    } else {
      generation::search_batches(generator, *t.model, w.inputs, t.device.is_cpu() ? threads : 1, print);
    }
  }
  report.finish(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return kExitOk;
}

int interactive_main(const Invocation& inv) {
  const config::Config& cfg = inv.config;
  const int threads = setup_compute(cfg);
  keep_freed_memory();
  Translation t = load_translation(cfg, "train");
  data::SentencePiece spm = load_sentencepiece(cfg, t);
  std::ifstream file;
  if (cfg.interactive.input != "-") {
    file.open(cfg.interactive.input, std::ios::binary);
    if (!file) raise<UserError>("cannot read --input {}", cfg.interactive.input);
  }
  Interactive interactive(cfg, t, threads, std::move(spm));
  log::info("interactive", "reading raw text from {}",
            cfg.interactive.input == "-" ? "standard input" : cfg.interactive.input);
  interactive.run(cfg.interactive.input == "-" ? std::cin : file);
  return kExitOk;
}

}  // namespace fairseq_cpp::tasks
