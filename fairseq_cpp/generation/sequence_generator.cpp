#include "fairseq_cpp/generation/sequence_generator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/nn/packed_linear.h"

namespace fairseq_cpp::generation {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// fairseq's no_repeat_ngram blocking: for each row of tokens (N, step + 1), the words that would
// complete an n-gram already present in the row get -inf.
void block_repeated_ngrams(const at::Tensor& tokens, int64_t step, int64_t n, at::Tensor& lprobs) {
  if (step + 2 - n < 0) return;
  at::Tensor cpu = tokens.narrow(1, 0, step + 1).to(torch::kCPU).contiguous();
  auto rows = cpu.accessor<int64_t, 2>();
  std::vector<int64_t> banned_rows;
  std::vector<int64_t> banned_words;
  for (int64_t r = 0; r < cpu.size(0); ++r) {
    const int64_t* row = &rows[r][0];
    const int64_t* key = row + step + 2 - n;  // the last n - 1 tokens
    for (int64_t start = 0; start + n <= step + 1; ++start) {
      if (std::equal(key, key + n - 1, row + start)) {
        banned_rows.push_back(r);
        banned_words.push_back(row[start + n - 1]);
      }
    }
  }
  if (banned_rows.empty()) return;
  at::Tensor r = torch::tensor(banned_rows, torch::kInt64).to(lprobs.device());
  at::Tensor w = torch::tensor(banned_words, torch::kInt64).to(lprobs.device());
  lprobs.index_put_({r, w}, kNegInf);
}

// The rows `rows` of a (N, L, ...) buffer of which only columns [0, live) hold data yet: copies
// those columns only (fairseq's index_select copies whole rows, L = max_len + 2 wide); the others
// are written before they are read.
at::Tensor keep_rows(const at::Tensor& buffer, const at::Tensor& rows, int64_t live) {
  std::vector<int64_t> sizes = buffer.sizes().vec();
  sizes[0] = rows.size(0);
  at::Tensor out = at::empty(sizes, buffer.options());
  if (live > 0) out.narrow(1, 0, live).copy_(buffer.narrow(1, 0, live).index_select(0, rows));
  return out;
}

// fairseq's get_token_to_word_mapping, from 0: the number of tokens of `tokens` up to and
// including each position that are neither padding nor </s>, minus one.
std::vector<int64_t> word_indices(const std::vector<int64_t>& tokens, int64_t pad, int64_t eos) {
  std::vector<int64_t> out(tokens.size());
  int64_t words = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    words += tokens[i] != pad && tokens[i] != eos;
    out[i] = words - 1;
  }
  return out;
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> hard_alignment(const at::Tensor& attention, const std::vector<int64_t>& source,
                                                        const std::vector<int64_t>& tokens, int64_t pad, int64_t eos) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const auto valid = [&](int64_t token) { return token != pad && token != eos; };
  if (std::none_of(source.begin(), source.end(), valid)) return out;
  at::Tensor attn = attention.to(torch::kCPU, torch::kFloat32).contiguous();
  const auto src_len = static_cast<int64_t>(source.size());
  const std::vector<int64_t> src_word = word_indices(source, pad, eos);
  const std::vector<int64_t> tgt_word = word_indices(tokens, pad, eos);
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (!valid(tokens[t])) continue;
    const float* row = attn.data_ptr<float>() + static_cast<int64_t>(t) * src_len;
    int64_t best = -1;  // the first of equal maxima, as torch's max
    for (int64_t s = 0; s < src_len; ++s) {
      if (valid(source[static_cast<size_t>(s)]) && (best < 0 || row[s] > row[best])) best = s;
    }
    out.emplace_back(src_word[static_cast<size_t>(best)], tgt_word[t]);
  }
  return out;
}

