// fairseq-cpp-interactive: see `fairseq-cpp-interactive --help`.
#include "fairseq_cpp/tasks/programs.h"

int main(int argc, char** argv) {
  using namespace fairseq_cpp::tasks;
  return run_program(argc, argv, interactive_spec(), interactive_main);
}
