// fairseq-cpp-preprocess: see `fairseq-cpp-preprocess --help`.
#include "fairseq_cpp/tasks/programs.h"

int main(int argc, char** argv) {
  using namespace fairseq_cpp::tasks;
  return run_program(argc, argv, preprocess_spec(), preprocess_main);
}