GeneratorOptions generator_options(const config::GenerationConfig& g, uint64_t seed) {
  GeneratorOptions o;
  o.beam = g.beam;
  o.max_len_a = g.max_len_a;
  o.max_len_b = g.max_len_b;
  o.match_source_len = g.match_source_len;
  o.min_len = g.min_len;
  o.normalize_scores = !g.unnormalized;
  o.lenpen = g.lenpen;
  o.unkpen = g.unkpen;
  o.no_repeat_ngram_size = g.no_repeat_ngram_size;
  o.temperature = g.temperature;
  o.sampling = g.sampling;
  o.sampling_topk = g.sampling_topk;
  o.sampling_topp = g.sampling_topp;
  o.diverse_beam_groups = g.diverse_beam_groups;
  o.diverse_beam_strength = g.diverse_beam_strength;
  o.seed = seed;
  o.need_attn = !g.print_alignment.empty() || !g.replace_unk.empty();
  o.retain_dropout = g.retain_dropout;
  o.ordered_constraints = g.constraints != "unordered";
  return o;
}

SequenceGenerator::SequenceGenerator(const GeneratorOptions& options, const Vocabulary& vocabulary)
    : options_(options), vocab_(vocabulary) {
  if (vocab_.size < 2)
    raise<UserError>("the target vocabulary has {} entries; generation needs at least 2", vocab_.size);
  options_.beam = std::min(options_.beam, vocab_.size - 1);  // pad is never selected
  if (options_.beam <= 0) raise<UserError>("`beam` must be greater than 0, but is {} instead.", options.beam);
  if (!options_.sampling && (options_.sampling_topk > 0 || options_.sampling_topp > 0)) {
    raise<UserError>("--sampling-topk and --sampling-topp require --sampling");
  }
  if (options_.temperature <= 0) {
    raise<UserError>("`temperature` must be greater than 0, but is {} instead.", options_.temperature);
  }
  const bool diverse = options_.diverse_beam_groups > 0;
  if (int{options_.sampling} + int{diverse} + int{options_.match_source_len} > 1) {
    raise<UserError>("--sampling, --diverse-beam-groups and --match-source-len each choose the search; use one");
  }
  if (diverse && options_.beam % options_.diverse_beam_groups != 0) {
    raise<UserError>("`diverse_beam_groups` must divide `beam` ({}), but is {} instead.", options_.beam,
                     options_.diverse_beam_groups);
  }
}

// The search's state between steps. Rows: N = B * K hypotheses, K per sentence still searched.
struct SequenceGenerator::Search {
  int64_t bsz = 0;      // B: sentences still searched
  int64_t max_len = 0;  // the longest output, </s> not counted
  c10::Device device = c10::kCPU;
  at::TensorOptions long_options;
  models::EncoderOut encoder_out;  // (B, ...) before step 1, then (N, ...)
  models::IncrementalState cache;
  bool one_row_per_sentence = true;  // step 0 decodes B rows; step 1 expands the caches to N
  at::Tensor source_lengths;         // (B) int64
  at::Tensor prefix_tokens;          // (B, P) forced first tokens, or undefined
  at::Tensor tokens;                 // (N, max_len + 2) int64: </s>, then each step's word
  at::Tensor scores;                 // (N, max_len + 1) float32: cumulative log-probabilities
  at::Tensor blacklist;              // (B, K) bool: beams that finalized and must not continue
  at::Tensor attn;                   // (N, max_len + 1, S) with need_attn: each row's attention at each step
  at::Tensor src_cpu;                // (B0, S) the sources as given, with need_attn
  at::Tensor reorder_state;          // (N) the rows of the last step the hypotheses continue
  at::Tensor batch_idxs;             // (B') the sentences kept after the last step, or undefined
  at::Generator rng;                 // sampling's
  std::vector<std::vector<Hypothesis>> finalized;  // per sentence of the batch as given
  std::vector<bool> finished;
  int64_t num_remaining = 0;
  // Lexically constrained search: each live sentence's hypotheses' states, and its candidates'.
  bool constrained = false;
  std::vector<std::vector<ConstraintState>> constraint_states, candidate_states;
};

