// The programs' command lines; each program's body lives in its own file (train.cpp, preprocess.cpp,
// generate.cpp, eval.cpp) so that a program links only what it uses: preprocess loads no LibTorch.
#include "fairseq_cpp/tasks/programs.h"

namespace fairseq_cpp::tasks {
namespace {

// Each program's keys are those its code reads (a test walks them); every program logs.
const config::KeySet kLogging{"common.log_file", "common.log_all_ranks"};

config::KeySet with_logging(config::KeySet keys) {
  keys.insert(keys.begin(), kLogging.begin(), kLogging.end());
  return keys;
}

// A translation model on a device, as generate, interactive and eval validate load it.
const config::KeySet kInference{"common.seed",
                                "common.cpu",
                                "common.cpu_threads",
                                "common.fp16",
                                "common.bf16",
                                "common_eval.path",
                                "common_eval.use_ema",
                                "task._name",
                                "task.data",
                                "task.source_lang",
                                "task.target_lang",
                                "task.max_source_positions",
                                "distributed_training.device_id",
                                "distributed_training.distributed_world_size"};

// The search and its output, as generate and interactive read them.
const config::KeySet kSearch{"common_eval.post_process",
                             "dataset.batch_size",
                             "generation.beam",
                             "generation.nbest",
                             "generation.max_len_a",
                             "generation.max_len_b",
                             "generation.min_len",
                             "generation.match_source_len",
                             "generation.unnormalized",
                             "generation.lenpen",
                             "generation.unkpen",
                             "generation.no_repeat_ngram_size",
                             "generation.sampling",
                             "generation.sampling_topk",
                             "generation.sampling_topp",
                             "generation.temperature",
                             "generation.diverse_beam_groups",
                             "generation.diverse_beam_strength",
                             "generation.print_alignment",
                             "generation.replace_unk",
                             "generation.quantize",
                             "generation.retain_dropout"};

config::KeySet join(config::KeySet keys, const config::KeySet& more) {
  keys.insert(keys.end(), more.begin(), more.end());
  return keys;
}

}  // namespace

const config::ProgramSpec& train_spec() {
  static const config::ProgramSpec spec{
      "fairseq-cpp-train",
      "fairseq-cpp-train [CONFIG.yaml] [DATA] [section.key=value ...] [--flag value ...]",
      "Train a sequence-to-sequence model (fairseq-train). The launch mode (single process, local spawn,\n"
      "SLURM or torchrun) is chosen from the config and the environment.",
      {"common",
       "distributed_training",
       "dataset.num_workers",
       "dataset.skip_invalid_size_inputs_valid_test",
       "dataset.max_tokens",
       "dataset.batch_size",
       "dataset.required_batch_size_multiple",
       "dataset.data_buffer_size",
       "dataset.train_subset",
       "dataset.valid_subset",
       "dataset.validate_interval",
       "dataset.validate_interval_updates",
       "dataset.validate_after_updates",
       "dataset.disable_validation",
       "dataset.max_tokens_valid",
       "dataset.batch_size_valid",
       "dataset.curriculum",
       "task",
       "model",
       "criterion",
       "optimizer",
       "lr_scheduler",
       "optimization",
       "checkpoint",
       "ema"},
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
      with_logging({"task._name", "task.source_lang", "task.target_lang", "dataset.dataset_impl", "preprocess"}),
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
      with_logging(join(kInference,
                        join(kSearch, {"common_eval.quiet", "common_eval.results_path", "dataset.gen_subset",
                                       "dataset.skip_invalid_size_inputs_valid_test", "dataset.max_tokens",
                                       "dataset.required_batch_size_multiple", "dataset.num_shards", "dataset.shard_id",
                                       "task.max_target_positions", "task.truncate_source", "generation.sacrebleu",
                                       "generation.score_reference", "generation.prefix_size"}))),
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
      with_logging(join(kInference, join(kSearch, {"generation.constraints", "interactive"}))),
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
      with_logging({"common.cpu_threads", "scoring"}),
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
      kLogging,
      "task.data",
      {},
      {{"validate", "loss/nll/perplexity of a checkpoint on a split",
        join(kInference, {"dataset.valid_subset", "dataset.skip_invalid_size_inputs_valid_test",
                          "dataset.max_tokens_valid", "dataset.max_tokens", "dataset.batch_size_valid",
                          "dataset.batch_size", "dataset.required_batch_size_multiple", "task.truncate_source"})},
       {"score",
        "BLEU, chrF, chrF++ and TER of a hypothesis file against references",
        {"common.cpu_threads", "scoring"}},
       {"average",
        "average the parameters of several checkpoints into one (average_checkpoints.py)",
        {"common_eval.use_ema", "average"}}}};
  return spec;
}

std::vector<const config::ProgramSpec*> all_program_specs() {
  return {&train_spec(), &preprocess_spec(), &generate_spec(), &interactive_spec(), &eval_spec(), &score_spec()};
}

}  // namespace fairseq_cpp::tasks
