#pragma once
// `fairseq-cpp-eval validate DATA --path CKPT [--valid-subset valid] [--max-tokens N]`
// (fairseq-validate): the checkpoint's own criterion summed over whole subsets in eval mode,
// reported in base 2 like fairseq.

#include <string>
#include <vector>

#include "fairseq_cpp/criterions/cross_entropy.h"
#include "fairseq_cpp/tasks/program.h"

namespace fairseq_cpp::tasks {

struct SubsetLoss {
  std::string subset;           // e.g. "valid"
  criterions::LossStats stats;  // summed over the subset
  int64_t batches = 0;          // batches evaluated
};

// Evaluates `cfg.common_eval.path` on each subset of `cfg.dataset.valid_subset` in `cfg.task.data`.
std::vector<SubsetLoss> validate(const config::Config& cfg);

// fairseq-validate's line: "valid on 'valid' subset | loss 4.733 | nll_loss 3.359 | ppl 10.26 | ...".
std::string format_subset_loss(const SubsetLoss& result);

int validate_main(const Invocation& inv);

}  // namespace fairseq_cpp::tasks