// Encode once. Step 0 decodes one row per sentence (its K hypotheses are all "</s>"), so the
// cross-attention keys/values are projected for B rows, not B * K; step 1 expands every cache
// and the encoder states to K rows per sentence.
SequenceGenerator::Search SequenceGenerator::start(models::EncoderDecoderModel& model, const at::Tensor& src_tokens,
                                                   const at::Tensor& src_lengths, const at::Tensor& prefix_tokens,
                                                   const std::vector<Constraints>& constraints) const {
  Search s;
  const int64_t beam = options_.beam;
  s.bsz = src_tokens.size(0);
  s.device = src_tokens.device();
  s.long_options = torch::TensorOptions().dtype(torch::kInt64).device(s.device);
  s.source_lengths = src_lengths.to(s.long_options);
  s.max_len = options_.match_source_len
                  ? s.source_lengths.max().item<int64_t>()
                  : std::min(static_cast<int64_t>(options_.max_len_a * static_cast<double>(src_tokens.size(1)) +
                                                  static_cast<double>(options_.max_len_b)),
                             model.max_target_positions() - 1);
  if (options_.min_len > s.max_len) {
    raise<UserError>("`min_len` must be at most the longest output allowed ({} tokens), but is {} instead.", s.max_len,
                     options_.min_len);
  }
  if (options_.sampling) s.rng = at::detail::createCPUGenerator(options_.seed);
  s.encoder_out = model.encode(src_tokens, src_lengths);
  s.cache.need_attn = options_.need_attn;
  s.cache.buffers = std::make_shared<nn::CacheBuffers>(s.max_len + 1);  // a position per step
  if (options_.need_attn) s.src_cpu = src_tokens.to(torch::kCPU).contiguous();
  s.scores =
      torch::zeros({s.bsz * beam, s.max_len + 1}, torch::TensorOptions().dtype(torch::kFloat32).device(s.device));
  s.tokens = torch::full({s.bsz * beam, s.max_len + 2}, vocab_.pad, s.long_options);
  s.tokens.select(1, 0).fill_(vocab_.eos);
  s.blacklist = torch::zeros({s.bsz, beam}, torch::TensorOptions().dtype(torch::kBool).device(s.device));
  s.prefix_tokens = prefix_tokens;
  s.finalized.resize(static_cast<size_t>(s.bsz));
  s.finished.assign(static_cast<size_t>(s.bsz), false);
  s.num_remaining = s.bsz;
  if (!constraints.empty()) {
    if (static_cast<int64_t>(constraints.size()) != s.bsz)
      raise<OperationalError>("{} sentences but constraints for {}", s.bsz, constraints.size());
    if (options_.sampling || options_.diverse_beam_groups > 0)
      raise<UserError>("constraints need plain beam search, not sampling or diverse beam search");
    s.constrained = true;
    for (const Constraints& c : constraints)
      s.constraint_states.emplace_back(static_cast<size_t>(beam),
                                       ConstraintState::start(c, options_.ordered_constraints));
  }
  return s;
}

