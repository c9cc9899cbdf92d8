#pragma once
// Validation during training (fairseq_cli/train.py's validate): the loss on every valid subset,
// this rank's share of its batches, summed across ranks; the progress line of each subset; and,
// with a SearchMetric handed in by tasks/ (BLEU needs the search, which trainer/ may not include),
// that metric from statistics summed across ranks. The first subset's result picks the best
// checkpoint and feeds early stopping.
//
//   Validator validator(validation_options(cfg, filter, batching, rank), subsets, make_bleu_or_null);
//   std::optional<Validation> v = validator.validate(trainer, epoch, state.best);
//   double m = validator.metric(*v);   // best_checkpoint_metric of it

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/core/progress.h"
#include "fairseq_cpp/criterions/cross_entropy.h"
#include "fairseq_cpp/data/batching.h"
#include "fairseq_cpp/data/language_pair_dataset.h"
#include "fairseq_cpp/trainer/trainer.h"

namespace fairseq_cpp::trainer {

// One validation's results on one subset: the losses, and the search metric (BLEU) when there is one.
struct Validation {
  criterions::LossStats loss;
  std::optional<double> bleu;
};

// A corpus metric computed from the search's output (BLEU), from sufficient statistics that sum
// across ranks.
class SearchMetric {
 public:
  virtual ~SearchMetric() = default;
  // Searches one collated batch (on `device`) and adds its sentences' statistics.
  virtual void add(models::EncoderDecoderModel& model, const data::Batch& batch, const c10::Device& device) = 0;
  // Sums over the batches added so far.
  virtual std::vector<double> statistics() const = 0;
  // The metric of `statistics` summed over every rank.
  virtual double score(const std::vector<double>& statistics) const = 0;
  // Logs a sample hypothesis and reference where asked to (rank 0 calls it after each subset).
  virtual void log_samples() const = 0;
};
// Makes a fresh SearchMetric for each subset; empty = no search metric.
using SearchMetricFactory = std::function<std::unique_ptr<SearchMetric>()>;

struct ValidationOptions {
  std::string best_checkpoint_metric = "loss";       // loss, nll_loss, ppl, or bleu (with a SearchMetric)
  bool maximize = false;                             // a higher metric is better
  int64_t validate_after_updates = 0;                // no validation before this many updates
  bool validate_with_ema = false;                    // validate the EMA of the weights (the trainer's)
  uint32_t seed = 1;                                 // the batches' order (unshuffled) and the search's sampling
  data::SizeFilterOptions filter;                    // what is too long (`what` is set to each subset's name)
  data::BatchingOptions batching;                    // the valid batches' sizes
  core::LogFormat format = core::LogFormat::simple;  // the progress line (rank 0; the others print none)
  std::string tensorboard_logdir;                    // rank 0's TensorBoard folder; empty = none
};

// The validation options of `cfg`, with the training's size filter as the base and the validation
// batch sizes (tasks' batching_options for validation), for rank `rank`.
ValidationOptions validation_options(const config::Config& cfg, const data::SizeFilterOptions& filter,
                                     const data::BatchingOptions& batching, int rank);

// A UserError before any work when validation does not compute `name` (fairseq's
// best_checkpoint_metric): loss, nll_loss, ppl, or bleu with `with_search_metric`.
void check_metric(const std::string& name, bool with_search_metric);

using ValidSubset = std::pair<std::string, std::shared_ptr<data::LanguagePairDataset>>;

class Validator {
 public:
  Validator(ValidationOptions options, std::vector<ValidSubset> subsets, SearchMetricFactory search_metric);

  // Validates on every subset (sharded across ranks, summed) and prints each one's line with the
  // best metric so far (`best`, before this validation); returns the first subset's results, or
  // nothing when there is no subset or it is before validate_after_updates.
  std::optional<Validation> validate(Trainer& trainer, int64_t epoch, std::optional<double> best);
  // best_checkpoint_metric of `v`.
  double metric(const Validation& v) const;
  // Whether `value` is better than `best` (any value is better than none).
  bool better(double value, std::optional<double> best) const;

 private:
  // This rank's share of one subset, summed across ranks.
  Validation validate_subset(Trainer& trainer, const ValidSubset& subset, size_t* batches);
  // The progress line of one subset.
  void print(const Validation& v, const std::string& name, int64_t epoch, size_t batches, int64_t updates,
             std::optional<double> best) const;

  ValidationOptions o_;
  std::vector<ValidSubset> subsets_;
  SearchMetricFactory search_metric_;
};

}  // namespace fairseq_cpp::trainer
