#include "fairseq_cpp/tasks/bleu_validation.h"

#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/generation/output.h"
#include "fairseq_cpp/scoring/detokenizer.h"

namespace fairseq_cpp::tasks {
namespace {

std::vector<int64_t> without_pad(const at::Tensor& row, int64_t pad) {
  at::Tensor cpu = row.to(at::kCPU).contiguous();
  const int64_t* p = cpu.data_ptr<int64_t>();
  std::vector<int64_t> out;
  for (int64_t i = 0; i < cpu.numel(); ++i)
    if (p[i] != pad) out.push_back(p[i]);
  return out;
}

scoring::ScoringOptions bleu_options(const config::TaskConfig& task) {
  scoring::ScoringOptions o;  // sacrebleu.corpus_bleu's defaults: 13a, exp smoothing
  if (task.eval_tokenized_bleu) o.tokenize = "none";
  return o;
}

}  // namespace

BleuValidation::BleuValidation(const config::TaskConfig& task, const data::Dictionary& tgt_dict, uint64_t seed)
    : dict_(tgt_dict),
      print_samples_(task.eval_bleu_print_samples),
      remove_bpe_(task.eval_bleu_remove_bpe),
      detok_language_(task.eval_bleu_detok == "moses" ? config::eval_bleu_detok_language(task.eval_bleu_detok_args) : ""),
      generator_(generation::generator_options(config::eval_bleu_generation(task.eval_bleu_args), seed),
                 {tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk(), tgt_dict.size()}),
      scorer_(scoring::make_scorer("bleu", bleu_options(task))) {}

void BleuValidation::log_samples() const {
  if (!print_samples_) return;
  log::info("valid", "example hypothesis: {}", sample_hypothesis_);
  log::info("valid", "example reference: {}", sample_reference_);
}

std::string BleuValidation::decode(const std::vector<int64_t>& ids, const std::string& unk_string) const {
  std::string text = generation::ids_to_string(dict_, ids, remove_bpe_, unk_string);
  return detok_language_.empty() ? text : scoring::moses_detokenize(text, detok_language_);
}

void BleuValidation::add(models::EncoderDecoderModel& model, const data::Batch& batch, const c10::Device& device) {
  if (batch.empty()) return;
  auto hypos = generator_.generate(model, batch.src_tokens.to(device), batch.src_lengths.to(device));
  for (size_t i = 0; i < hypos.size(); ++i) {
    std::string hypothesis = hypos[i].empty() ? "" : decode(hypos[i][0].tokens, "UNKNOWNTOKENINHYP");
    std::string reference = decode(without_pad(batch.target[static_cast<int64_t>(i)], dict_.pad()), "UNKNOWNTOKENINREF");
    if (sample_hypothesis_.empty() && sample_reference_.empty()) {
      sample_hypothesis_ = hypothesis;
      sample_reference_ = reference;
    }
    scorer_->add(hypothesis, std::vector<std::string>{reference});
  }
}

}  // namespace fairseq_cpp::tasks