// Reorders the decoder's cache (and the encoder's states, when sentences left the batch or at
// step 1's expansion) to the hypotheses that continue.
void SequenceGenerator::reorder_cache(Search& s) const {
  if (!s.reorder_state.defined()) return;
  const int64_t beam = options_.beam;
  at::Tensor kept_rows;
  if (s.batch_idxs.defined()) {
    // Rows of removed sentences are gone: shift each kept sentence's beam indices.
    at::Tensor corr = s.batch_idxs - torch::arange(s.batch_idxs.numel(), s.long_options);
    s.reorder_state = (s.reorder_state.view({-1, beam}) + corr.unsqueeze(-1) * beam).view(-1);
    // (B') -> (B' * K): the old rows of the kept sentences.
    kept_rows = (s.batch_idxs.unsqueeze(1) * beam + torch::arange(beam, s.long_options).unsqueeze(0)).view(-1);
  }
  if (s.one_row_per_sentence) {
    // Old row r of the B * K numbering is cache row r / K.
    at::Tensor encoder_rows = kept_rows.defined() ? kept_rows : torch::arange(s.bsz * beam, s.long_options);
    encoder_rows = encoder_rows.div(beam, "floor");
    at::Tensor self_rows = s.reorder_state.div(beam, "floor");
    for (auto& layer : s.cache.layers) {
      layer.self_attn.reorder(self_rows);
      layer.encoder_attn.reorder(encoder_rows);
    }
    s.encoder_out = models::EncoderDecoderModel::reorder_encoder_out(s.encoder_out, encoder_rows);
    s.one_row_per_sentence = false;
    return;
  }
  // The K rows of a sentence share its encoder states, so a reordering within sentences leaves
  // encoder-side data unchanged: it is only subset when sentences leave the batch (fairseq
  // reorders it every step; the values are the same).
  for (auto& layer : s.cache.layers) {
    layer.self_attn.reorder(s.reorder_state);
    if (kept_rows.defined()) layer.encoder_attn.reorder(kept_rows);
  }
  if (kept_rows.defined()) s.encoder_out = models::EncoderDecoderModel::reorder_encoder_out(s.encoder_out, kept_rows);
}

// One decoder step: the log-probabilities (N, V) of every hypothesis' next word (and, with
// need_attn, the step's attention kept in s.attn).
at::Tensor SequenceGenerator::decode_step(models::EncoderDecoderModel& model, Search& s, int64_t step) const {
  const int64_t beam = options_.beam, vocab = vocab_.size;
  at::Tensor lprobs;  // (N, V), N = B * K
  if (s.one_row_per_sentence) {
    at::Tensor first = s.tokens.narrow(1, 0, 1).index_select(0, torch::arange(s.bsz, s.long_options) * beam);  // (B, 1)
    at::Tensor logits = model.decode_step(first, s.encoder_out, s.cache);  // (B, 1, V)
    if (options_.temperature != 1.0) logits = logits / options_.temperature;
    // (B, 1, V) -> (B, V) -> (B * K, V)
    lprobs = models::EncoderDecoderModel::log_probs(logits).view({s.bsz, vocab}).repeat_interleave(beam, 0);
  } else {
    at::Tensor logits = model.decode_step(s.tokens.narrow(1, 0, step + 1), s.encoder_out, s.cache);  // (N, 1, V)
    if (options_.temperature != 1.0) logits = logits / options_.temperature;
    lprobs = models::EncoderDecoderModel::log_probs(logits).view({-1, vocab});  // (N, 1, V) -> (N, V)
  }
  if (options_.need_attn) {
    at::Tensor step_attn = s.cache.attn.to(torch::kFloat32);                       // (N, S), or (B, S) at step 0
    if (s.one_row_per_sentence) step_attn = step_attn.repeat_interleave(beam, 0);  // (B, S) -> (B * K, S)
    if (!s.attn.defined()) s.attn = torch::zeros({s.bsz * beam, s.max_len + 1, step_attn.size(1)}, step_attn.options());
    s.attn.select(1, step).copy_(step_attn);
  }
  return lprobs;
}

