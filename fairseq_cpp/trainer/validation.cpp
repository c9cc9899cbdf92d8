#include "fairseq_cpp/trainer/validation.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/distributed/distributed_utils.h"

namespace fairseq_cpp::trainer {
namespace {

// The loss sums and the search metric's statistics ("bleu_00", ...) as one dictionary to sum.
std::map<std::string, distributed::DictValue> sums_of(const criterions::LossStats& local,
                                                      const std::vector<double>& metric_local) {
  std::map<std::string, distributed::DictValue> values{{"loss", local.loss_sum},
                                                       {"nll_loss", local.nll_loss_sum},
                                                       {"sample_size", local.sample_size},
                                                       {"ntokens", local.ntokens},
                                                       {"nsentences", local.nsentences}};
  for (size_t k = 0; k < metric_local.size(); ++k) values.emplace(fmt::format("bleu_{:02d}", k), metric_local[k]);
  return values;
}

criterions::LossStats loss_of(const std::map<std::string, distributed::DictValue>& sums) {
  criterions::LossStats total;
  total.loss_sum = std::get<double>(sums.at("loss"));
  total.nll_loss_sum = std::get<double>(sums.at("nll_loss"));
  total.sample_size = std::get<int64_t>(sums.at("sample_size"));
  total.ntokens = std::get<int64_t>(sums.at("ntokens"));
  total.nsentences = std::get<int64_t>(sums.at("nsentences"));
  return total;
}

}  // namespace

ValidationOptions validation_options(const config::Config& cfg, const data::SizeFilterOptions& filter,
                                     const data::BatchingOptions& batching, int rank) {
  ValidationOptions o;
  o.best_checkpoint_metric = cfg.checkpoint.best_checkpoint_metric;
  o.maximize = cfg.checkpoint.maximize_best_checkpoint_metric;
  o.validate_after_updates = cfg.dataset.validate_after_updates;
  o.validate_with_ema = cfg.ema.validate_with_ema;
  o.seed = static_cast<uint32_t>(cfg.common.seed);
  o.filter = filter;
  o.filter.skip_invalid = cfg.dataset.skip_invalid_size_inputs_valid_test;
  o.batching = batching;
  o.format = rank == 0 ? core::parse_log_format(cfg.common.no_progress_bar ? "none" : cfg.common.log_format, false)
                       : core::LogFormat::none;
  o.tensorboard_logdir = rank == 0 ? cfg.common.tensorboard_logdir : "";
  return o;
}

void check_metric(const std::string& name, bool with_search_metric) {
  if (name == "loss" || name == "nll_loss" || name == "ppl" || (name == "bleu" && with_search_metric)) return;
  if (name == "bleu")
    raise<UserError>(
        "`checkpoint.best_checkpoint_metric` is bleu, but validation computes BLEU only with "
        "`task.eval_bleu` true (--eval-bleu).");
  raise<UserError>(
      "`checkpoint.best_checkpoint_metric` {} is not computed during validation; use loss, nll_loss, "
      "ppl, or bleu with --eval-bleu.",
      name);
}

Validator::Validator(ValidationOptions options, std::vector<ValidSubset> subsets, SearchMetricFactory search_metric)
    : o_(std::move(options)), subsets_(std::move(subsets)), search_metric_(std::move(search_metric)) {}

double Validator::metric(const Validation& v) const {
  const std::string& name = o_.best_checkpoint_metric;
  if (name == "nll_loss") return v.loss.nll_loss();
  if (name == "ppl") return v.loss.perplexity();
  if (name == "bleu") return v.bleu.value_or(0.0);
  return v.loss.loss();
}

bool Validator::better(double value, std::optional<double> best) const {
  return !best || (o_.maximize ? value > *best : value < *best);
}

std::optional<Validation> Validator::validate(Trainer& trainer, int64_t epoch, std::optional<double> best) {
  if (subsets_.empty() || trainer.num_updates() < o_.validate_after_updates) return std::nullopt;
  std::optional<EmaWeights> ema_weights;  // the model holds the EMA until validation ends
  if (o_.validate_with_ema) ema_weights.emplace(*trainer.ema());
  std::optional<Validation> first;
  for (const ValidSubset& subset : subsets_) {
    size_t batches = 0;
    Validation result = validate_subset(trainer, subset, &batches);
    print(result, subset.first, epoch, batches, trainer.num_updates(), best);
    if (!first) first = result;
  }
  return first;
}

Validation Validator::validate_subset(Trainer& trainer, const ValidSubset& subset, size_t* num_batches) {
  const auto& [name, set] = subset;
  distributed::Gang& gang = trainer.gang();
  data::SizeFilterOptions filter = o_.filter;
  filter.what = name;
  auto batches = set->make_batches(o_.seed, false, filter, o_.batching);
  *num_batches = batches.size();
  criterions::LossStats local;
  std::unique_ptr<SearchMetric> search = search_metric_ ? search_metric_() : nullptr;
  for (size_t i = static_cast<size_t>(gang.rank()); i < batches.size(); i += static_cast<size_t>(gang.size())) {
    data::Batch batch = set->collate(batches[i]);
    local.add(trainer.valid_step(batch));
    if (search) search->add(trainer.model(), batch, gang.device());
  }
  // The search metric's statistics are summed, then scored: the BLEU of the whole subset.
  const std::vector<double> search_local = search ? search->statistics() : std::vector<double>{};
  distributed::CollectiveScope sums_scope("the validation sums of '" + name + "'");
  auto sums = distributed::all_reduce_dict(gang, sums_of(local, search_local));
  Validation result;
  if (search) {
    std::vector<double> search_sums(search_local.size());
    for (size_t k = 0; k < search_sums.size(); ++k)
      search_sums[k] = std::get<double>(sums.at(fmt::format("bleu_{:02d}", k)));
    result.bleu = search->score(search_sums);
    if (gang.rank() == 0) search->log_samples();
  }
  result.loss = loss_of(sums);
  return result;
}

void Validator::print(const Validation& v, const std::string& name, int64_t epoch, size_t batches, int64_t updates,
                      std::optional<double> best) const {
  const double value = metric(v);
  const double best_now = best ? (o_.maximize ? std::max(*best, value) : std::min(*best, value)) : value;
  core::ProgressOptions po;
  po.format = o_.format;
  po.epoch = epoch;
  po.prefix = fmt::format("epoch {:03d} | valid on '{}' subset", epoch, name);
  po.tensorboard_logdir = o_.tensorboard_logdir;
  const criterions::LossStats& total = v.loss;
  const double n = static_cast<double>(std::max<size_t>(1, batches));
  core::Stats shown{{"loss", total.loss(), 3}, {"nll_loss", total.nll_loss(), 3}, {"ppl", total.perplexity(), 2}};
  if (v.bleu) shown.push_back({"bleu", *v.bleu, 2});
  shown.push_back({"wpb", static_cast<double>(total.ntokens) / n, 1});
  shown.push_back({"bsz", static_cast<double>(total.nsentences) / n, 1});
  shown.push_back({"num_updates", static_cast<double>(updates), 0});
  shown.push_back({"best_" + o_.best_checkpoint_metric, best_now, 3});
  core::make_progress_bar(po)->print(shown, name);
}

}  // namespace fairseq_cpp::trainer
