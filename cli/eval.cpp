// fairseq-cpp-eval: see `fairseq-cpp-eval --help`.
#include "fairseq_cpp/tasks/programs.h"

int main(int argc, char** argv) {
  using namespace fairseq_cpp::tasks;
  return run_program(argc, argv, eval_spec(), eval_main);
}