// The constraints on this step's words: never <pad>, --unkpen, only </s> at the maximum length,
// forced prefixes, no </s> before min_len, no repeated n-grams, --match-source-len's lengths.
void SequenceGenerator::constrain(const Search& s, int64_t step, at::Tensor& lprobs) const {
  const int64_t eos = vocab_.eos, pad = vocab_.pad, vocab = vocab_.size;
  lprobs.select(1, pad).fill_(kNegInf);
  if (options_.unkpen != 0) lprobs.select(1, vocab_.unk).sub_(options_.unkpen);
  if (step >= s.max_len) {
    lprobs.narrow(1, 0, eos).fill_(kNegInf);
    lprobs.narrow(1, eos + 1, vocab - eos - 1).fill_(kNegInf);
  }
  if (s.prefix_tokens.defined() && step < s.prefix_tokens.size(1) && step < s.max_len) {
    at::Tensor forced = s.prefix_tokens.select(1, step).repeat_interleave(options_.beam).unsqueeze(-1);  // (N, 1)
    at::Tensor forced_lprobs = lprobs.gather(1, forced);
    at::Tensor only_forced = torch::full_like(lprobs, kNegInf).scatter(1, forced, forced_lprobs);
    lprobs = torch::where(forced.ne(pad), only_forced, lprobs);
  } else if (step < options_.min_len) {
    lprobs.select(1, eos).fill_(kNegInf);
  }
  if (options_.no_repeat_ngram_size > 0) block_repeated_ngrams(s.tokens, step, options_.no_repeat_ngram_size, lprobs);
  if (options_.match_source_len) {
    // fairseq's LengthConstrainedBeamSearch with both lengths = the source length L: </s> is
    // impossible before step L and costs nothing from step L on (over min_len and prefixes).
    at::Tensor eos_lprobs = lprobs.select(1, eos);
    eos_lprobs.fill_(0);
    eos_lprobs.masked_fill_(s.source_lengths.repeat_interleave(options_.beam).gt(step), kNegInf);  // (B) -> (N)
  }
}

// The search strategy's candidates (B, C) for this step.
Candidates SequenceGenerator::candidates(Search& s, int64_t step, const at::Tensor& lprobs) const {
  const int64_t beam = options_.beam;
  at::Tensor cumulative = step > 0 ? s.scores.select(1, step - 1).view({s.bsz, beam}) : at::Tensor();
  at::Tensor lprobs3 = lprobs.view({s.bsz, beam, vocab_.size});
  if (options_.sampling)
    return sampling_step(step, lprobs3, cumulative, {options_.sampling_topk, options_.sampling_topp}, s.rng);
  if (options_.diverse_beam_groups > 0)
    return diverse_beam_search_step(step, lprobs3, cumulative, options_.diverse_beam_groups,
                                    options_.diverse_beam_strength);
  if (s.constrained) {
    // A hypothesis that reaches the longest output ends there, met or not (fairseq stops with an
    // assertion instead).
    ConstrainedCandidates c =
        constrained_beam_search_step(step, lprobs3, cumulative, s.constraint_states, vocab_.eos, step < s.max_len);
    s.candidate_states = std::move(c.states);
    return std::move(c.candidates);
  }
  return beam_search_step(step, lprobs3, cumulative);
}

// Hypothesis `i` of the ones finalized at `step` (rows of the CPU copies), of sentence `sent`.
Hypothesis SequenceGenerator::make_hypothesis(const Search& s, const Finalizing& f, int64_t i, int64_t step,
                                              int64_t sent, int64_t unfin) const {
  Hypothesis h;
  const int64_t* t = f.tokens.data_ptr<int64_t>() + i * (step + 1);
  const float* p = f.positional.data_ptr<float>() + i * (step + 1);
  h.tokens.assign(t, t + step + 1);
  h.positional_scores.assign(p, p + step + 1);
  h.score = f.scores.data_ptr<float>()[i];
  if (f.attn.defined()) {
    h.attention = f.attn[i].clone();
    const int64_t* src = s.src_cpu.data_ptr<int64_t>() + sent * s.src_cpu.size(1);
    h.alignment = hard_alignment(h.attention, std::vector<int64_t>(src, src + s.src_cpu.size(1)), h.tokens, vocab_.pad,
                                 vocab_.eos);
  }
  // fairseq (>= 0.12.3): an output longer than its source keeps its place with score -inf.
  if (f.lengths.defined() && step > f.lengths.data_ptr<int64_t>()[unfin]) h.score = kNegInf;
  return h;
}

