// The programs' command lines; each program's body lives in its own file (train.cpp, preprocess.cpp,
// generate.cpp, eval.cpp) so that a program links only what it uses: preprocess loads no LibTorch.
#include "fairseq_cpp/tasks/programs.h"

namespace fairseq_cpp::tasks {

const config::ProgramSpec& train_spec() {
  static const config::ProgramSpec spec{
      "fairseq-cpp-train",
      "fairseq-cpp-train [CONFIG.yaml] [DATA] [section.key=value ...] [--flag value ...]",
      "Train a sequence-to-sequence model (fairseq-train). The launch mode (single process, local spawn,\n"
      "SLURM or torchrun) is chosen from the config and the environment.",
      {"common", "distributed_training", "dataset", "task", "model", "criterion", "optimizer", "lr_scheduler",
       "optimization", "checkpoint", "ema"},
      "task.data",
      {{"dry-run-distributed", "print the resolved distributed topology of this process and exit"}},
      {}};
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
      {}};
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
      {}};
  return spec;
}

const config::ProgramSpec& interactive_spec() {
  static const config::ProgramSpec spec{
      "fairseq-cpp-interactive",
      "fairseq-cpp-interactive DATA --path CHECKPOINT [--beam 5] [--flag value ...] < input.txt",
      "Translate raw text from standard input line by line (fairseq-interactive).",
      {"common", "common_eval", "dataset", "task", "generation", "interactive"},
      "task.data",
      {},
      {}};
  return spec;
}

const config::ProgramSpec& score_spec() {
  static const config::ProgramSpec spec{
      "fairseq-cpp-score",
      "fairseq-cpp-score --sys HYP --ref REF [REF ...] [--metric bleu,chrf,chrf++,ter] [--flag value ...]",
      "sacreBLEU's BLEU, chrF, chrF++ and TER of a hypothesis file against one or more reference files,\n"
      "with sacreBLEU's options and signatures (fairseq-score; the same as fairseq-cpp-eval score).",
      {"scoring"},
      "",
      {},
      {}};
  return spec;
}

const config::ProgramSpec& eval_spec() {
  static const config::ProgramSpec spec{
      "fairseq-cpp-eval",
      "fairseq-cpp-eval validate DATA --path CHECKPOINT [--valid-subset valid] [--max-tokens N]\n"
      "       fairseq-cpp-eval score --sys HYP --ref REF [REF ...] [--metric bleu,chrf,chrf++,ter]\n"
      "       fairseq-cpp-eval average --inputs A.pt B.pt ... | --inputs DIR --num-epoch-checkpoints N --output OUT.pt",
      "Evaluate: the loss and perplexity of a checkpoint on a split (fairseq-validate), sacreBLEU's metrics\n"
      "of a hypothesis file (fairseq-score; also fairseq-cpp-score, which starts faster), or average\n"
      "checkpoints into one (fairseq's scripts/average_checkpoints.py).",
      {"common", "common_eval", "dataset", "task", "criterion", "scoring", "average"},
      "task.data",
      {},
      {{"validate", "loss/nll/perplexity of a checkpoint on a split"},
       {"score", "BLEU, chrF, chrF++ and TER of a hypothesis file against references"},
       {"average", "average the parameters of several checkpoints into one (average_checkpoints.py)"}}};
  return spec;
}

}  // namespace fairseq_cpp::tasks
