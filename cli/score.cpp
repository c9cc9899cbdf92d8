// fairseq-cpp-score: see `fairseq-cpp-score --help`. Links no LibTorch.
#include "fairseq_cpp/tasks/programs.h"

int main(int argc, char** argv) {
  using namespace fairseq_cpp::tasks;
  return run_program(argc, argv, score_spec(), score_program_main);
}