// Row -> sentence of the batch as given: sentences already finished were dropped from the batch.
std::vector<int64_t> SequenceGenerator::live_sentences(const Search& s) {
  std::vector<int64_t> out;
  for (size_t k = 0; k < s.finished.size(); ++k)
    if (!s.finished[k]) out.push_back(static_cast<int64_t>(k));
  return out;
}

// Finalizes the hypotheses `bbsz_idx` (rows of tokens/scores) that end with </s> at `step`,
// preferring earlier ones; returns the batch rows (unfinished numbering) of sentences now done.
std::vector<int64_t> SequenceGenerator::finalize(Search& s, int64_t step, const at::Tensor& bbsz_idx,
                                                 at::Tensor eos_scores) const {
  const int64_t beam = options_.beam;
  at::Tensor hyp_tokens = s.tokens.narrow(1, 1, step + 1).index_select(0, bbsz_idx);
  hyp_tokens.select(1, step).fill_(vocab_.eos);
  at::Tensor pos = s.scores.narrow(1, 0, step + 1).index_select(0, bbsz_idx);
  pos.select(1, step).copy_(eos_scores);
  if (step > 0) pos.narrow(1, 1, step).copy_(pos.narrow(1, 1, step) - pos.narrow(1, 0, step));
  if (options_.normalize_scores) eos_scores = eos_scores / std::pow(static_cast<double>(step + 1), options_.lenpen);
  Finalizing f;
  f.scores = eos_scores.to(torch::kCPU).contiguous();
  f.tokens = hyp_tokens.to(torch::kCPU).contiguous();
  f.positional = pos.to(torch::kCPU).contiguous();
  // (n, step + 1, S): the attention of the hypotheses' tokens
  if (s.attn.defined()) f.attn = s.attn.narrow(1, 0, step + 1).index_select(0, bbsz_idx).to(torch::kCPU);
  if (options_.match_source_len) f.lengths = s.source_lengths.to(torch::kCPU);
  const std::vector<int64_t> sentence_of = live_sentences(s);
  std::map<int64_t, int64_t> seen;  // sentence -> unfinished row
  at::Tensor idx_cpu = bbsz_idx.to(torch::kCPU).contiguous();
  const int64_t* idx = idx_cpu.data_ptr<int64_t>();
  for (int64_t i = 0; i < idx_cpu.numel(); ++i) {
    const int64_t unfin = idx[i] / beam;
    const int64_t sent = sentence_of[static_cast<size_t>(unfin)];
    seen.emplace(sent, unfin);
    auto& list = s.finalized[static_cast<size_t>(sent)];
    if (static_cast<int64_t>(list.size()) < beam) list.push_back(make_hypothesis(s, f, i, step, sent, unfin));
  }
  std::vector<int64_t> newly_finished;
  for (const auto& [sent, unfin] : seen) {
    auto k = static_cast<size_t>(sent);
    if (!s.finished[k] && (static_cast<int64_t>(s.finalized[k].size()) == beam || step == s.max_len)) {
      s.finished[k] = true;
      newly_finished.push_back(unfin);
    }
  }
  return newly_finished;
}

// Constrained search: the rows (sentences of this step's batch) whose candidates are all -inf, and
// the sentences they are: hypotheses that cannot meet their constraints can end no other way.
std::vector<std::pair<int64_t, int64_t>> SequenceGenerator::dead_ends(const Search& s, const Candidates& cand) const {
  const at::Tensor best = std::get<0>(cand.scores.max(1)).to(torch::kCPU).contiguous();
  std::vector<std::pair<int64_t, int64_t>> out;
  std::vector<int64_t> sentence_of;  // (before this step finalizes any)
  for (int64_t r = 0; r < best.size(0); ++r) {
    if (best.data_ptr<float>()[r] != kNegInf) continue;
    if (sentence_of.empty()) sentence_of = live_sentences(s);
    out.emplace_back(r, sentence_of[static_cast<size_t>(r)]);
  }
  return out;
}

