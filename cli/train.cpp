// fairseq-cpp-train: see `fairseq-cpp-train --help`.
#include "fairseq_cpp/tasks/programs.h"

int main(int argc, char** argv) {
  using namespace fairseq_cpp::tasks;
  return run_program(argc, argv, train_spec(), train_main);
}
