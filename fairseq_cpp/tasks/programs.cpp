#include "fairseq_cpp/tasks/programs.h"

#include <fmt/core.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/tasks/distributed_setup.h"

namespace fairseq_cpp::tasks {

const config::ProgramSpec& train_spec() {
  static const config::ProgramSpec spec{
      "fairseq-cpp-train",
      "fairseq-cpp-train [CONFIG.yaml] [section.key=value ...] [--flag value ...]",
      "Train a sequence-to-sequence model (fairseq-train). The launch mode (single process, local spawn,\n"
      "SLURM or torchrun) is chosen from the config and the environment.",
      {"common", "distributed_training", "dataset", "task", "model", "criterion", "optimizer", "lr_scheduler",
       "optimization", "checkpoint"},
      "",
      {{"dry-run-distributed", "print the resolved distributed topology of this process and exit"}},
      {},
      true};
  return spec;
}

const config::ProgramSpec& preprocess_spec() {
  static const config::ProgramSpec spec{
      "fairseq-cpp-preprocess",
      "fairseq-cpp-preprocess [CONFIG.yaml] --source-lang SRC --target-lang TGT --trainpref P "
      "[--validpref P] [--testpref P] --destdir DIR [--flag value ...]",
      "Build dictionaries and binarize parallel text into a fairseq data-bin (fairseq-preprocess),\n"
      "optionally training or applying a SentencePiece model first.",
      {"common", "task", "dataset", "preprocess"},
      "",
      {},
      {},
      false};
  return spec;
}

const config::ProgramSpec& generate_spec() {
  static const config::ProgramSpec spec{
      "fairseq-cpp-generate",
      "fairseq-cpp-generate DATA --path CHECKPOINT [--gen-subset test] [--beam 5] [--flag value ...]",
      "Translate a binarized test set with beam search and print S-/T-/H-/D-/P- lines and BLEU\n"
      "(fairseq-generate).",
      {"common", "common_eval", "dataset", "task", "generation"},
      "task.data",
      {},
      {},
      true};
  return spec;
}

const config::ProgramSpec& interactive_spec() {
  static const config::ProgramSpec spec{
      "fairseq-cpp-interactive",
      "fairseq-cpp-interactive DATA --path CHECKPOINT [--beam 5] [--flag value ...] < input.txt",
      "Translate raw text from standard input line by line (fairseq-interactive).",
      {"common", "common_eval", "task", "generation"},
      "task.data",
      {},
      {},
      true};
  return spec;
}

const config::ProgramSpec& eval_spec() {
  static const config::ProgramSpec spec{
      "fairseq-cpp-eval",
      "fairseq-cpp-eval validate DATA --path CHECKPOINT [--valid-subset valid] [--max-tokens N]\n"
      "       fairseq-cpp-eval score [--flag value ...]",
      "Evaluate: the loss and perplexity of a checkpoint on a split (fairseq-validate), or BLEU/chrF\n"
      "of a hypothesis file (fairseq-score).",
      {"common", "common_eval", "dataset", "task", "criterion"},
      "task.data",
      {},
      {{"validate", "loss/nll/perplexity of a checkpoint on a split"},
       {"score", "BLEU and chrF of a hypothesis file against references"}},
      true};
  return spec;
}

// The programs' work arrives issue by issue; until then they refuse honestly.
int train_main(const Invocation& inv) {
  distributed::Topology topology = distributed::resolve_topology(topology_inputs(inv.config));
  if (inv.command_line.switches.count("dry-run-distributed")) {
    fmt::print("{}\n", topology.describe());
    return kExitOk;
  }
  return distributed::launch(topology, inv.argv, launch_options(inv.config), [](distributed::Gang&) -> int {
    raise<NotImplementedError>("training is not available yet (issue #6).");
  });
}
int preprocess_main(const Invocation&) {
  raise<NotImplementedError>("preprocessing is not available yet (issue #4).");
}
int generate_main(const Invocation&) { raise<NotImplementedError>("generation is not available yet (issue #7)."); }
int interactive_main(const Invocation&) {
  raise<NotImplementedError>("interactive translation is not available yet (issue #7).");
}
int eval_main(const Invocation& inv) {
  raise<NotImplementedError>("`{}` is not available yet (issues #5 and #7).", inv.command_line.subcommand);
}

}  // namespace fairseq_cpp::tasks