// The sentences of `dead` (row, sentence) that are not done yet are done with the hypotheses they
// have (fairseq's search runs on to the maximum length and stops with an assertion).
void SequenceGenerator::give_up(Search& s, const std::vector<std::pair<int64_t, int64_t>>& dead,
                                std::vector<int64_t>& done) const {
  for (const auto& [row, sentence] : dead) {
    if (s.finished[static_cast<size_t>(sentence)]) continue;
    s.finished[static_cast<size_t>(sentence)] = true;
    done.push_back(row);
    --s.num_remaining;
  }
}

// Drops the sentences `done` (rows of this step's batch) from the search and the candidates.
void SequenceGenerator::drop_sentences(Search& s, Candidates& cand, at::Tensor& eos_mask,
                                       const std::vector<int64_t>& done) const {
  const int64_t beam = options_.beam;
  const int64_t new_bsz = s.bsz - static_cast<int64_t>(done.size());
  at::Tensor batch_mask = torch::ones({s.bsz}, torch::TensorOptions().dtype(torch::kBool).device(s.device));
  batch_mask.index_fill_(0, torch::tensor(done, torch::kInt64).to(s.device), false);
  const at::Tensor kept = batch_mask.nonzero().squeeze(-1);
  s.batch_idxs = kept;
  eos_mask = eos_mask.index_select(0, kept);
  cand.beams = cand.beams.index_select(0, kept);
  cand.scores = cand.scores.index_select(0, kept);
  cand.tokens = cand.tokens.index_select(0, kept);
  if (s.prefix_tokens.defined()) s.prefix_tokens = s.prefix_tokens.index_select(0, kept);
  s.source_lengths = s.source_lengths.index_select(0, kept);
  s.blacklist = s.blacklist.index_select(0, kept);
  if (s.constrained) {
    const at::Tensor rows = kept.to(torch::kCPU).contiguous();
    std::vector<std::vector<ConstraintState>> states;
    for (int64_t i = 0; i < rows.numel(); ++i)
      states.push_back(std::move(s.candidate_states[static_cast<size_t>(rows.data_ptr<int64_t>()[i])]));
    s.candidate_states = std::move(states);
  }
  // (B * K, L) -> (B, K * L), keep rows -> (B' * K, L)
  s.scores = s.scores.view({s.bsz, -1}).index_select(0, kept).view({new_bsz * beam, -1});
  s.tokens = s.tokens.view({s.bsz, -1}).index_select(0, kept).view({new_bsz * beam, -1});
  if (s.attn.defined()) {
    // (B * K, L, S) -> (B, K * L * S), keep rows -> (B' * K, L, S)
    const int64_t length = s.attn.size(1), width = s.attn.size(2);
    s.attn = s.attn.view({s.bsz, -1}).index_select(0, kept).view({new_bsz * beam, length, width});
  }
  s.bsz = new_bsz;
}

// The `beam` best candidates that did not finalize continue: finalized or blacklisted ones sort
// after every active one. Writes their words and scores at `step` and keeps their rows.
void SequenceGenerator::advance(Search& s, const Candidates& cand, at::Tensor& eos_mask, int64_t step) const {
  const int64_t beam = options_.beam;
  const int64_t cand_size = cand.scores.size(1);
  at::Tensor cand_bbsz_idx = cand.beams + (torch::arange(s.bsz, s.long_options) * beam).unsqueeze(1);
  eos_mask.narrow(1, 0, beam).logical_or_(s.blacklist);
  at::Tensor active_mask =
      eos_mask.to(torch::kInt64) * cand_size + torch::arange(cand_size, s.long_options).unsqueeze(0);
  auto [new_blacklist, active_hypos] = active_mask.topk(beam, 1, /*largest=*/false);
  s.blacklist = new_blacklist.ge(cand_size).narrow(1, 0, beam);
  at::Tensor active_bbsz_idx = cand_bbsz_idx.gather(1, active_hypos).view(-1);
  at::Tensor active_scores = cand.scores.gather(1, active_hypos).view(-1);
  s.tokens = keep_rows(s.tokens, active_bbsz_idx, step + 1);
  s.tokens.select(1, step + 1).copy_(cand.tokens.gather(1, active_hypos).view(-1));
  s.scores = keep_rows(s.scores, active_bbsz_idx, step);
  s.scores.select(1, step).copy_(active_scores);
  if (s.attn.defined()) s.attn = keep_rows(s.attn, active_bbsz_idx, step + 1);
  s.reorder_state = active_bbsz_idx;
  if (s.constrained) {  // the hypotheses that continue take their candidates' states
    const at::Tensor chosen = active_hypos.to(torch::kCPU).contiguous();
    const auto pick = chosen.accessor<int64_t, 2>();
    std::vector<std::vector<ConstraintState>> states(static_cast<size_t>(s.bsz));
    for (int64_t b = 0; b < s.bsz; ++b)
      for (int64_t k = 0; k < beam; ++k)
        states[static_cast<size_t>(b)].push_back(
            s.candidate_states[static_cast<size_t>(b)][static_cast<size_t>(pick[b][k])]);
    s.constraint_states = std::move(states);
  }
}

