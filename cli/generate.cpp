// fairseq-cpp-generate: see `fairseq-cpp-generate --help`.
#include "fairseq_cpp/tasks/programs.h"

int main(int argc, char** argv) {
  using namespace fairseq_cpp::tasks;
  return run_program(argc, argv, generate_spec(), generate_main);
}
