// fairseq-cpp-generate: see `fairseq-cpp-generate --help`.
#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/tasks/programs.h"

int main(int argc, char** argv) {
  using namespace fairseq_cpp::tasks;
  fairseq_cpp::core::reexec_with_cpu_runtime_settings(argc, argv);
  fairseq_cpp::core::exit_without_teardown(run_program(argc, argv, generate_spec(), generate_main));
}