std::vector<std::vector<Hypothesis>> SequenceGenerator::generate(models::EncoderDecoderModel& model,
                                                                 const at::Tensor& src_tokens,
                                                                 const at::Tensor& src_lengths,
                                                                 const at::Tensor& prefix_tokens,
                                                                 const std::vector<Constraints>& constraints) const {
  c10::InferenceMode inference;
  nn::PackedLinearScope packed_weights;  // CPU: each weight packed once for the step GEMMs
  if (model.is_training() && !options_.retain_dropout) model.eval();
  const int64_t beam = options_.beam;
  Search s = start(model, src_tokens, src_lengths, prefix_tokens, constraints);
  // The encoder's freed activations go back to the system before the decoder's caches grow: kept
  // for reuse (cli/allocator.cpp), they would sit beside the caches until the next batch's encoder.
  core::release_free_memory();
  for (int64_t step = 0; step <= s.max_len; ++step) {  // one extra step for </s>
    reorder_cache(s);
    at::Tensor lprobs = decode_step(model, s, step);
    constrain(s, step, lprobs);
    Candidates cand = candidates(s, step, lprobs);
    // Candidates ending in </s> among the top `beam` finalize (unless blacklisted or -inf).
    at::Tensor eos_mask = cand.tokens.eq(vocab_.eos) & cand.scores.ne(kNegInf);
    eos_mask.narrow(1, 0, beam).masked_fill_(s.blacklist, false);
    at::Tensor top_eos = eos_mask.narrow(1, 0, beam);
    at::Tensor cand_bbsz_idx = cand.beams + (torch::arange(s.bsz, s.long_options) * beam).unsqueeze(1);
    at::Tensor eos_bbsz_idx = cand_bbsz_idx.narrow(1, 0, beam).masked_select(top_eos);
    std::vector<int64_t> done;
    const auto dead = s.constrained ? dead_ends(s, cand) : std::vector<std::pair<int64_t, int64_t>>();
    if (eos_bbsz_idx.numel() > 0) {
      done = finalize(s, step, eos_bbsz_idx, cand.scores.narrow(1, 0, beam).masked_select(top_eos));
      s.num_remaining -= static_cast<int64_t>(done.size());
    }
    give_up(s, dead, done);
    if (s.num_remaining == 0) break;
    if (step >= s.max_len) raise<OperationalError>("beam search: sentences unfinished at the maximum length");
    if (!done.empty()) {
      drop_sentences(s, cand, eos_mask, done);
    } else {
      s.batch_idxs = at::Tensor();
    }
    advance(s, cand, eos_mask, step);
  }
  for (auto& list : s.finalized) {
    std::stable_sort(list.begin(), list.end(),
                     [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
  }
  return std::move(s.finalized);
}

}  // namespace fairseq_cpp::generation
