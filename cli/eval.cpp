// fairseq-cpp-eval: see `fairseq-cpp-eval --help`.
#include <cstring>

#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/tasks/programs.h"

int main(int argc, char** argv) {
  using namespace fairseq_cpp::tasks;
  // `score` runs no model: the thread settings do not matter, and re-executing would load
  // LibTorch twice for a program that is often run once per file.
  if (argc < 2 || std::strcmp(argv[1], "score") != 0) fairseq_cpp::core::reexec_with_cpu_runtime_settings(argc, argv);
  return run_program(argc, argv, eval_spec(), eval_main);
}
