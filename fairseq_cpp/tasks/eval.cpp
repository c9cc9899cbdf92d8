// fairseq-cpp-eval's body: `validate` (fairseq-validate) or `score` (fairseq-score).
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/tasks/compute_setup.h"
#include "fairseq_cpp/tasks/programs.h"

namespace fairseq_cpp::tasks {

int eval_main(const Invocation& inv) {
  raise<NotImplementedError>("`{}` is not available yet (issues #5 and #7).", inv.command_line.subcommand);
}

}  // namespace fairseq_cpp::tasks
