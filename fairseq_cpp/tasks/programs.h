#pragma once
// The programs: each one's command-line spec and its body. cli/*.cpp are one-line mains over these.

#include "fairseq_cpp/tasks/program.h"

namespace fairseq_cpp::tasks {

const config::ProgramSpec& train_spec();
const config::ProgramSpec& preprocess_spec();
const config::ProgramSpec& generate_spec();
const config::ProgramSpec& interactive_spec();
const config::ProgramSpec& eval_spec();
const config::ProgramSpec& score_spec();
// Every program's spec, for errors that name the programs reading a key.
std::vector<const config::ProgramSpec*> all_program_specs();

int train_main(const Invocation& inv);
int preprocess_main(const Invocation& inv);
int generate_main(const Invocation& inv);
int interactive_main(const Invocation& inv);
int eval_main(const Invocation& inv);
int score_program_main(const Invocation& inv);
// The scores of `cfg.scoring`'s files, printed as sacreBLEU prints them (fairseq-cpp-eval score too).
int score_main(const config::Config& cfg);
// Averages `cfg.average`'s checkpoints into its output (fairseq-cpp-eval average).
int average_main(const config::Config& cfg);

}  // namespace fairseq_cpp::tasks
