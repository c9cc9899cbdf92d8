#pragma once
// BLEU during validation (fairseq's --eval-bleu): beam search over this rank's share of the valid
// batches, hypotheses and references turned back into text as fairseq's translation task does
// (ids -> words with <unk> written apart, BPE removed, detokenized), and sacreBLEU's BLEU
// statistics, which the caller sums across ranks before the score: BLEU of the whole set, not an
// average of the ranks' BLEU.
//
//   BleuValidation bleu(cfg.task, tgt_dict, seed);
//   for (batch of this rank) bleu.add(model, batch);
//   double score = bleu.score(summed_across_ranks(bleu.statistics()));

#include <memory>
#include <string>
#include <vector>

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/data/language_pair_dataset.h"
#include "fairseq_cpp/generation/sequence_generator.h"
#include "fairseq_cpp/scoring/scorer.h"
#include "fairseq_cpp/trainer/validation.h"

namespace fairseq_cpp::tasks {

class BleuValidation : public trainer::SearchMetric {
 public:
  // `task`'s eval_bleu_* keys; the search's options are config::eval_bleu_generation(task.eval_bleu_args).
  BleuValidation(const config::TaskConfig& task, const data::Dictionary& tgt_dict, uint64_t seed);

  // Searches one collated batch (on the model's device) and adds each sentence's statistics.
  void add(models::EncoderDecoderModel& model, const data::Batch& batch, const c10::Device& device) override;
  // Sums over the batches added so far.
  std::vector<double> statistics() const override { return scorer_->statistics(); }
  // sacreBLEU's corpus BLEU of `statistics` (summed over every rank).
  double score(const std::vector<double>& statistics) const override { return scorer_->score_from(statistics).score; }
  // With task.eval_bleu_print_samples: logs the first hypothesis and reference.
  void log_samples() const override;
  // The first hypothesis and reference seen (fairseq's --eval-bleu-print-samples), "" before any.
  const std::string& sample_hypothesis() const { return sample_hypothesis_; }
  const std::string& sample_reference() const { return sample_reference_; }

 private:
  std::string decode(const std::vector<int64_t>& ids, const std::string& unk_string) const;

  const data::Dictionary& dict_;
  bool print_samples_ = false;
  std::string remove_bpe_;
  std::string detok_language_;  // empty: no detokenizer ("space")
  generation::SequenceGenerator generator_;
  std::unique_ptr<scoring::Scorer> scorer_;
  std::string sample_hypothesis_, sample_reference_;
};

}  // namespace fairseq_cpp::tasks
